"""Estimated start times (DESIGN.md §3.8): run the policy forward in simulated time.

From the current state, with no new arrivals and no running workload ending on its
own, ticks are simulated at every instant where a decision can change — a
protection ending, a stop's grace ending — and on a coarse grid in between (usage
slides continuously with the window). The simulated start of each pending
workload is an upper bound on its real start ("by 14:05 at the latest"), given the
declared minimum runtimes; no start within one window means no estimate.
"""

from __future__ import annotations

import time

from scheduler.policy import Decisions, Snapshot
from scheduler.sim.engine import Engine, SimWorkload


def estimate_starts(
    snap: Snapshot, *, grace: int = 30, grid: int = 900, horizon: int | None = None, budget_s: float = 20.0
) -> dict[str, int]:
    """Pending workload id → estimated start (epoch seconds) for those that start within ``horizon``.

    ``grace`` is the stop-to-release time of simulated attempts (seconds); ``grid``
    the longest simulated gap between ticks (seconds); ``horizon`` defaults to the
    snapshot's window. ``budget_s`` bounds the wall-clock time spent: workloads not
    started when it runs out get no estimate. Pure: reads only ``snap``.
    """
    horizon = snap.window if horizon is None else horizon
    e = Engine(
        start=snap.now,
        window=snap.window,
        tick_interval=max(1, grid),
        grace=grace,
        max_reservations=snap.max_reservations,
        with_reasons=False,
    )
    for b in snap.budgets:
        e.add_budget(b)
    for h in snap.hosts:
        e.add_host(h)
    e.usage = list(snap.usage)
    e.nominations = dict(snap.nominations)
    for seq, a in enumerate(snap.attempts, start=1):
        w = SimWorkload(a.workload, a.budget, a.gpu_count, "", a.min_runtime, 0, seq)
        sa = e.add_running(w, a.gpus, a.started_at if a.started_at is not None else snap.now)
        sa.allocated = a.allocated
        sa.charged_until = a.charged_until
        if a.stopping:
            e.stop_attempt(sa, "preempted")
    waiting = {}
    # No running workload ends on its own here, so an unmet ``after`` list stays unmet and an
    # array group's cap frees no slot: those workloads get no estimate (docs/jobs.md).
    slots = {g: limit - holding for g, (limit, holding) in snap.group_limits.items()}
    for w in sorted(snap.pending, key=lambda w: (w.submitted_at, w.seq, w.id)):
        if w.waiting:
            continue
        if w.group is not None and w.group in slots:
            if slots[w.group] <= 0:
                continue
            slots[w.group] -= 1
        waiting[w.id] = w
        e.submit(SimWorkload(w.id, w.budget, w.gpus, w.model, w.min_runtime, w.submitted_at, w.seq))
    found: dict[str, int] = {}

    def note_starts(dec: Decisions) -> None:
        for st in dec.starts:
            if st.workload in waiting and st.workload not in found:
                found[st.workload] = e.now

    e.on_decisions = note_starts

    deadline = time.monotonic() + budget_s
    end = snap.now + horizon
    e.tick()
    while len(found) < len(waiting) and e.now < end and time.monotonic() < deadline:
        # The next instant where protection ends (nothing else changes on its own), capped by the grid.
        nxt = min(
            (
                a.started_at + a.min_runtime
                for a in e.attempts.values()
                if a.allocated and a.stop_reason is None and a.started_at + a.min_runtime > e.now
            ),
            default=end,
        )
        e.advance_to(min(nxt, e.now + grid, end))
    return found
