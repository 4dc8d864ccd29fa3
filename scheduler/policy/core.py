"""Placeholder: the real policy is being written (DESIGN.md §3)."""

from __future__ import annotations

from scheduler.policy.types import Decisions, Snapshot


def schedule(snapshot: Snapshot) -> Decisions:
    """One scheduling pass over ``snapshot``; returns the decisions to apply."""
    return Decisions()
