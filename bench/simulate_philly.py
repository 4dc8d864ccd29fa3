"""Philly benchmark of the trace simulator (issues 4 and 16): all five policies, 512 GPUs or another size.

    python bench/simulate_philly.py [--out docs/benchmarks/philly] [--workers 2] [--gpus 512]
                                    [--start-day 0] [--days D] [--policies fairway,fifo,...] [--depth 0]
                                    [--tick-gap 0] [--fault-rate R] [--repair 14400] [--checkpoint resume]
                                    [--checkpoint-interval S] [--min-runtime-rule duration,cap:2h]
                                    [--debug-zero P] [--variant LABEL=RULE[@P] ...]
    python bench/simulate_philly.py --estimates --start-day 41 --days 3 [--estimate-rate 0.25]
                                    [--estimate-every 30m] [--estimate-budget 2] [--estimate-from-day D]
                                    [--estimate-wall-time-slack 1h]
                                    # estimate quality (§3.8, scheduler/sim/estimate_quality.py)

``--variant`` runs Fairway once more under another minimum-runtime rule (and optionally with debug
jobs declaring M = 0 with probability P), shown as policy ``fairway-LABEL``: how the contract
choice moves occupancy, delivered share and debug wait (issue 16).

Runs each policy in its own process (``--workers`` at a time; wall-clock seconds are per policy),
checks Fairway's targets and writes report.json, report.md and the plots. Defaults are those of
``python manage.py simulate`` (docs/simulation.md): 64 hosts × 8 GPUs, one project per VC with
equal shares, ``duration,cap:2h``, ``vc:unknown,fraction:0.1``, resume, grace 30 s, no faults.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.sim.budgets import BudgetFileError  # noqa: E402
from scheduler.sim.estimate_options import add_estimate_options, sampling_from  # noqa: E402
from scheduler.sim.report import write_report  # noqa: E402
from scheduler.sim.simulate import (  # noqa: E402
    POLICY_NAMES,
    SimConfig,
    SimulationError,
    describe_inputs,
    median_over_capacity,
    prepare,
    run_policy,
)
from scheduler.trace import TraceError  # noqa: E402


def _progress(name: str) -> Any:
    """Prints each whole simulated day reached, with the CPU seconds spent so far (to plan long runs)."""
    import time

    seen = [-1]

    def tick(day: float) -> None:
        if int(day) > seen[0]:
            seen[0] = int(day)
            print(f"  {name:16} day {day:6.1f}  {time.process_time():8.1f} s CPU", flush=True)

    return tick


def _one(args: tuple[SimConfig, str, str | None]) -> dict[str, Any]:
    config, name, parts = args
    result = run_policy(prepare(config), name, progress=_progress(name))
    print(f"  {name:16} {result['wall_s']:8.1f} s wall, {result['cpu_s']:8.1f} s CPU", flush=True)
    _keep(result, parts)
    return result


def _keep(result: dict[str, Any], parts: str | None) -> None:
    """With ``--parts DIR``: each policy's result as soon as it is done (``--from-parts`` reuses them)."""
    if parts:
        Path(parts).mkdir(parents=True, exist_ok=True)
        (Path(parts) / f"{result['policy']}.json").write_text(json.dumps(result), encoding="utf-8")


def _kept(parts: str | None, name: str) -> dict[str, Any] | None:
    p = Path(parts) / f"{name}.json" if parts else None
    return json.loads(p.read_text(encoding="utf-8")) if p is not None and p.exists() else None


