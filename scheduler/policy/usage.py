"""Windowed usage and committed usage (DESIGN.md §3.1, §3.2).

All results are integer GPU-seconds per budget (the budget's own charges only;
roll up with :meth:`BudgetTree.roll_up`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.policy.types import Attempt, GpuRef, UsageRecord, Workload


def overlap(start: int, end: int, window_start: int, now: int) -> int:
    """Seconds of ``[start, end]`` inside the window ``(window_start, now]`` (pro-rata edges)."""
    lo = max(start, window_start)
    hi = min(end, now)
    return hi - lo if hi > lo else 0


def windowed_usage(
    records: Iterable[UsageRecord], attempts: Iterable[Attempt], now: int, window: int
) -> dict[str, int]:
    """``U`` per budget, own charges only, in GPU-seconds over ``(now − window, now]``.

    Closed intervals count pro-rata; lumps count when charged inside the window;
    allocated open attempts count the part already run (stopping ones too: they
    are charged until release). Unallocated time is never counted.
    """
    window_start = now - window
    usage: dict[str, int] = {}
    for r in records:
        if r.gpus is None:
            amount = r.gpu_seconds if window_start < r.end <= now else 0
        else:
            amount = r.gpus * overlap(r.start, r.end, window_start, now)
        if amount:
            usage[r.budget] = usage.get(r.budget, 0) + amount
    for a in attempts:
        if a.allocated and a.started_at is not None:
            end = now if a.charged_until is None else min(now, a.charged_until)
            amount = a.gpu_count * overlap(a.started_at, end, window_start, now)
            if amount:
                usage[a.budget] = usage.get(a.budget, 0) + amount
    return usage


def committed_usage(
    attempts: Iterable[Attempt],
    now: int,
    nominated: Mapping[str, tuple[GpuRef, ...]],
    pending: Mapping[str, Workload],
) -> dict[str, int]:
    """``C`` per budget (own only), GPU-seconds of protection still ahead.

    A running allocated attempt commits ``gpus × max(0, protected_until − now)``;
    a starting one ``gpus × M`` (its window begins at the confirmed start); a
    pending workload with nominated GPUs commits ``gpus × M`` from the nomination.
    Stopping attempts commit nothing.
    """
    c: dict[str, int] = {}
    for a in attempts:
        if not a.allocated or a.stopping:
            continue
        if a.started_at is None:
            amount = a.gpu_count * a.min_runtime
        else:
            amount = a.gpu_count * max(0, a.started_at + a.min_runtime - now)
        if amount:
            c[a.budget] = c.get(a.budget, 0) + amount
    for wid in nominated:
        w = pending.get(wid)
        if w is not None and w.allocated:
            c[w.budget] = c.get(w.budget, 0) + w.gpus * w.min_runtime
    return c


def own_load(usage: Mapping[str, int], committed: Mapping[str, int]) -> dict[str, int]:
    """``U + C`` per budget (own only, GPU-seconds): the load ranked by (DESIGN.md §3.2)."""
    out = dict(usage)
    for k, v in committed.items():
        out[k] = out.get(k, 0) + v
    return out
