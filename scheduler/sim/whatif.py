"""What-if for leadership (docs/simulation.md): replay recorded demand under changed shares.

Pure Python: :class:`Demand` is what the database recorded over a window (the command
``manage.py simulate --from-db`` loads it, see :func:`scheduler.sim.dbdemand.load_demand`);
:func:`parse_shares` reads the changed shares; :func:`whatif` simulates the same demand under
Fairway with them and compares, per budget, actual and simulated entitlement attainment and wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import yaml

from fairway_common import strict_yaml
from scheduler.policy import Budget, Host
from scheduler.policy.figures import attainment, workload_demand
from scheduler.policy.tree import BudgetTree
from scheduler.sim.budgets import BudgetFileError, BudgetPlan, read_shares
from scheduler.sim.simulate import (
    DAY,
    T0,
    Inputs,
    SimConfig,
    TraceSim,
    percentile,
    window_demand,
)
from scheduler.trace import DEFAULT_MIN_RUNTIME_RULE, MinRuntimeRule, TraceJob, UnallocatedRule


@dataclass(frozen=True)
class DemandJob:
    """One recorded workload. Times are epoch seconds.

    ``work_s``: the run time it needs in the simulation — the sum of its attempts' run times when it
    finished by ``now``; None when it had not (it then runs until the end of the simulation).
    ``runs``: its actual attempts as (start, end, allocated), ends clipped to ``now``.
    """

    id: int
    budget: str
    gpus: int
    model: str
    min_runtime: int
    submitted_at: int
    work_s: int | None
    first_start: int | None
    finished_at: int | None
    runs: tuple[tuple[int, int, bool], ...] = ()


@dataclass(frozen=True)
class Demand:
    since: int
    now: int
    hosts: list[Host]
    budgets: list[Budget]
    jobs: list[DemandJob]
    busy: frozenset[str]
    """Budgets with work at ``now`` (``scheduler.policy.pass_state.budgets_with_work`` of the
    cluster's snapshot): those an archived budget needs to stay in its siblings' normalization."""


def parse_shares(text: str, budgets: list[Budget], *, name: str = "<shares>") -> list[Budget]:
    """Apply a shares file to ``budgets``; raises :class:`BudgetFileError` naming the line.

    Format: ``shares:`` then one ``path: N`` per changed budget, where ``path`` is the budget's
    names below the root joined by ``/`` (``nlp/olmo``) and ``N`` a whole number >= 1.
    """
    tree = BudgetTree(budgets)
    by_path = {tree.path_name(k): k for k in tree.budgets if k != tree.root}
    try:
        root = strict_yaml.compose(text)  # no aliases, no key twice (the reader of hand-written YAML)
    except strict_yaml.Refused as exc:
        raise BudgetFileError(name, exc.line, exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BudgetFileError(name, mark.line + 1 if mark else None, f"not valid YAML: {exc}") from None
    except RecursionError:  # "x: [[[...]]]" thousands deep: the composer recurses per level (was a 500)
        raise BudgetFileError(name, None, "not valid YAML: nested too deeply") from None
    if root is None or not isinstance(root, yaml.MappingNode) or len(root.value) != 1:
        raise BudgetFileError(name, 1, "expected one top-level key 'shares' with a mapping of budget paths")
    key, body = root.value[0]
    if not isinstance(key, yaml.ScalarNode) or key.value != "shares" or not isinstance(body, yaml.MappingNode):
        raise BudgetFileError(name, key.start_mark.line + 1, "expected 'shares:' followed by 'path: N' lines")
    new: dict[str, int] = {}
    seen: dict[str, int] = {}  # path -> line: YAML keeps a key's last value, which hid a typo
    for k, v in body.value:
        line = k.start_mark.line + 1
        if not isinstance(k, yaml.ScalarNode):
            raise BudgetFileError(name, line, "expected a budget path like 'nlp/olmo' before ':'")
        path = str(k.value).strip().strip("/")
        if path not in by_path:
            known = ", ".join(sorted(by_path)[:8])
            raise BudgetFileError(name, line, f"unknown budget {path!r} (budgets are named by path, e.g. {known})")
        if path in seen:
            raise BudgetFileError(name, line, f"budget {path!r} is given twice (also on line {seen[path]})")
        seen[path] = line
        shares = read_shares(name, path, v)
        new[by_path[path]] = shares
    return [replace(b, shares=new[b.key]) if b.key in new else b for b in budgets]


def _leaves(budgets: list[Budget]) -> list[str]:
    parents = {b.parent for b in budgets}
    return sorted(b.key for b in budgets if b.key not in parents)


def _entitlements(budgets: list[Budget], gpus: int, seconds: int, busy: frozenset[str]) -> dict[str, float]:
    """``E(b)`` over the replay. An archived budget counts in its siblings' normalization only
    while it has work now (``busy``), as the tick and the budgets page count it (§3.7,
    ``PassState.live_budgets``): counting every budget gave an archived project's share to nobody
    (tryout36); counting only the unfinished workloads submitted inside the window dropped one
    whose work was older, a third figure beside the page's and the admin's (left40)."""
    tree = BudgetTree(budgets)
    shares = tree.normalized_shares(tree.live(busy))
    return {k: float(v) * gpus * seconds for k, v in shares.items()}


def _overlap(a: int, b: int, lo: int, hi: int) -> int:
    return max(0, min(b, hi) - max(a, lo))


def _demand(j: DemandJob, lo: int, hi: int) -> int:
    """GPUs × the time ``j`` was present (pending or running) in [lo, hi), at most its work: a job
    waiting asks for no more than the run time it needs. Jobs are submitted inside the window, so
    that is its whole work; one not finished by now needs the rest of the window (as simulated)."""
    present = _overlap(j.submitted_at, j.finished_at or hi, lo, hi)
    return workload_demand(j.gpus, present, j.work_s)


def actual(demand: Demand) -> dict[str, dict[str, Any]]:
    """Per leaf budget, what happened: delivered, demand, attainment, wait p50/p90 (hours)."""
    lo, hi = demand.since, demand.now
    gpus = sum(h.size for h in demand.hosts)
    ent = _entitlements(demand.budgets, gpus, hi - lo, demand.busy)
    out: dict[str, dict[str, Any]] = {}
    for b in _leaves(demand.budgets):
        jobs = [j for j in demand.jobs if j.budget == b]
        delivered = sum(j.gpus * _overlap(s, e, lo, hi) for j in jobs if j.min_runtime > 0 for s, e, a in j.runs if a)
        dem = sum(_demand(j, lo, hi) for j in jobs if j.min_runtime > 0)
        waits = [(j.first_start if j.first_start is not None else hi) - j.submitted_at for j in jobs]
        out[b] = _row(delivered, dem, ent.get(b, 0.0), waits)
    return out


def _row(delivered: float, dem: float, ent: float, waits: list[int]) -> dict[str, Any]:
    """One side's figures of a budget. Waits: ``wait_p50_s``/``wait_p90_s`` in whole seconds, which
    the page and :func:`format_table` word as every duration (left40: they printed the hours,
    ``2.12`` beside ``24.0``); ``wait_p50_h``/``wait_p90_h`` the same in hours for ``whatif.json``."""
    got = attainment(delivered, ent, dem)
    p50, p90 = (None, None) if not waits else (round(percentile(waits, 50) or 0), round(percentile(waits, 90) or 0))
    return {
        "entitlement_gpu_h": round(ent / 3600, 1),
        "demand_gpu_h": round(dem / 3600, 1),
        "delivered_gpu_h": round(delivered / 3600, 1),
        "attainment": None if got is None else round(float(got), 4),
        "wait_p50_s": p50,
        "wait_p90_s": p90,
        "wait_p50_h": None if p50 is None else round(p50 / 3600, 3),
        "wait_p90_h": None if p90 is None else round(p90 / 3600, 3),
        "jobs": len(waits),
    }


def whatif_heading(window_s: int, jobs: int, gpus: int) -> str:
    """``What-if over 7d: 11 workloads on 4 GPUs``: the admin page's heading and the command's first
    line, the window as every duration reads (tryout49: "7.0 days" for a window asked as 7d)."""
    from fairway_cli.numbers import duration_text

    return f"What-if over {duration_text(window_s)}: {jobs} workload{'' if jobs == 1 else 's'} on {gpus} GPUs"


def whatif(demand: Demand, new_budgets: list[Budget], *, grace_s: int = 30, depth: int | None = None) -> dict[str, Any]:
    """Simulate ``demand`` under Fairway with ``new_budgets``; returns actual and simulated rows per budget."""
    horizon = max(1, demand.now - demand.since)
    jobs = sorted(demand.jobs, key=lambda j: (j.submitted_at, j.id))
    trace = [
        TraceJob(
            job_id=j.id,
            submit_time_s=j.submitted_at - demand.since,
            vc=j.budget,
            num_gpus=j.gpus,
            duration_s=j.work_s if j.work_s is not None else horizon + 1,
            duration_pcs_s=None,
        )
        for j in jobs
        if j.submitted_at >= demand.since
    ]
    plan = BudgetPlan(tuple(new_budgets), {b: b for b in _leaves(new_budgets)}, "database, changed shares")
    cfg = SimConfig(trace="<database>", days=horizon / DAY, grace_s=grace_s, depth=depth)
    inputs = Inputs(
        config=cfg,
        jobs=trace,
        plan=plan,
        min_rule=MinRuntimeRule.parse(DEFAULT_MIN_RUNTIME_RULE),
        unalloc_rule=UnallocatedRule.parse("none"),
        horizon_s=horizon,
        hosts=list(demand.hosts),
        min_runtime_of={j.id: j.min_runtime for j in jobs},
        model_of={j.id: j.model for j in jobs},
        t_base=0,
    )
    from scheduler.policy import schedule

    sim = TraceSim(inputs, schedule) if trace else None
    simulated: dict[str, dict[str, Any]] = {}
    ent = _entitlements(new_budgets, sum(h.size for h in demand.hosts), horizon, demand.busy)
    if sim is not None:
        m = sim.run()
        dem = window_demand(m, T0, horizon, 1)[0]  # one window, the whole replay: capped at each job's work
        for b in _leaves(new_budgets):
            simulated[b] = _row(
                sum(m.delivered_day.get(b, [])),
                dem.get(b, 0.0),
                ent.get(b, 0.0),
                m.waits_by_budget.get(b, []),
            )
    tree = BudgetTree(new_budgets)
    rows = []
    act = actual(demand)
    for b in sorted(_leaves(new_budgets), key=tree.path_name):  # keys may be ids as text: "10" < "9"
        old_share = next(x.shares for x in demand.budgets if x.key == b)
        new_share = next(x.shares for x in new_budgets if x.key == b)
        rows.append(
            {
                "budget": tree.path_name(b),
                "key": b,
                "shares": [old_share, new_share],
                "actual": act.get(b),
                "simulated": simulated.get(b),
            }
        )
    # Every budget whose shares changed, programs included: the rows are leaves only, and a file
    # changing a program showed every row "1→1", as if it had changed nothing.
    before = {x.key: x.shares for x in demand.budgets}
    changed = [
        {"budget": tree.path_name(b.key), "shares": [before[b.key], b.shares]}
        for b in sorted(new_budgets, key=lambda x: tree.path_name(x.key))
        if b.key in before and before[b.key] != b.shares
    ]
    return {
        "since": demand.since,
        "now": demand.now,
        "days": round(horizon / DAY, 3),
        "heading": whatif_heading(int(horizon), len(trace), sum(h.size for h in demand.hosts)),
        "jobs": len(trace),
        "gpus": sum(h.size for h in demand.hosts),
        "changed": changed,
        "budgets": rows,
    }


def format_table(result: dict[str, Any]) -> str:
    """The per-budget comparison as plain text."""

    from fairway_cli.numbers import duration_text, percent_text  # the CLI's, the pages' one wording

    def f(x: Any) -> str:
        return percent_text(x, 1)  # as the admin page and the budgets page: 98.3%

    def wait(x: int | None) -> str:
        return "–" if x is None else duration_text(x)

    lines = [
        f"{result['heading']} (attainment = allocated GPU-time ÷ min(entitlement, demand))",
        "shares changed: "
        + (", ".join(f"{c['budget']} {c['shares'][0]}→{c['shares'][1]}" for c in result.get("changed", [])) or "none"),
        f"{'budget':28} {'shares':>9} {'attain act':>10} {'attain sim':>10} {'p50 act':>8} {'p50 sim':>8} "
        f"{'p90 act':>8} {'p90 sim':>8}",
    ]
    for r in result["budgets"]:
        a, s = r["actual"] or {}, r["simulated"] or {}
        lines.append(
            f"{r['budget'][:28]:28} {r['shares'][0]:>4}→{r['shares'][1]:<4} {f(a.get('attainment')):>10} "
            f"{f(s.get('attainment')):>10} {wait(a.get('wait_p50_s')):>8} {wait(s.get('wait_p50_s')):>8} "
            f"{wait(a.get('wait_p90_s')):>8} {wait(s.get('wait_p90_s')):>8}"
        )
    if result.get("actual_is_standing"):
        lines.append(
            "actual attainment: each budget's standing now, as on the budgets page "
            "(usage ÷ min(entitlement, demand), at most 100%)"
        )
    return "\n".join(lines)


def days_of(seconds: int) -> int:
    return math.ceil(seconds / DAY)
