"""Policy tick benchmark (DESIGN.md §9): prints figures, asserts nothing.

    python bench/tick.py [--repeat 5] [--quick] [--drains 0,10,50] [--only 1250|4000]

States are produced by the policy itself (``bench.synth.make_settled``): all workloads
arrive on an empty cluster, one tick places what fits, 10 minutes pass, and the tick
being timed is the next one — the ordinary tick of a busy cluster, pending reasons
included; a second row lets an hour pass without a tick (attempts exit, protections
expire), so the timed tick starts work. Sizes: 1,250 hosts × 8 GPUs, 60 budgets in 3
levels, ~5,000 running and ~20,000 pending (target: median ≤ 0.25 s); 4,000 hosts and ~140,000 pending (≤ 2 s);
the growth table for 1k, 10k, 100k pending on 1,250 hosts. A "cold" row times a
pass over a random state in which thousands of running attempts violate fair share
at once (every one a preemption search): not a target, shown for honesty.

``--drains 0,10,50`` (perf59) times each of the three settled rows also with that percentage of
its hosts given a drain scheduled for later (``bench.synth.with_drains``: instants staggered over
the next 6 hours, docs/deploy.md "Scheduled drains"); the variants of a row are timed round-robin,
one pass each in turn, so a shared box's load falls on all alike, and each prints its ratio to
the row without drains. ``--only 1250`` (or ``4000``) times only that size's settled rows (the
cold row and the growth table are left out with ``--drains`` or ``--only``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.synth import make_settled, make_snapshot, with_drains  # noqa: E402
from scheduler.policy import Decisions, Snapshot, schedule  # noqa: E402


def timed(snapshot: Snapshot, repeat: int) -> tuple[float, Decisions]:
    """Median CPU seconds (``time.process_time``: the box is shared, wall-clock is not this
    process's) of ``repeat`` policy passes over ``snapshot``, and the last decisions."""
    times = []
    dec = Decisions()
    for _ in range(repeat):
        t = time.process_time()
        dec = schedule(snapshot)
        times.append(time.process_time() - t)
    return statistics.median(times), dec


def row(label: str, snap: Snapshot, repeat: int, target: float | None) -> float:
    med, dec = timed(snap, repeat)
    verdict = "" if target is None else ("met" if med <= target else "MISSED")
    tgt = "-" if target is None else f"{target:.2f}"
    counts = f"{len(snap.attempts):7,} {len(snap.pending):8,} {len(dec.starts):6} {len(dec.stops):6}"
    print(f"{label:34} {counts} {med:9.3f} {tgt:>7}  {verdict}")
    return med


def drain_rows(label: str, snap: Snapshot, repeat: int, target: float | None, percents: list[float]) -> None:
    """``label``'s state with each percentage of its hosts draining-scheduled, timed round-robin."""
    snaps = [with_drains(snap, p) for p in percents]
    times: list[list[float]] = [[] for _ in snaps]
    decs = [Decisions() for _ in snaps]
    for _ in range(repeat):
        for i, s in enumerate(snaps):
            t = time.process_time()
            decs[i] = schedule(s)
            times[i].append(time.process_time() - t)
    base = statistics.median(times[0])
    for p, s, ts, dec in zip(percents, snaps, times, decs, strict=True):
        med = statistics.median(ts)
        drains = sum(1 for h in s.hosts if h.drain_at is not None)
        verdict = "" if target is None else ("met" if med <= target else "MISSED")
        tgt = "-" if target is None else f"{target:.2f}"
        counts = f"{len(s.attempts):7,} {len(s.pending):8,} {len(dec.starts):6} {len(dec.stops):6}"
        name = f"{label}, {p:g} % drain ({drains})"
        print(f"{name:44} {counts} {med:9.3f} {tgt:>7}  {verdict:6} ×{med / base:.3f} of 0 %, {ts}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip the 4,000-host size and the 100k growth row")
    ap.add_argument("--drains", help="percent of hosts draining-scheduled, e.g. 0,10,50 (the first: the base)")
    ap.add_argument("--only", type=int, choices=(1250, 4000), help="only this size's settled rows")
    args = ap.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}; "
        f"median CPU s of {args.repeat} passes"
    )
    print()
    if args.drains or args.only:
        percents = [float(p) for p in (args.drains or "0").split(",")]
        print(f"{'state':44} {'running':>7} {'pending':>8} {'starts':>6} {'stops':>6} {'median s':>9} {'target':>7}")
        if args.only != 4000:
            drain_rows("1,250 hosts", make_settled(1250, 25000).snapshot(), args.repeat, 0.25, percents)
            drain_rows(
                "1,250 hosts, 1 h w/o tick",
                make_settled(1250, 25000, after=3600).snapshot(),
                args.repeat,
                None,
                percents,
            )
        if args.only != 1250 and not args.quick:
            drain_rows("4,000 hosts", make_settled(4000, 160000).snapshot(), args.repeat, 2.0, percents)
        return
    print(f"{'state':34} {'running':>7} {'pending':>8} {'starts':>6} {'stops':>6} {'median s':>9} {'target':>7}")
    row("1,250 hosts (10,000 GPUs)", make_settled(1250, 25000).snapshot(), args.repeat, 0.25)
    row("1,250 hosts, 1 h without a tick", make_settled(1250, 25000, after=3600).snapshot(), args.repeat, None)
    if not args.quick:
        row("4,000 hosts (32,000 GPUs)", make_settled(4000, 160000).snapshot(), max(1, args.repeat // 2), 2.0)
    row("cold: 1,250 hosts, random state", make_snapshot(1250, 5000, 3000), 1, None)
    print()
    print("growth on 1,250 hosts × 8 GPUs (ratio = t(n)/t(1k) ÷ (n log n)/(1k log 1k); ≤ 1 is n log n or better)")
    print(f"{'pending':>8} {'median s':>9} {'µs/job':>8} {'ratio':>6}")
    for pending, med, ratio in growth((1000, 10000) if args.quick else (1000, 10000, 100000), args.repeat):
        print(f"{pending:8,} {med:9.3f} {med / pending * 1e6:8.1f} {ratio:6.2f}")


def growth(sizes: tuple[int, ...], repeat: int, hosts: int = 1250) -> list[tuple[int, float, float]]:
    """The growth table: for each size ``n`` a settled state on ``hosts`` hosts with about ``n`` pending
    workloads (``5,500 + n`` arrivals at 1,250 hosts, scaled with the hosts), and per row (pending,
    median CPU s, ratio = t(n)/t(first) ÷ (n log n)/(first log first): ≤ 1 is n log n or better)."""
    rows: list[tuple[int, float, float]] = []
    base: tuple[float, float] | None = None
    for n in sizes:
        snap = make_settled(hosts, 5500 * hosts // 1250 + n).snapshot()
        med, _ = timed(snap, repeat)
        pending = len(snap.pending)
        nlogn = pending * math.log(pending)
        if base is None:
            base = (med, nlogn)
        rows.append((pending, med, (med / base[0]) / (nlogn / base[1])))
    return rows


if __name__ == "__main__":
    main()
