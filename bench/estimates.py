"""Estimated starts and quotes benchmark (DESIGN.md §9): prints figures, asserts nothing.

    nice -n 10 python bench/estimates.py [--repeat 3] [--hosts 1250] [--workloads 25000] [--budget 120]
    nice -n 10 python bench/estimates.py --quick     # the quote, and estimates, at demo size only
    nice -n 19 python bench/estimates.py --horizon 3600 --repeat 1   # the big state to now + 1 h, whole
    nice -n 19 python bench/estimates.py --drains 0,10,50 --repeat 3  # the big state with drains scheduled

Estimates: one forward simulation (``scheduler.sim.estimate.estimate_starts``) over a state the
policy itself produced (``bench.synth.make_settled``: 1,250 hosts × 8 GPUs, 60 budgets in 3
levels, ~5,000 running and ~20,000 pending; target ≤ 1 s, off the tick's path). Quotes: the
six minimum runtimes of a quote (0, 30 min, 2 h, 8 h, 24 h and 1 h as the user's own) for a 1-GPU
workload on a demo-size state (4 hosts × 8 GPUs, ~300 pending; target ≤ 300 ms for the whole
quote). CPU seconds (``time.process_time``): the box is shared.

Each estimate line also says how far the simulation got: the simulated instant it reached (the
window's end, 7 d, when it was complete; earlier when ``--budget`` CPU seconds ran out), the
instants it simulated (``ticks``), the simulated days per CPU second, the CPU ms per instant
and the policy's passes: run the same command on two trees back to back to compare them. ``--horizon S`` simulates the
big state to now + S whatever the CPU (a fixed amount of work, steadier to compare than the
instants a budget reaches on a shared box) and prints the estimates' hash (sha-256 of the sorted
(id, instant) pairs, the one docs/estimates.md quotes) to check that two trees agree.

``--drains 0,10,50`` (perf59) times only the big state's estimates, also with that percentage of
its hosts given a drain scheduled for later (``bench.synth.with_drains``: instants staggered over
the next 6 hours; the simulation drains each host at its instant, docs/deploy.md "Scheduled
drains"), the variants timed round-robin (one run each in turn, so a shared box's load falls on
all alike), each with its ratio to the first; with ``--horizon`` each runs to now + HORIZON.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.synth import make_settled, with_drains  # noqa: E402
from scheduler.policy import Decisions, IncrementalScheduler, Snapshot, Workload  # noqa: E402
from scheduler.sim import estimate as est  # noqa: E402
from scheduler.sim.estimate import forward, quote  # noqa: E402

QUOTE_MS = (0, 1800, 7200, 8 * 3600, 24 * 3600, 3600)  # scheduler.estimates.QUOTE_RUNTIMES_S and 1 h as the own


def cpu(fn, repeat: int):  # noqa: ANN001, ANN201
    times, out = [], None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), min(times), out


def state(hosts: int, workloads: int) -> Snapshot:
    return replace(make_settled(hosts, workloads).snapshot(), with_reasons=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=1250)
    ap.add_argument("--workloads", type=int, default=25000)
    ap.add_argument("--budget", type=float, default=120.0, help="CPU seconds one estimate run may take")
    ap.add_argument("--quick", action="store_true", help="only demo size: the quote, and estimates")
    ap.add_argument("--horizon", type=int, help="only the big state, simulated to now + HORIZON s whatever the CPU")
    ap.add_argument("--drains", help="percent of hosts draining-scheduled, e.g. 0,10,50 (the first: the base)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")

    if args.drains:
        drain_estimates(state(args.hosts, args.workloads), [float(p) for p in args.drains.split(",")], args)
        return
    if args.horizon is not None:
        estimates_bench(state(args.hosts, args.workloads), 1e9, args.repeat, None, args.horizon)
        return
    if not args.quick:
        estimates_bench(state(args.hosts, args.workloads), args.budget, args.repeat, 1.0)
    estimates_bench(state(4, 330), args.budget, 1, None)
    quote_bench(args)


def estimates_bench(
    snap: Snapshot, budget: float, repeat: int, target: float | None, horizon: int | None = None
) -> dict[str, Any]:
    """One forward simulation of ``snap`` (``repeat`` runs, each cut at ``budget`` CPU s or at now +
    ``horizon``), printed; returns its figures: median and min CPU s, the estimates found, the
    instant reached, the window's end, and the pending workloads."""
    allocated = sum(1 for w in snap.pending if w.min_runtime > 0)
    ticks = [0, 0]
    tick = est.Forward.tick
    policy = IncrementalScheduler.__call__

    def counted(self: est.Forward, max_passes: int = 50) -> None:
        ticks[0] += 1
        tick(self, max_passes)

    def passed(self: IncrementalScheduler, s: Snapshot) -> Decisions:
        ticks[1] += 1
        return policy(self, s)

    est.Forward.tick = counted  # type: ignore[method-assign]
    IncrementalScheduler.__call__ = passed  # type: ignore[method-assign,assignment]
    try:
        med, low, (found, reached) = cpu(lambda: forward(snap, budget_s=budget, horizon=horizon), repeat)
    finally:
        est.Forward.tick = tick  # type: ignore[method-assign]
        IncrementalScheduler.__call__ = policy  # type: ignore[method-assign]
    days = (reached - snap.now) / 86400
    verdict = "" if target is None else f" (target {target:g} s: {'met' if med <= target else 'MISSED'})"
    print(
        f"estimates  {len(snap.hosts):5} hosts {len(snap.attempts):6,} running {len(snap.pending):7,} pending "
        f"({allocated:,} allocated): median {med:.3f} s, min {low:.3f} s CPU{verdict}; {len(found):,} estimated "
        f"({100 * len(found) / max(1, len(snap.pending)):.1f} %); reached now + {days:.3f} d "
        f"({reached - snap.now:,} s) of {snap.window / 86400:g} d in {ticks[0] // repeat:,} ticks "
        f"({days / max(med, 1e-9):.4f} d per CPU s, {1000 * med / max(1, ticks[0] // repeat):.1f} ms per tick, "
        f"{ticks[1] // repeat:,} policy passes)"
    )
    if horizon is not None:
        digest = hashlib.sha256(repr(sorted(found.items())).encode()).hexdigest()
        print(f"           to now + {horizon:,} s: estimates' hash {digest[:8]}")
    return {
        "cpu_s": med,
        "min_s": low,
        "estimated": len(found),
        "pending": len(snap.pending),
        "reached": reached,
        "now": snap.now,
        "window_end": snap.now + snap.window,
    }


