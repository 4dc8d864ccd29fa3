"""The long profile of the oracle comparison (issue 12): ``schedule()`` against the reference
scheduler (scheduler/policy/reference.py) on every pass of ≥ 50,000 random clusters.

    python bench/oracle_soak.py                      # 50,000 clusters + 20,000 crowded passes
    python bench/oracle_soak.py --clusters 200000 --first 10**6 --jobs 2
    FAIRWAY_ORACLE_STRICT=1 python bench/oracle_soak.py   # known faults count as disagreements

Prints what was compared (clusters, passes, starts, preemptions, reservations, reasons), the
known fast-path faults seen (with the first seed of each) and every other disagreement (seed,
instant, differences). Exit status 1 when an unknown disagreement was found. The clusters are
those of tests/policy/oracle_harness.py (the ``make test`` profile runs 2,000 of them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pool

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.policy.oracle_harness import Tally, compare_once, run_cluster  # noqa: E402

CHUNK = 250


def _chunk(first: int) -> Tally:
    tally = Tally()
    for seed in range(first, first + CHUNK):
        run_cluster(seed, tally)
    del tally.unknown[20:]  # enough to read; the seeds replay the rest
    return tally


def _crowded_chunk(first: int) -> Tally:
    tally = Tally()
    for seed in range(first, first + CHUNK):
        compare_once(seed, tally)
    del tally.unknown[20:]
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=50_000)
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--crowded", type=int, default=20_000, help="single crowded passes compared too")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (the box is shared: default 1)")
    args = ap.parse_args()
    starts = list(range(args.first, args.first + args.clusters, CHUNK))
    total = Tally()
    t0 = time.perf_counter()
    with Pool(args.jobs) as pool:
        for n, tally in enumerate(pool.imap(_chunk, starts), 1):
            total.merge(tally)
            if n % 20 == 0 or n == len(starts):
                print(
                    f"{total.clusters:>7} clusters  {total.passes:>9} passes  {time.perf_counter() - t0:7.1f} s  "
                    f"known {dict(total.known)}  unknown {len(total.unknown)}",
                    flush=True,
                )
        crowded = Tally()
        for tally in pool.imap(_crowded_chunk, range(args.first, args.first + args.crowded, CHUNK)):
            crowded.merge(tally)
    wall = time.perf_counter() - t0
    print(
        f"crowded passes: {crowded.clusters} compared, preemptions {crowded.preemptions}, "
        f"known {dict(crowded.known)}, unknown {len(crowded.unknown)} (seeds {[s for s, _, _ in crowded.unknown[:20]]})"
    )
    print(f"\n{total.clusters} clusters, {total.passes} passes compared in {wall:.1f} s ({args.jobs} job(s))")
    print(
        f"starts {total.starts}, preemptions {total.preemptions}, reservations {total.reservations}, "
        f"passes with nominations {total.nominated_passes}, gang starts {total.gangs_started}"
    )
    print("pending reasons (reference):", dict(total.reasons.most_common()))
    for kind, count in sorted(total.known.items()):
        seed, snap = total.known_examples[kind]
        print(f"known fault ({kind}): {count} passes; first seed {seed} at now={snap.now}")
    seeds = sorted({s for s, _, _ in total.unknown})
    print(f"unknown disagreements: {len(total.unknown)} passes, seeds {seeds[:50]}")
    for seed, snap, diff in total.unknown[:5]:
        print(f"\nseed {seed}, now={snap.now}:")
        for line in diff:
            print("  " + line)
    for seed, _, diff in crowded.unknown[:3]:
        print(f"\ncrowded seed {seed}:")
        for line in diff:
            print("  " + line)
    return 1 if total.unknown or crowded.unknown else 0


if __name__ == "__main__":
    raise SystemExit(main())
