"""Fairway's scheduling policy: pure, deterministic, no Django (DESIGN.md §3).

Entry point: :func:`schedule` takes a :class:`Snapshot` and returns :class:`Decisions`.
"""

from scheduler.policy.core import schedule
from scheduler.policy.types import (
    Attempt,
    Budget,
    Decisions,
    GpuHealth,
    GpuRef,
    Host,
    HostState,
    OnCap,
    PendingInfo,
    PendingReason,
    Snapshot,
    Start,
    Stop,
    StopReason,
    UsageRecord,
    Workload,
)

__all__ = [
    "Attempt",
    "Budget",
    "Decisions",
    "GpuHealth",
    "GpuRef",
    "Host",
    "HostState",
    "OnCap",
    "PendingInfo",
    "PendingReason",
    "Snapshot",
    "Start",
    "Stop",
    "StopReason",
    "UsageRecord",
    "Workload",
    "schedule",
]