def targets(pols: dict[str, dict[str, Any]], whole: bool = True) -> list[dict[str, Any]]:
    """Fairway's targets of issue 4 against the peers of the same run."""
    fw = pols.get("fairway")
    if fw is None:
        return []
    out = []
    out.append(
        {
            "target": "whole trace in <= 5 min" if whole else "(a slice, not the whole trace) wall-clock",
            "value": f"{fw['wall_s']:.0f} s wall-clock, {fw['cpu_s']:.0f} s of CPU",
            "met": fw["wall_s"] <= 300 if whole else None,
        }
    )
    mine = fw["attainment"]["saturated_min"]
    peers = {n: r["attainment"]["saturated_min"] for n, r in pols.items() if not n.startswith("fairway")}
    best_peer = max((v for v in peers.values() if v is not None), default=None)
    out.append(
        {
            "target": "min entitlement attainment over saturated budgets >= 0.95",
            "value": f"{mine}",
            "met": mine is not None and mine >= 0.95,
        }
    )
    out.append(
        {
            "target": "... and higher than every peer's",
            "value": ", ".join(f"{n} {v}" for n, v in peers.items()),
            "met": mine is not None and (best_peer is None or mine > best_peer),
        }
    )
    fifo = pols.get("fifo")
    if fifo is not None:
        days = sorted(set(fw["backlogged_days"]) & set(fifo["backlogged_days"]))

        def occ(r: dict[str, Any]) -> float:
            s = r["series"]
            return sum(s["occupancy_allocated"][d] + s["occupancy_unallocated"][d] for d in days) / max(1, len(days))

        a, b = occ(fw), occ(fifo)
        out.append(
            {
                "target": "occupancy within 1 % of fifo's when demand exceeds capacity",
                "value": f"{a:.4f} vs fifo {b:.4f} over the {len(days)} days backlogged under both",
                "met": bool(days) and a >= 0.99 * b,
            }
        )
    out.append(
        {
            "target": "zero protected-work violations",
            "value": str(fw["protected_work_violations"]),
            "met": fw["protected_work_violations"] == 0,
        }
    )
    for peer in ("fifo", "slurm-fairshare"):
        if peer in pols:
            a = fw["wait_hours"][">8"]["p90"]
            b = pols[peer]["wait_hours"][">8"]["p90"]
            out.append(
                {
                    "target": f"p90 wait of > 8-GPU jobs lower than {peer}'s",
                    "value": f"{a} h vs {b} h",
                    "met": a is not None and b is not None and a < b,
                }
            )
    return out


def _fmt(x: Any, nd: int = 3) -> str:
    return "–" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def target_table(pols: dict[str, dict[str, Any]], threshold: float = 0.98) -> list[dict[str, Any]]:
    """Issue 16's targets, every policy side by side: per row the value of each policy and whether
    Fairway meets it (``met``; None where the row is context, not a target)."""
    fw = pols.get("fairway")
    if fw is None:
        return []
    peers = {n: r for n, r in pols.items() if n in ("fifo", "slurm-fairshare", "kueue-drs", "kai-timeshare")}
    rows: list[dict[str, Any]] = []

    def row(target: str, fn: Any, met: bool | None) -> None:
        rows.append({"target": target, "values": {n: fn(r) for n, r in pols.items()}, "met": met})

    def sat_min(r: dict[str, Any]) -> float | None:
        return r["ledger"]["saturated_week_ratio_min"]

    m = sat_min(fw)
    row(
        f"delivered ÷ owed ≥ {threshold} for every saturated budget-week: minimum (weeks below / saturated)",
        lambda r: (
            f"{_fmt(sat_min(r))} ({r['ledger']['saturated_weeks_below']} / {len(r['ledger']['saturated_weeks'])})"
        ),
        None if m is None else m >= threshold,
    )
    occ = fw["occupancy_of_available_busy_days"]
    row(
        "occupancy ≥ 0.98 of available GPU-time on busy days (busy days)",
        lambda r: f"{_fmt(r['occupancy_of_available_busy_days'], 4)} ({len(r['busy_days'])})",
        None if occ is None else occ >= 0.98,
    )
    d90 = fw["wait_s_by_class"]["debug"]["p90"]
    row(
        "debug p90 wait ≤ 60 s (seconds)",
        lambda r: _fmt(r["wait_s_by_class"]["debug"]["p90"], 0),
        d90 is not None and d90 <= 60,
    )
    row(
        "training: wait p50 / p90 (h), GPU-h run",
        lambda r: (
            " / ".join(_fmt(_h(r["wait_s_by_class"]["training"][k]), 1) for k in ("p50", "p90"))
            + f", {r['class_run_gpu_h']['training']:.0f}"
        ),
        None,
    )
    preempting = {n: r for n, r in peers.items() if r["evictions"]["decisions"]}
    mine = fw["evictions"]["evicted_beyond_need"]
    row(
        "GPUs evicted beyond need per decision: mean / p99 / max, lower than every preempting peer",
        lambda r: " / ".join(_fmt(r["evictions"]["evicted_beyond_need"][k], 2) for k in ("mean", "p99", "max")),
        all(
            (mine[k] or 0) < (r["evictions"]["evicted_beyond_need"][k] or 0)
            for r in preempting.values()
            for k in ("mean", "max")
        )
        if preempting
        else None,
    )
    row(
        "GPUs evicted ÷ requested per decision: mean / max",
        lambda r: " / ".join(_fmt(r["evictions"]["evicted_over_requested"][k], 2) for k in ("mean", "max")),
        None,
    )
    row(
        "0 protected-work violations",
        lambda r: str(r["protected_work_violations"]),
        fw["protected_work_violations"] == 0,
    )
    return rows


