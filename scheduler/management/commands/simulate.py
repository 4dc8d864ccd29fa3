"""``python manage.py simulate``: the trace simulator (docs/simulation.md). Parses options, prints."""

from __future__ import annotations

import shlex
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.sim.budgets import BudgetFileError
from scheduler.sim.estimate_options import add_estimate_options, sampling_from
from scheduler.sim.simulate import DEFAULT_TRACE, POLICY_NAMES, SimConfig, SimulationError, simulate
from scheduler.trace import DEFAULT_MIN_RUNTIME_RULE, DEFAULT_UNALLOCATED_RULE, TraceError, parse_duration


class Command(BaseCommand):
    help = "Simulate a job trace under Fairway and peer policies; print the headline figures, write a report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--trace", default=str(DEFAULT_TRACE), help="trace CSV (default: the Philly trace)")
        parser.add_argument("--hosts", type=int, default=64)
        parser.add_argument("--gpus-per-host", type=int, default=8)
        parser.add_argument("--budgets", default=None, help="budget YAML (default: one project per VC, equal shares)")
        parser.add_argument("--min-runtime-rule", default=DEFAULT_MIN_RUNTIME_RULE)
        parser.add_argument("--unallocated-rule", default=DEFAULT_UNALLOCATED_RULE)
        parser.add_argument("--days", type=float, default=None, help="simulate the first D days (default: all)")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--policy", default="fairway", help=f"{'|'.join(POLICY_NAMES)}|all")
        parser.add_argument("--checkpoint", choices=["resume", "restart"], default="resume")
        parser.add_argument(
            "--checkpoint-interval", default="0", help="with resume: time between a job's checkpoints (0: no loss)"
        )
        parser.add_argument("--start-day", type=float, default=0.0, help="start D days into the trace (a slice)")
        parser.add_argument(
            "--debug-zero", type=float, default=0.0, help="probability that a debug-class job declares M = 0"
        )
        parser.add_argument("--fault-rate", type=float, default=0.0, help="host faults per host per day")
        parser.add_argument("--repair", default="4h", help="repair time of a faulty host (e.g. 4h)")
        parser.add_argument("--grace", default="30s", help="stop-to-release time of a preempted attempt")
        parser.add_argument(
            "--depth",
            type=int,
            default=0,
            help="oldest pending workloads per (budget, GPUs, class) a pass sees; 0 (default): all, exact",
        )
        parser.add_argument("--tick-gap", default="0", help="least simulated time between passes (0: every event)")
        parser.add_argument("--out", default=None, help="write report.json, report.md and plots here")
        parser.add_argument("--no-plots", action="store_true")
        parser.add_argument("--no-progress", action="store_true")
        parser.add_argument(
            "--from-db",
            action="store_true",
            help="what-if: replay the demand recorded in the database under the shares of --budgets",
        )
        parser.add_argument("--since", default="7d", help="with --from-db: the window replayed (default 7d)")
        parser.add_argument("--cluster", default=None, help="with --from-db: the cluster (default: the only one)")
        add_estimate_options(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from config.outpath import out_problem

        if o["out"] and (problem := out_problem(o["out"], directory=True)):
            raise CommandError(f"{problem}; nothing simulated")  # not after the whole run
        if o["from_db"]:
            self._from_db(o)
            return
        policies = list(POLICY_NAMES) if o["policy"] == "all" else [p.strip() for p in o["policy"].split(",")]
        try:
            config = SimConfig(
                trace=o["trace"],
                hosts=o["hosts"],
                gpus_per_host=o["gpus_per_host"],
                budgets=o["budgets"],
                min_runtime_rule=o["min_runtime_rule"],
                unallocated_rule=o["unallocated_rule"],
                days=o["days"],
                seed=o["seed"],
                checkpoint=o["checkpoint"],
                fault_rate=o["fault_rate"],
                repair_s=parse_duration(o["repair"]),
                grace_s=parse_duration(o["grace"]),
                depth=o["depth"] or None,
                tick_gap_s=parse_duration(o["tick_gap"]),
                checkpoint_interval_s=parse_duration(o["checkpoint_interval"]),
                start_day=o["start_day"],
                debug_zero=o["debug_zero"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if o["estimates"]:
            self._estimates(config, o)
            return
        factory = None
        if not o["no_progress"]:
            from tqdm import tqdm

            def factory(name: str, total: float) -> Any:
                bar = tqdm(
                    total=round(total, 2),
                    desc=name,
                    unit="day",
                    file=sys.stderr,
                    bar_format="{desc:16} {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} days [{elapsed}]",
                )

                def update(day: float) -> None:
                    bar.n = round(min(day, total), 2)
                    bar.refresh()
                    if day >= total:
                        bar.close()

                return update

        try:
            report = simulate(config, policies, factory)
        except (TraceError, BudgetFileError, SimulationError) as exc:
            raise CommandError(f"nothing written: {exc}") from None
        from scheduler.sim.report import figure_text

        for r in report["policies"]:
            a = r["attainment"]
            p90 = r["wait_hours"][">8"]["p90"]  # None (no job of more than 8 GPUs): "–", as report.md (tryout48)
            self.stdout.write(
                f"{r['policy']:16} occupancy {r['occupancy']:.3f} (alloc {r['occupancy_allocated']:.3f})"
                f"  attainment min/mean {figure_text(a['saturated_min'])}/{figure_text(a['saturated_mean'])}"
                f"  p90 wait >8 {figure_text(p90)}{'' if p90 is None else ' h'}"
                f"  preemptions {r['preemptions']}  violations {r['protected_work_violations']}"
                f"  {r['sim_days_per_wall_minute']} days/min"
            )
        if o["out"]:
            from scheduler.sim.report import write_report

            cmd = "python manage.py simulate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
            for p in write_report(report, o["out"], command=cmd, plots=not o["no_plots"]):
                self.stdout.write(f"wrote {p}")

    def _estimates(self, config: SimConfig, o: dict[str, Any]) -> None:
        """``--estimates``: the quality of first estimated starts (scheduler/sim/estimate_quality.py)."""
        import json
        from pathlib import Path

        from scheduler.sim.estimate_quality import estimate_quality
        from scheduler.sim.simulate import prepare

        try:
            sampling = sampling_from(o)
            result = estimate_quality(prepare(config), sampling)
        except (ValueError, TraceError, BudgetFileError, SimulationError) as exc:
            raise CommandError(f"nothing written: {exc}") from None
        text = json.dumps(result, indent=2)
        self.stdout.write(text)
        if o["out"]:
            out = Path(o["out"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "estimates.json").write_text(text + "\n", encoding="utf-8")
            self.stdout.write(f"wrote {out / 'estimates.json'}")

    def _from_db(self, o: dict[str, Any]) -> None:
        """``--from-db``: actual vs simulated attainment and wait per budget under changed shares."""
        import json
        from pathlib import Path

        from django.utils import timezone

        from fairway_common import strict_yaml
        from scheduler.api.params import demand_window
        from scheduler.sim.dbdemand import actual_from_standing, load_demand
        from scheduler.sim.whatif import format_table, parse_shares, whatif

        try:
            since = demand_window(o["since"])
            now = timezone.now()
            demand = load_demand(o["cluster"], since, now)
            budgets = demand.budgets
            if o["budgets"]:
                try:
                    text = strict_yaml.read_text(o["budgets"])  # bounded (brk51)
                except (OSError, UnicodeDecodeError, strict_yaml.TooLong) as exc:
                    raise BudgetFileError(o["budgets"], None, f"cannot read the file: {exc}") from None
                budgets = parse_shares(text, budgets, name=o["budgets"])
            result = whatif(demand, budgets, grace_s=parse_duration(o["grace"]), depth=o["depth"] or None)
            actual_from_standing(result, o["cluster"], since, now)  # the admin what-if's actual column
        except (ValueError, BudgetFileError, SimulationError) as exc:
            raise CommandError(f"nothing written: {exc}") from None
        self.stdout.write(format_table(result))
        if o["out"]:
            out = Path(o["out"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "whatif.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            self.stdout.write(f"wrote {out / 'whatif.json'}")
