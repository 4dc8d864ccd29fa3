"""Policy tick benchmark (DESIGN.md §9): prints figures, asserts nothing.

    python bench/tick.py [--repeat 5] [--quick]

States are produced by the policy itself (``bench.synth.make_settled``): all workloads
arrive on an empty cluster, one tick places what fits, 10 minutes pass, and the tick
being timed is the next one — the ordinary tick of a busy cluster, pending reasons
included; a second row lets an hour pass without a tick (attempts exit, protections
expire), so the timed tick starts work. Sizes: 1,250 hosts × 8 GPUs, 60 budgets in 3
levels, ~5,000 running and ~20,000 pending (target: median ≤ 0.25 s); 4,000 hosts and ~140,000 pending (≤ 2 s);
the growth table for 1k, 10k, 100k pending on 1,250 hosts. A "cold" row times a
pass over a random state in which thousands of running attempts violate fair share
at once (every one a preemption search): not a target, shown for honesty.
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

from bench.synth import make_settled, make_snapshot  # noqa: E402
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip the 4,000-host size and the 100k growth row")
    args = ap.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}; "
        f"median CPU s of {args.repeat} passes"
    )
    print()
    print(f"{'state':34} {'running':>7} {'pending':>8} {'starts':>6} {'stops':>6} {'median s':>9} {'target':>7}")
    row("1,250 hosts (10,000 GPUs)", make_settled(1250, 25000).snapshot(), args.repeat, 0.25)
    row("1,250 hosts, 1 h without a tick", make_settled(1250, 25000, after=3600).snapshot(), args.repeat, None)
    if not args.quick:
        row("4,000 hosts (32,000 GPUs)", make_settled(4000, 160000).snapshot(), max(1, args.repeat // 2), 2.0)
    row("cold: 1,250 hosts, random state", make_snapshot(1250, 5000, 3000), 1, None)
    print()
    print("growth on 1,250 hosts × 8 GPUs (ratio = t(n)/t(1k) ÷ (n log n)/(1k log 1k); ≤ 1 is n log n or better)")
    print(f"{'pending':>8} {'median s':>9} {'µs/job':>8} {'ratio':>6}")
    base: tuple[float, float] | None = None
    sizes = (1000, 10000) if args.quick else (1000, 10000, 100000)
    for n in sizes:
        snap = make_settled(1250, 5500 + n).snapshot()
        med, _ = timed(snap, args.repeat)
        pending = len(snap.pending)
        nlogn = pending * math.log(pending)
        if base is None:
            base = (med, nlogn)
        ratio = (med / base[0]) / (nlogn / base[1])
        print(f"{pending:8,} {med:9.3f} {med / pending * 1e6:8.1f} {ratio:6.2f}")


if __name__ == "__main__":
    main()
