#!/usr/bin/env python3
"""Find the demo's busy stretch of the Philly trace and print its facts (docs/demo.md records them).

The task describes it as: "around day 60, 500 jobs arrive within about 13 hours with a median run
time of 34 minutes and none larger than 8 GPUs". This script

1. takes the 500 consecutive jobs starting with the first job submitted on day 60
   (``submit_time_s >= 60 × 86,400``) and prints their facts;
2. scans every window of 500 consecutive jobs starting within ``--days`` days of day 60 that has no
   job above 8 GPUs, and prints the windows whose span and median run time are closest to
   13 h / 34 min, so one can see the pick is the described stretch and not a neighbour.

Usage: .venv/bin/python scripts/find_stretch.py [data/philly/philly_jobs.csv] [--jobs 500] [--day 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.trace import DAY_S, TraceError, format_duration, read_trace, select_jobs, stretch_facts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default="data/philly/philly_jobs.csv")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--day", type=float, default=60)
    parser.add_argument("--max-gpus", type=int, default=8)
    parser.add_argument("--span-hours", type=float, default=13)
    parser.add_argument("--median-minutes", type=float, default=34)
    parser.add_argument("--days", type=float, default=1.0, help="scan windows starting within this many days")
    args = parser.parse_args()

    try:
        jobs = read_trace(args.trace)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    chosen = select_jobs(jobs, start_day=args.day, limit=args.jobs)
    f = stretch_facts(chosen)
    print(f"stretch: first job submitted on day {args.day:g}, {f.jobs} consecutive jobs")
    print(f"  job ids {f.first_job_id}..{f.last_job_id}, starts at day {f.start_day:.4f}")
    print(f"  span {f.span_s / 3600:.2f} h ({f.span_s} s), median run time {f.median_duration_s / 60:.1f} min")
    print(f"  largest job {f.max_gpus} GPUs, {f.gpu_hours:,.0f} GPU-hours in all")
    print(f"  jobs longer than a day: {len(f.multi_day_jobs)}")
    for j in f.multi_day_jobs:
        print(f"    job {j.job_id}: vc {j.vc}, {j.num_gpus} GPU(s), {format_duration(j.duration_s)}")

    # A scan around the day, to show the pick is the described stretch.
    n = args.jobs
    lo, hi = (args.day - args.days) * DAY_S, (args.day + args.days) * DAY_S
    scored = []
    for i in range(len(jobs) - n + 1):
        if not lo <= jobs[i].submit_time_s <= hi:
            continue
        window = jobs[i : i + n]
        if max(j.num_gpus for j in window) > args.max_gpus:
            continue
        span_h = (window[-1].submit_time_s - window[0].submit_time_s) / 3600
        median_min = statistics.median(j.duration_s for j in window) / 60
        score = abs(span_h - args.span_hours) / args.span_hours + abs(median_min - args.median_minutes) / (
            args.median_minutes
        )
        scored.append((score, window[0].job_id, window[0].submit_time_s / DAY_S, span_h, median_min))
    scored.sort()
    print(
        f"\nclosest windows of {n} jobs within {args.days:g} day(s) of day {args.day:g} "
        f"(max {args.max_gpus} GPUs; target {args.span_hours:g} h, median {args.median_minutes:g} min):"
    )
    for _score, job_id, day, span_h, median_min in scored[:8]:
        mark = "  <- chosen" if job_id == f.first_job_id else ""
        print(f"  start {job_id}: day {day:.3f}, span {span_h:.2f} h, median {median_min:.1f} min{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