def drain_estimates(snap: Snapshot, percents: list[float], args: argparse.Namespace) -> None:
    """The big state's estimates with each percentage of its hosts draining-scheduled, round-robin."""
    snaps = [with_drains(snap, p) for p in percents]
    budget = 1e9 if args.horizon is not None else args.budget
    times: list[list[float]] = [[] for _ in snaps]
    outs: list[tuple[dict[str, int], int]] = [({}, 0) for _ in snaps]
    counts = [[0, 0] for _ in snaps]
    tick, policy = est.Forward.tick, IncrementalScheduler.__call__
    now = [0]

    def counted(self: est.Forward, max_passes: int = 50) -> None:
        counts[now[0]][0] += 1
        tick(self, max_passes)

    def passed(self: IncrementalScheduler, s: Snapshot) -> Decisions:
        counts[now[0]][1] += 1
        return policy(self, s)

    est.Forward.tick = counted  # type: ignore[method-assign]
    IncrementalScheduler.__call__ = passed  # type: ignore[method-assign,assignment]
    try:
        for _ in range(args.repeat):
            for i, s in enumerate(snaps):
                now[0] = i
                t = time.process_time()
                outs[i] = forward(s, budget_s=budget, horizon=args.horizon)
                times[i].append(time.process_time() - t)
    finally:
        est.Forward.tick = tick  # type: ignore[method-assign]
        IncrementalScheduler.__call__ = policy  # type: ignore[method-assign]
    base = statistics.median(times[0])
    for p, s, ts, (found, reached), (ticks, passes) in zip(percents, snaps, times, outs, counts, strict=True):
        med = statistics.median(ts)
        drains = sum(1 for h in s.hosts if h.drain_at is not None)
        digest = hashlib.sha256(repr(sorted(found.items())).encode()).hexdigest()[:8]
        ticks, passes = ticks // args.repeat, passes // args.repeat
        print(
            f"estimates {len(s.hosts):5} hosts, {p:4g} % drain ({drains:4}): median {med:.3f} s CPU "
            f"(target 1 s: {'met' if med <= 1.0 else 'MISSED'}) ×{med / base:.3f} of {percents[0]:g} %; "
            f"{len(found):,} estimated, reached now + {reached - s.now:,} s in {ticks:,} ticks "
            f"({1000 * med / max(1, ticks):.1f} ms per tick, {passes:,} passes), hash {digest}; "
            f"{[round(t, 3) for t in ts]}"
        )


def quote_times(repeat: int) -> tuple[Snapshot, list[tuple[str, float, float, float, list[Any]]]]:
    """The quote for a 1-GPU workload of two budgets, at demo size: the bench's first pending
    workload's (very over-served: no start within the window, so the search runs to its CPU budget)
    and the budget of the workload the estimates start first (allocated variants start within
    hours; the unallocated one, ``M = 0``, never: idle GPUs only). The demo state, and per budget:
    (budget, its display ratio, median and min CPU s of ``repeat`` quotes, the last quote's rows)."""
    from scheduler.policy.pass_state import PassState

    demo = state(4, 330)
    standing = PassState(demo)
    found = forward(demo, budget_s=5.0)[0]
    first = min(found, key=lambda wid: (found[wid], wid))
    starts = next(w.budget for w in demo.pending if w.id == first)
    out = []
    for budget in (demo.pending[0].budget, starts):
        w = Workload("q", budget, 1, "H100", 3600, demo.now, 0)
        med, low, rows = cpu(lambda w=w: quote(demo, w, QUOTE_MS), repeat)
        out.append((budget, standing.display_ratio(budget, 0), med, low, rows))
    return demo, out


def quote_bench(args: argparse.Namespace) -> None:
    """The quotes of ``quote_times``, printed (at least 5 runs each)."""
    demo, quotes = quote_times(max(args.repeat, 5))
    for budget, ratio, med, low, rows in quotes:
        print(
            f"quote      {len(demo.hosts):5} hosts {len(demo.attempts):6,} running {len(demo.pending):7,} pending, "
            f"budget {budget} (ratio {ratio:.3f}), {len(QUOTE_MS)} minimum runtimes: "
            f"median {med * 1000:.0f} ms, min {low * 1000:.0f} ms CPU "
            f"(target 300 ms: {'met' if med <= 0.3 else 'MISSED'})"
        )
        for r in rows:
            start = (
                f"none before now + {(r.searched_until - demo.now) / 86400:.2f} d"
                if r.start is None
                else f"now + {(r.start - demo.now) / 60:.0f} min"
            )
            print(
                f"    M = {r.min_runtime / 3600:4.1f} h: start {start}, "
                f"charge {r.charge_gpu_seconds / 3600:.1f} GPU-h, ratio after {r.ratio_after:.4f}"
            )


if __name__ == "__main__":
    main()
