"""Writing the simulator's report: ``report.json``, ``report.md`` and PNG plots (docs/simulation.md)."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from typing import Any

from scheduler.sim.simulate import SIZE_CLASSES

logger = logging.getLogger(__name__)


def plotting_available() -> bool:
    """matplotlib is the ``sim`` extra (requirements-dev.txt), not a server dependency."""
    return importlib.util.find_spec("matplotlib") is not None


def figure_text(x: Any, nd: int = 3) -> str:
    """A figure of the report as report.md and the command's summary lines write it: "–" where
    there is none (no saturated budget-week, no job of the class), a float to ``nd`` places."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


_f = figure_text


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def write_report(
    report: dict[str, Any], out: str | Path, *, command: str | None = None, plots: bool = True
) -> list[Path]:
    """Write the report files into ``out`` (created); returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if command:
        report = {**report, "command": command}
    p = out / "report.json"
    p.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    written.append(p)
    if plots and not plotting_available():
        logger.warning("no plots: matplotlib is not installed (the `sim` extra)")
        plots = False
    pngs = write_plots(report, out) if plots else []
    written.extend(pngs)
    p = out / "report.md"
    p.write_text(markdown(report, [x.name for x in pngs]), encoding="utf-8")
    written.append(p)
    return written


def markdown(report: dict[str, Any], pngs: list[str] | None = None) -> str:
    """The report as Markdown: inputs, one table per metric family, policies as columns."""
    inp = report["inputs"]
    pols = report["policies"]
    names = [r["policy"] for r in pols]
    lines = ["# Trace simulation report", ""]
    if report.get("command"):
        lines += ["Made by:", "", "```", report["command"], "```", ""]
    lines += [
        f"- trace: `{inp['trace']}` — {inp['jobs']:,} jobs over {inp['days']} days",
        f"- cluster: {inp['hosts']} hosts × {inp['gpus_per_host']} GPUs = {inp['gpus']} GPUs",
        f"- budgets: {inp['budgets']} ({inp['leaves']} leaves)",
        f"- minimum runtime: {inp['min_runtime_rule']}",
        f"- unallocated: {inp['unallocated_rule']}",
        f"- checkpoint: {inp['checkpoint']}; grace {inp['grace_s']} s; window {inp['window_s'] // 86400} days",
        f"- host faults: {inp['fault_rate_per_host_day']} per host per day, repair {inp['repair_s']} s",
        f"- seed: {inp['seed']}",
        *(
            [
                f"- slice: from trace day {inp['start_day']:g}; checkpoint interval {inp['checkpoint_interval_s']} s; "
                f"debug jobs declaring M = 0: probability {inp['debug_zero']:g}"
            ]
            if "start_day" in inp
            else []
        ),
        f"- queue view depth: {inp['depth']} per (budget, GPUs, class); tick gap {inp['tick_gap_s']} s",
        "",
        "Definitions: docs/simulation.md. Fractions are of registered GPU-time over the whole run.",
        "",
    ]

    def table(title: str, rows: list[tuple[str, list[str]]]) -> None:
        lines.append(f"## {title}")
        lines.append("")
        lines.append("| metric | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for label, vals in rows:
            lines.append(f"| {label} | " + " | ".join(vals) + " |")
        lines.append("")

    table(
        "The pyramid",
        [
            ("availability", [_pct(r["availability"]) for r in pols]),
            ("occupancy", [_pct(r["occupancy"]) for r in pols]),
            ("— allocated", [_pct(r["occupancy_allocated"]) for r in pols]),
            ("— unallocated", [_pct(r["occupancy_unallocated"]) for r in pols]),
            ("occupancy on backlogged days", [_pct(r["occupancy_backlogged_days"]) for r in pols]),
            ("backlogged days", [str(len(r["backlogged_days"])) for r in pols]),
            ("impact (allocated / occupied)", [_pct(r["impact"]) for r in pols]),
        ],
    )
    table(
        "Entitlement attainment (7-day windows, capped at 1)",
        [
            ("saturated budgets: minimum", [_f(r["attainment"]["saturated_min"]) for r in pols]),
            ("saturated budgets: mean", [_f(r["attainment"]["saturated_mean"]) for r in pols]),
            ("(budget, window) pairs saturated", [str(r["attainment"]["saturated_pairs"]) for r in pols]),
            ("all budgets: minimum", [_f(r["attainment"]["min"]) for r in pols]),
            ("all budgets: mean", [_f(r["attainment"]["mean"]) for r in pols]),
            ("Jain's index: mean over windows", [_f(r["attainment"]["jain_mean"]) for r in pols]),
            ("Jain's index: worst window", [_f(r["attainment"]["jain_min"]) for r in pols]),
        ],
    )
    rows = []
    for c in SIZE_CLASSES:
        for p in ("p50", "p90", "p99"):
            rows.append((f"{c} GPU {p}", [_f(r["wait_hours"][c][p], 2) for r in pols]))
        rows.append((f"{c} GPU never started", [str(r["jobs_by_class"][c]["never_started"]) for r in pols]))
    table("Wait to first start, hours (jobs never started count with their wait at the horizon)", rows)
    rows = []
    for c in SIZE_CLASSES:
        rows.append((f"{c} GPU p90, started only", [_f(r["wait_hours_started_only"][c]["p90"], 2) for r in pols]))
    table("Wait of started jobs only, hours", rows)
    table(
        "Jobs, completion, preemption",
        [
            ("submitted", [str(r["jobs"]["submitted"]) for r in pols]),
            ("rejected (no host set fits)", [str(r["jobs"]["rejected_unplaceable"]) for r in pols]),
            ("finished", [str(r["jobs"]["finished"]) for r in pols]),
            ("never started", [str(r["jobs"]["never_started"]) for r in pols]),
            ("completion time mean, h", [_f(r["jct_hours"]["mean"], 2) for r in pols]),
            ("completion time p50, h", [_f(r["jct_hours"]["p50"], 2) for r in pols]),
            ("completion time p90, h", [_f(r["jct_hours"]["p90"], 2) for r in pols]),
            ("preemptions", [str(r["preemptions"]) for r in pols]),
            ("— of allocated attempts", [str(r["preemptions_of_allocated"]) for r in pols]),
            ("GPU-hours of preempted attempts", [_f(r["preempted_gpu_hours"], 0) for r in pols]),
            ("GPU-hours of work lost (restart)", [_f(r["lost_gpu_hours"], 0) for r in pols]),
            ("attempts ended by host faults", [str(r["fault_kills"]) for r in pols]),
            ("**protected-work violations**", [f"**{r['protected_work_violations']}**" for r in pols]),
        ],
    )
    table(
        "Speed",
        [
            ("wall-clock seconds", [_f(r["wall_s"], 1) for r in pols]),
            ("CPU seconds (the process's own)", [_f(r.get("cpu_s"), 1) for r in pols]),
            ("simulated days per wall-clock minute", [_f(r["sim_days_per_wall_minute"], 1) for r in pols]),
            ("instants ticked", [str(r["ticks"]) for r in pols]),
            ("policy passes", [str(r["passes"]) for r in pols]),
        ],
    )
    if all("ledger" in r for r in pols):
        lines += evaluation_markdown(report)
    if report.get("targets"):
        lines += ["## Targets (fairway)", "", "| target | value | met |", "|---|---|---|"]
        for t in report["targets"]:
            met = "–" if t["met"] is None else "yes" if t["met"] else "**no**"
            lines.append(f"| {t['target']} | {t['value']} | {met} |")
        lines.append("")
    if pngs:
        lines += ["## Plots", ""]
        for name in pngs:
            lines += [f"![{name}]({name})", ""]
    return "\n".join(lines)


def _cdf(ax: Any, q: list[float], floor: float, label: str) -> None:
    """One CDF line from evenly spaced quantiles ``q`` (waits), on a log axis: waits below ``floor``
    are drawn at ``floor``; nothing is drawn for an empty list."""
    if not q:
        return
    ys = [i / (len(q) - 1) for i in range(len(q))] if len(q) > 1 else [1.0]
    ax.plot([max(x, floor) for x in q], ys, lw=1.2, label=label)


def write_plots(report: dict[str, Any], out: Path) -> list[Path]:
    """pyramid.png, usage_vs_entitlement_<policy>.png, wait_cdf.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pols = report["policies"]
    written: list[Path] = []
    fig, axes = plt.subplots(len(pols), 1, figsize=(10, 2.2 * len(pols)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], pols, strict=True):
        s = r["series"]
        days = list(range(len(s["availability"])))
        alloc = s["occupancy_allocated"]
        unalloc = s["occupancy_unallocated"]
        ax.stackplot(
            days, alloc, unalloc, labels=["occupied, allocated", "occupied, unallocated"], colors=["#3b75af", "#9ecae9"]
        )
        ax.plot(days, s["availability"], color="black", lw=1, label="available")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(r["policy"], fontsize=8)
    axes[0, 0].legend(loc="upper left", fontsize=7)
    axes[0, 0].set_title("The pyramid per day (fraction of registered GPU-time)")
    axes[-1, 0].set_xlabel("day")
    fig.tight_layout()
    p = out / "pyramid.png"
    fig.savefig(p, dpi=90)
    plt.close(fig)
    written.append(p)

    for r in pols:
        fig, ax = plt.subplots(figsize=(10, 4))
        series = r["series"]["window_usage_over_entitlement"]
        for b in sorted(series):
            ys = series[b]
            if not any(y for y in ys if y):
                continue
            ax.plot(range(len(ys)), [y if y is not None else float("nan") for y in ys], lw=1, label=b.split("/")[-1])
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.set_title(f"{r['policy']}: allocated usage over the last 7 days ÷ entitlement, per budget")
        ax.set_xlabel("day")
        ax.set_ylabel("U / E")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, ncol=4)
        fig.tight_layout()
        p = out / f"usage_vs_entitlement_{r['policy']}.png"
        fig.savefig(p, dpi=90)
        plt.close(fig)
        written.append(p)

    fig, axes = plt.subplots(1, len(SIZE_CLASSES), figsize=(12, 3.6), squeeze=False)
    for ax, c in zip(axes[0], SIZE_CLASSES, strict=True):
        for r in pols:
            _cdf(ax, r["wait_quantiles_hours"][c], 1e-3, r["policy"])
        ax.set_xscale("log")
        ax.set_title(f"{c} GPU jobs")
        ax.set_xlabel("wait, hours (log)")
        ax.set_ylim(0, 1)
    axes[0, 0].set_ylabel("fraction of jobs")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Wait to first start, CDF (never-started jobs at their wait at the horizon)", fontsize=9)
    fig.tight_layout()
    p = out / "wait_cdf.png"
    fig.savefig(p, dpi=90)
    plt.close(fig)
    written.append(p)
    if all("ledger" in r for r in pols):
        written.extend(write_evaluation_plots(report, out))
    return written


