"""Policy tick benchmark (DESIGN.md §9): prints figures, asserts nothing.

    python bench/tick.py [--repeat 5] [--quick]

Sizes: 1,250 hosts × 8 GPUs, 60 budgets in 3 levels, 5,000 running and 20,000
pending (target: median ≤ 0.5 s); 4,000 hosts and 140,000 pending (≤ 2 s); and the
growth table for 1k, 10k, 100k pending on the first cluster.
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

from bench.synth import make_snapshot  # noqa: E402
from scheduler.policy import schedule  # noqa: E402


def timed(snapshot, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times = []
    dec = None
    for _ in range(repeat):
        t = time.perf_counter()
        dec = schedule(snapshot)
        times.append(time.perf_counter() - t)
    return statistics.median(times), dec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip the 140,000-pending size")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print()
    rows = [("1,250 hosts, 5,000 running, 20,000 pending", 1250, 5000, 20000, 0.5)]
    if not args.quick:
        rows.append(("4,000 hosts, 16,000 running, 140,000 pending", 4000, 16000, 140000, 2.0))
    print(f"{'size':48} {'median s':>9} {'target':>7}  {'starts':>6} {'stops':>6} {'reasons':>7}  verdict")
    for label, hosts, running, pending, target in rows:
        snap = make_snapshot(hosts, running, pending)
        med, dec = timed(snap, args.repeat if pending < 100000 else max(1, args.repeat // 2))
        verdict = "met" if med <= target else "MISSED"
        counts = f"{len(dec.starts):6} {len(dec.stops):6} {len(dec.pending):7}"
        print(f"{label:48} {med:9.3f} {target:7.1f}  {counts}  {verdict}")
    print()
    print("growth on 1,250 hosts × 8 GPUs, 5,000 running (n log n ratio = t(n)/t(1k) ÷ (n log n)/(1k log 1k))")
    print(f"{'pending':>8} {'median s':>9} {'per job µs':>10} {'vs n log n':>10}")
    base = None
    for n in (1000, 10000, 100000):
        snap = make_snapshot(1250, 5000, n)
        med, _ = timed(snap, args.repeat if n < 100000 else max(1, args.repeat // 2))
        nlogn = n * math.log(n)
        if base is None:
            base = (med, nlogn)
        ratio = (med / base[0]) / (nlogn / base[1])
        print(f"{n:8,} {med:9.3f} {med / n * 1e6:10.1f} {ratio:10.2f}")


if __name__ == "__main__":
    main()
