"""Which cluster size puts the Philly trace in the seeds' regime (issue 16)?

    python bench/philly_sizes.py [--sizes 768,1024,1536,2048] [--policy fifo] [--start-day D] [--days N]
                                 [--out docs/benchmarks/philly/sizes]

For each size (GPUs, 8 per host) runs one policy and reports demand ÷ capacity (GPUs asked by
pending + running work ÷ GPUs, daily mean): the days on which it exceeds 1 and the median over
those days. The ratio is nearly the same for every work-conserving policy (it is the trace's
demand against the cluster's throughput), so the search uses a cheap peer; the chosen size is then
confirmed by the five-policy run of bench/simulate_philly.py. Writes sizes.json and
demand_vs_size.png.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.sim.report import plotting_available  # noqa: E402
from scheduler.sim.simulate import SimConfig, prepare, run_policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="768,1024,1536,2048")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--start-day", type=float, default=0.0)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "philly" / "sizes"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    for g in sizes:
        if g < 8 or g % 8:
            raise SystemExit(f"--sizes: {g} is not a positive multiple of 8 (8 GPUs per host)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for g in sizes:
        cfg = SimConfig(hosts=g // 8, start_day=args.start_day, days=args.days)
        r = run_policy(prepare(cfg), args.policy)
        dr = r["demand_ratio"]
        row = {
            "gpus": g,
            "median_over_capacity": dr["median_over_capacity"],
            "days_over_capacity": dr["days_over_capacity"],
            "mean": dr["mean"],
            "daily": dr["daily"],
            "occupancy": r["occupancy"],
            "cpu_s": r["cpu_s"],
        }
        rows.append(row)
        print(
            f"{g:6d} GPUs: median {row['median_over_capacity']} over {row['days_over_capacity']} days > 1, "
            f"mean {row['mean']}, occupancy {row['occupancy']}, {row['cpu_s']} s CPU",
            flush=True,
        )
        cmd = "python bench/philly_sizes.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        (out / "sizes.json").write_text(json.dumps({"command": cmd, "policy": args.policy, "sizes": rows}, indent=1))
    if plotting_available() and rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 3.8))
        a1.plot([r["gpus"] for r in rows], [r["median_over_capacity"] or 0 for r in rows], "o-")
        a1.axhspan(2, 3, color="#c7e9c0", label="the seeds' regime (2–3×)")
        a1.set_xlabel("cluster GPUs")
        a1.set_ylabel("median demand ÷ capacity\nover days > 1")
        a1.legend(fontsize=7)
        for r in rows:
            a2.plot(r["daily"], lw=1, label=f"{r['gpus']} GPUs")
        a2.axhline(1, color="black", lw=0.8, ls="--")
        a2.set_yscale("log")
        a2.set_xlabel("day")
        a2.set_ylabel("demand ÷ capacity (daily mean)")
        a2.legend(fontsize=7)
        fig.suptitle(f"Demand ÷ capacity against cluster size ({args.policy})", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "demand_vs_size.png", dpi=80)
        plt.close(fig)


if __name__ == "__main__":
    main()
