"""A fluid estimate of demand ÷ capacity against cluster size (issue 16), in seconds of CPU.

    PYTHONPATH=. python bench/philly_fluid.py [--start-day 50] [--days 30] SIZE [SIZE ...]

No hosts, no policy: one pool of SIZE GPUs, jobs start in submission order whenever enough GPUs
are free (any job that fits starts, like the fifo peer without placement). It ignores hosts,
grace and the policy, so it is an estimate, not a bound (on trace days 50–58 at 1,024 GPUs it
gives 3.6 where the simulator measures 2.7 under fifo); it only guides which sizes the real
search (bench/philly_sizes.py, a peer on the simulator) and the five-policy run should try. Prints, per
size, the daily mean of GPUs asked by pending + running work ÷ SIZE and the median over the days
above 1.
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.sim.simulate import DEFAULT_TRACE, median_over_capacity  # noqa: E402
from scheduler.trace import read_trace  # noqa: E402

DAY = 86_400


def fluid(jobs: list[tuple[int, int, int]], size: int, days: int) -> list[float]:
    """Daily mean demand ÷ capacity; ``jobs``: (submit s from the slice start, GPUs, run time s)."""
    free, held, pend_g, t_prev, i = size, 0, 0, 0, 0
    running: list[tuple[int, int]] = []
    pending: list[tuple[int, int, int]] = []
    dem = [0.0] * days

    def spread(a: int, b: int, v: int) -> None:
        while a < b and a // DAY < days:
            e = min(b, (a // DAY + 1) * DAY)
            dem[a // DAY] += v * (e - a)
            a = e

    while i < len(jobs) or running:
        t = min(jobs[i][0] if i < len(jobs) else 1 << 60, running[0][0] if running else 1 << 60)
        if t >= days * DAY:
            break
        spread(t_prev, t, pend_g + held)
        t_prev = t
        while running and running[0][0] == t:
            g = heapq.heappop(running)[1]
            free += g
            held -= g
        while i < len(jobs) and jobs[i][0] == t:
            if jobs[i][1] <= size:
                pending.append(jobs[i])
                pend_g += jobs[i][1]
            i += 1
        if free and pending:
            keep = []
            for p in pending:
                if p[1] <= free:
                    free -= p[1]
                    held += p[1]
                    pend_g -= p[1]
                    heapq.heappush(running, (t + max(1, p[2]), p[1]))
                else:
                    keep.append(p)
            pending = keep
    spread(t_prev, days * DAY, pend_g + held)
    return [x / (size * DAY) for x in dem]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start-day", type=float, default=50.0)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("sizes", nargs="+", type=int)
    args = ap.parse_args()
    trace = read_trace(str(DEFAULT_TRACE))
    base = trace[0].submit_time_s + int(args.start_day * DAY)
    jobs = [
        (j.submit_time_s - base, j.num_gpus, j.duration_s)
        for j in trace
        if 0 <= j.submit_time_s - base < args.days * DAY
    ]
    for size in args.sizes:
        daily = fluid(jobs, size, args.days)
        over = [x for x in daily if x > 1]
        med = median_over_capacity(daily)
        print(
            f"{size} GPUs: median {med and round(med, 2)} over {len(over)} days > 1; daily",
            [round(x, 1) for x in daily],
        )


if __name__ == "__main__":
    main()