def _h(s: float | None) -> float | None:
    return None if s is None else s / 3600


def _variant(spec: str) -> tuple[str, str, float]:
    label, _, rest = spec.partition("=")
    rule, _, p = rest.partition("@")
    if not label or not rule:
        raise SystemExit(
            f"--variant {spec!r}: use LABEL=RULE[@P], e.g. cap8h=duration,cap:8h or debug0=duration,cap:2h@0.5"
        )
    try:
        return label, rule, float(p) if p else 0.0
    except ValueError:
        raise SystemExit(f"--variant {spec!r}: {p!r} is not a probability") from None


def _one_variant(args: tuple[SimConfig, str, str | None]) -> dict[str, Any]:
    config, label, parts = args
    result = run_policy(prepare(config), "fairway", progress=_progress(f"fairway-{label}"))
    result["policy"] = f"fairway-{label}"
    print(f"  {result['policy']:16} {result['wall_s']:8.1f} s wall, {result['cpu_s']:8.1f} s CPU", flush=True)
    _keep(result, parts)
    return result


def build_parser() -> argparse.ArgumentParser:
    """The bench's options; the estimate-quality ones from ``scheduler.sim.estimate_options``."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "philly"))
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--policies", default=",".join(POLICY_NAMES))
    ap.add_argument("--depth", type=int, default=0, help="queue view (0: all pending, exact)")
    ap.add_argument("--tick-gap", type=int, default=0)
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--repair", type=int, default=4 * 3600, help="seconds a faulted host stays down")
    ap.add_argument("--gpus", type=int, default=512, help="cluster GPUs, 8 per host")
    ap.add_argument("--start-day", type=float, default=0.0, help="the slice starts this many days into the trace")
    ap.add_argument("--checkpoint", default="resume", choices=("resume", "restart"))
    ap.add_argument("--checkpoint-interval", type=int, default=0, help="with resume: seconds between checkpoints")
    ap.add_argument("--min-runtime-rule", default=SimConfig.min_runtime_rule)
    ap.add_argument("--debug-zero", type=float, default=0.0, help="probability that a debug job declares M = 0")
    ap.add_argument("--variant", action="append", default=[], help="LABEL=RULE[@P]: Fairway once more, see above")
    ap.add_argument("--parts", default=None, help="keep each policy's result in DIR as it finishes; reuse them")
    ap.add_argument("--from-parts", action="store_true", help="write the report from --parts only, run nothing")
    add_estimate_options(ap)  # the same options as manage.py simulate
    return ap


def main() -> None:
    args = build_parser().parse_args()
    try:
        _main(args)
    except (SimulationError, TraceError, BudgetFileError) as exc:  # a bad option or input file
        raise SystemExit(f"nothing written: {exc}") from None


def _main(args: argparse.Namespace) -> None:
    if args.workers < 1:
        raise SystemExit(f"--workers {args.workers}: at least 1")
    if args.parts is None:
        args.parts = str(ROOT / "var" / "philly-parts" / Path(args.out).resolve().name)
    if args.gpus < 8 or args.gpus % 8:
        raise SystemExit(f"--gpus {args.gpus}: a positive multiple of 8 (8 GPUs per host)")
    names = [p for p in args.policies.split(",") if p]
    for name in names:  # before any worker runs
        if name not in POLICY_NAMES:
            raise SimulationError(f"unknown policy {name!r} (use {', '.join(POLICY_NAMES)})")
    config = SimConfig(
        hosts=args.gpus // 8,
        days=args.days,
        start_day=args.start_day,
        depth=args.depth or None,
        tick_gap_s=args.tick_gap,
        fault_rate=args.fault_rate,
        repair_s=args.repair,
        checkpoint=args.checkpoint,
        checkpoint_interval_s=args.checkpoint_interval,
        min_runtime_rule=args.min_runtime_rule,
        debug_zero=args.debug_zero,
    )
    variants = []
    for spec in args.variant:
        label, rule, p = _variant(spec)
        variants.append((replace(config, min_runtime_rule=rule, debug_zero=p), label))
    if args.estimates:
        from scheduler.sim.estimate_quality import estimate_quality

        try:
            sampling = sampling_from(vars(args))
        except ValueError as exc:
            raise SystemExit(f"--estimate-*: {exc}") from None
        print(json.dumps(estimate_quality(prepare(config), sampling), indent=2))
        return
    inputs = prepare(config)
    for v, _ in variants:
        prepare(v)  # every rule checked before anything runs
    print(
        f"{len(inputs.jobs):,} jobs, {inputs.horizon_s / 86400:.1f} days from day {args.start_day:g}, "
        f"{args.gpus} GPUs; {args.workers} workers",
        flush=True,
    )
    parts = args.parts
    todo = [n for n in names if _kept(parts, n) is None]
    todo_v = [(v, label) for v, label in variants if _kept(parts, f"fairway-{label}") is None]
    if args.from_parts:
        todo, todo_v = [], []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        list(pool.map(_one, [(config, n, parts) for n in todo]))
        list(pool.map(_one_variant, [(v, label, parts) for v, label in todo_v]))
    results = [r for n in names + [f"fairway-{label}" for _, label in variants] if (r := _kept(parts, n))]
    for r in results:  # kept results of an older version may hold a lower median
        r["demand_ratio"]["median_over_capacity"] = median_over_capacity(r["demand_ratio"]["daily"])
    by_name = {r["policy"]: r for r in results}
    report = {
        "inputs": {
            **describe_inputs(inputs),
            "start_day": args.start_day,
            "checkpoint_interval_s": args.checkpoint_interval,
            "debug_zero": args.debug_zero,
        },
        "policies": results,
        "targets": targets(by_name, whole=not args.start_day and args.days is None),
        "target_table": target_table(by_name),
        "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, {args.workers} policies at a time",
    }
    cmd = "python bench/simulate_philly.py " + " ".join(shlex.quote(a) for a in sys.argv[1:] if a != "--from-parts")
    for p in write_report(report, args.out, command=cmd.strip()):
        print(f"wrote {p}")
    for t in report["targets"]:
        print(f"{'n/a   ' if t['met'] is None else 'met   ' if t['met'] else 'MISSED'} {t['target']}: {t['value']}")


if __name__ == "__main__":
    main()
