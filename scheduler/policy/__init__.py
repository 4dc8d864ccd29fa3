"""Fairway's scheduling policy: pure, deterministic, no Django (DESIGN.md §3).

Entry point: :func:`schedule` takes a :class:`Snapshot` and returns :class:`Decisions`.
:class:`IncrementalScheduler` gives the same decisions for a sequence of snapshots, keeping
the cluster state between passes (simulations, the scenario engine).
"""

from scheduler.policy.core import schedule
from scheduler.policy.incremental import IncrementalScheduler
from scheduler.policy.types import (
    Attempt,
    Budget,
    Cap,
    Decisions,
    GpuHealth,
    GpuRef,
    Hold,
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
    "Cap",
    "Decisions",
    "GpuHealth",
    "GpuRef",
    "Hold",
    "Host",
    "HostState",
    "IncrementalScheduler",
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