def _s(x: float | None) -> str:
    """Seconds, readable: 42 s, 3.1 h."""
    if x is None:
        return "–"
    return f"{x:.0f} s" if x < 600 else f"{x / 60:.0f} min" if x < 7200 else f"{x / 3600:.1f} h"


def evaluation_markdown(report: dict[str, Any]) -> list[str]:
    """Issue 16's sections: demand ÷ capacity, waits per workload class, the ledger, evictions."""
    from scheduler.sim.classes import WORKLOAD_CLASSES

    pols = report["policies"]
    names = [r["policy"] for r in pols]
    lines: list[str] = []

    def table(title: str, rows: list[tuple[str, list[str]]], note: str = "") -> None:
        lines.extend([f"## {title}", ""] + ([note, ""] if note else []))
        lines.append("| metric | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for label, vals in rows:
            lines.append(f"| {label} | " + " | ".join(vals) + " |")
        lines.append("")

    table(
        "Demand ÷ capacity",
        [
            ("mean over the run", [_f(r["demand_ratio"]["mean"], 2) for r in pols]),
            ("days with demand > capacity", [str(r["demand_ratio"]["days_over_capacity"]) for r in pols]),
            ("median over those days", [_f(r["demand_ratio"]["median_over_capacity"], 2) for r in pols]),
            ("busy days (demand ≥ capacity all day)", [str(len(r["busy_days"])) for r in pols]),
            ("occupancy ÷ available on busy days", [_pct(r["occupancy_of_available_busy_days"]) for r in pols]),
        ],
        "GPUs asked by pending + running work ÷ the cluster's GPUs, daily mean (docs/simulation.md).",
    )
    rows = []
    for c in WORKLOAD_CLASSES:
        for p in ("p50", "p90", "p99"):
            rows.append((f"{c} {p}", [_s(r["wait_s_by_class"][c][p]) for r in pols]))
        rows.append(
            (
                f"{c} jobs started / never",
                [f"{r['wait_s_by_class'][c]['started']} / {r['wait_s_by_class'][c]['never_started']}" for r in pols],
            )
        )
        rows.append((f"{c} GPU-hours run", [_f(r["class_run_gpu_h"][c], 0) for r in pols]))
    rows.append(("**debug p90, seconds**", [_f(r["wait_s_by_class"]["debug"]["p90"], 0) for r in pols]))

    def funded(r: dict[str, Any], key: str) -> str:
        x = r.get("debug_wait_s_by_funding", {}).get(key)
        if not x or not x["jobs"]:
            return "–"
        return f"{x['jobs']} / {_pct(x['within_30s'])} / {_s(x['p90'])}"

    for key in ("allocated", "unallocated"):
        rows.append((f"debug, {key}: jobs / started within 30 s / p90", [funded(r, key) for r in pols]))
    table("Wait to first start per workload class", rows, "Never-started jobs count with their wait at the horizon.")
    rows = [
        ("owed (entitlement capped by demand), GPU-h", [_f(r["ledger"]["total"].get("owed_gpu_h"), 0) for r in pols]),
        ("delivered (allocated class), GPU-h", [_f(r["ledger"]["total"].get("delivered_gpu_h"), 0) for r in pols]),
        ("run, any class, GPU-h", [_f(r["ledger"]["total"].get("run_gpu_h"), 0) for r in pols]),
        (
            "lost to preemption, GPU-h",
            [_f(r["ledger"]["total"].get("lost_preemption_gpu_h"), 1) for r in pols],
        ),
        ("lost to host faults, GPU-h", [_f(r["ledger"]["total"].get("lost_faults_gpu_h"), 1) for r in pols]),
        ("preemptions per 1,000 GPU-h run", [_f(r["ledger"]["preemptions_per_1000_gpu_h"], 2) for r in pols]),
        ("saturated budget-weeks", [str(len(r["ledger"]["saturated_weeks"])) for r in pols]),
        ("— delivered ÷ owed, minimum", [_f(r["ledger"]["saturated_week_ratio_min"]) for r in pols]),
        ("— weeks below 0.98", [str(r["ledger"]["saturated_weeks_below"]) for r in pols]),
        ("preemption decisions", [str(r["evictions"]["decisions"]) for r in pols]),
    ]
    for k, label in (
        ("evicted_over_requested", "GPUs evicted ÷ requested"),
        ("evicted_beyond_need", "GPUs evicted beyond need"),
    ):
        for st in ("max", "p99", "mean"):
            rows.append((f"{label}: {st}", [_f(r["evictions"][k][st], 2) for r in pols]))

    def split(r: dict[str, Any], key: str) -> str:
        x = r["evictions"].get("beyond_need_by_victims", {}).get(key)
        if x is None:
            return "–"
        return f"{x['decisions']} / {x['with_beyond_need']} / {x['gpus_beyond_need']} / {_f(x['max_beyond_need'])}"

    for key, label in (("unallocated_only", "only unallocated"), ("some_allocated", "some allocated")):
        rows.append(
            (f"victims {label}: decisions / with GPUs beyond need / GPUs beyond / max", [split(r, key) for r in pols])
        )
    table("The disruption ledger", rows, "Totals over the leaf budgets; per budget below and in report.json.")
    budgets = sorted({b for r in pols for b in r["ledger"]["per_budget"]})
    lines += ["### Per budget: owed / delivered / lost to preemption / lost to faults (GPU-h), preemptions", ""]
    lines.append("| budget | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for b in budgets:
        cells = []
        for r in pols:
            x = r["ledger"]["per_budget"].get(b)
            cells.append(
                "–"
                if x is None
                else f"{x['owed_gpu_h']:.0f} / {x['delivered_gpu_h']:.0f} / {x['lost_preemption_gpu_h']:.0f} / "
                f"{x['lost_faults_gpu_h']:.0f}, {x['preemptions']}"
            )
        lines.append(f"| {b.split('/')[-1]} | " + " | ".join(cells) + " |")
    lines.append("")
    tt = report.get("target_table")
    if tt:
        tnames = list(tt[0]["values"])
        lines += ["## Targets of issue 16, every policy of this run", ""]
        lines.append("| target | " + " | ".join(tnames) + " | fairway meets it |")
        lines.append("|---|" + "---|" * len(tnames) + "---|")
        for t in tt:
            met = "" if t["met"] is None else "yes" if t["met"] else "**no**"
            lines.append(f"| {t['target']} | " + " | ".join(t["values"][n] for n in tnames) + f" | {met} |")
        lines.append("")
    return lines


def write_evaluation_plots(report: dict[str, Any], out: Path) -> list[Path]:
    """delivered_vs_owed.png, wait_cdf_by_class.png, demand_over_capacity.png, evicted_beyond_need.png
    (with the per-decision counts)."""
    import matplotlib.pyplot as plt

    from scheduler.sim.classes import WORKLOAD_CLASSES

    pols = report["policies"]
    written: list[Path] = []
    budgets = sorted({b for r in pols for b in r["ledger"]["per_budget"]})
    fig, ax = plt.subplots(figsize=(11, 4))
    width = 0.8 / max(1, len(pols))
    for i, r in enumerate(pols):
        per = r["ledger"]["per_budget"]
        ys = [
            per[b]["delivered_gpu_h"] / per[b]["owed_gpu_h"] if per.get(b, {}).get("owed_gpu_h") else 0 for b in budgets
        ]
        ax.bar([k + i * width for k in range(len(budgets))], ys, width, label=r["policy"])
    ax.axhline(1.0, color="black", lw=1)
    ax.axhline(0.98, color="red", lw=0.8, ls="--", label="0.98")
    ax.set_xticks(
        [k + 0.4 - width / 2 for k in range(len(budgets))], [b.split("/")[-1] for b in budgets], fontsize=7, rotation=30
    )
    ax.set_ylabel("delivered ÷ owed (GPU-h, whole run)")
    ax.set_title("Delivered vs owed per budget (owed = entitlement capped by demand, per 7-day window)", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    p = out / "delivered_vs_owed.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    written.append(p)

    fig, axes = plt.subplots(1, len(WORKLOAD_CLASSES), figsize=(13, 3.6), squeeze=False)
    for ax, c in zip(axes[0], WORKLOAD_CLASSES, strict=True):
        for r in pols:
            _cdf(ax, r["wait_quantiles_s_by_class"][c], 1.0, r["policy"])
        ax.axvline(60, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_title(f"{c} jobs", fontsize=9)
        ax.set_xlabel("wait, seconds (log; dotted: 60 s)")
        ax.set_ylim(0, 1)
    axes[0, 0].set_ylabel("fraction of jobs")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Wait to first start per workload class, CDF", fontsize=9)
    fig.tight_layout()
    p = out / "wait_cdf_by_class.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    written.append(p)

    fig, ax = plt.subplots(figsize=(10, 3.6))
    for r in pols:
        ys = r["demand_ratio"]["daily"]
        ax.plot(range(len(ys)), ys, lw=1, label=r["policy"])
    ax.axhspan(2, 3, color="#c7e9c0", alpha=0.6, label="2–3×")
    ax.axhline(1, color="black", lw=0.8, ls="--")
    ax.set_xlabel("day")
    ax.set_ylabel("demand ÷ capacity")
    ax.set_title("GPUs asked by pending + running work ÷ GPUs (daily mean)", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    p = out / "demand_over_capacity.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    written.append(p)
    counted = [r for r in pols if r["evictions"].get("beyond_need_counts") and r["evictions"]["decisions"]]
    if counted:
        fig, ax = plt.subplots(figsize=(10, 3.6))
        top = max(int(b) for r in counted for b in r["evictions"]["beyond_need_counts"])
        width = 0.8 / len(counted)
        for i, r in enumerate(counted):
            ev = r["evictions"]
            ys = [ev["beyond_need_counts"].get(str(b), 0) / ev["decisions"] for b in range(top + 1)]
            ax.bar([b + i * width for b in range(top + 1)], ys, width, label=f"{r['policy']} ({ev['decisions']})")
        ax.set_yscale("log")
        ax.set_xlabel("GPUs evicted beyond need in one preemption decision")
        ax.set_ylabel("fraction of decisions (log)")
        ax.set_title("GPUs evicted beyond need per decision (legend: decisions)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = out / "evicted_beyond_need.png"
        fig.savefig(p, dpi=80)
        plt.close(fig)
        written.append(p)
    return written
