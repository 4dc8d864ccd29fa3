"""Read-only reports for people: budget standing, cluster occupancy, why a workload is pending.

Nothing here changes state. Budget figures come from the same snapshot and policy views the
tick uses (``scheduler.snapshot.load_snapshot`` → ``scheduler.policy.views``), so what the UI
and the API show is what the scheduler sees. Units: GPU-seconds inside, GPU-hours where a
name says so; times are aware UTC datetimes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from budgets.models import Budget
from scheduler.models import GPU, AttemptGPU, Cluster, Host, Workload
from scheduler.policy import views as policy_views
from scheduler.policy.usage import committed_usage
from scheduler.snapshot import load_snapshot

# --- budget standing -------------------------------------------------------------------------


@dataclass(slots=True)
class BudgetStanding:
    """One budget on one cluster over the lookback window ``W`` (DESIGN.md §1, §3.1, §3.2, §8).

    ``usage_gpu_hours``: allocated GPU-hours charged to the subtree inside the window.
    ``committed_gpu_hours``: ``C(b)``, protection still ahead of its running allocated attempts plus
    ``gpus × M`` of its nominated workloads (``scheduler.policy.usage.committed_usage``).
    ``entitlement_gpu_hours``: ``s(b) × GPUs × W``. ``ratio``: ``(U + C) / E`` (None when the
    budget has no share). ``rank``: 1 = most deserving among its live siblings (lower ratio first,
    §3.2). ``demand_gpu_hours``: GPU-time its allocated workloads asked for while pending or running
    inside the window; ``attainment``: usage ÷ min(entitlement, demand) (§8; None when that is 0).
    """

    budget_id: int
    name: str
    path: str
    parent_id: int | None
    depth: int
    leaf: bool
    archived: bool
    hold: bool
    shares: int
    normalized_share: float
    usage_gpu_hours: float
    committed_gpu_hours: float
    entitlement_gpu_hours: float
    ratio: float | None
    rank: int | None
    siblings: int
    demand_gpu_hours: float
    attainment: float | None
    running_gpus: int = 0
    pending_workloads: int = 0


@dataclass(slots=True)
class ClusterStanding:
    """Every budget's standing on one cluster, in tree order (depth first, siblings by name)."""

    cluster: str
    gpus: int
    window_s: int
    at: datetime
    budgets: list[BudgetStanding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "gpus": self.gpus,
            "window_s": self.window_s,
            "at": self.at,
            "budgets": [asdict(b) for b in self.budgets],
        }


def _hours(gpu_seconds: float) -> float:
    return round(gpu_seconds / 3600, 3)


def _tree_order(tree: dict[int, Budget]) -> list[tuple[Budget, int]]:
    children: dict[int | None, list[Budget]] = defaultdict(list)
    for b in tree.values():
        children[b.parent_id if b.parent_id in tree else None].append(b)
    out: list[tuple[Budget, int]] = []

    def visit(parent: int | None, depth: int) -> None:
        for b in sorted(children.get(parent, ()), key=lambda b: (b.archived_at is not None, b.name, b.id)):
            out.append((b, depth))
            visit(b.id, depth + 1)

    visit(None, 0)
    return out


def _demand(cluster_id: int, now: datetime, window_s: int) -> dict[int, int]:
    """Leaf budget id → GPU-seconds its allocated workloads were pending or running inside the window."""
    since = now - timedelta(seconds=window_s)
    demand: dict[int, int] = defaultdict(int)
    rows = (
        Workload.objects.filter(cluster_id=cluster_id, min_runtime_s__gt=0, submitted_at__lt=now)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=since))
        .values_list("budget_id", "gpu_count", "submitted_at", "finished_at")
    )
    for budget_id, gpus, submitted_at, finished_at in rows:
        start = max(submitted_at, since)
        end = min(finished_at or now, now)
        if end > start:
            demand[budget_id] += int(gpus * (end - start).total_seconds())
    return demand


def budget_standings(cluster: Cluster, tree: dict[int, Budget], now: datetime | None = None) -> ClusterStanding:
    """The standing of every budget of ``tree`` on ``cluster`` at ``now`` (default: the server's now).

    Cost: one snapshot load (a fixed number of queries) plus two aggregate queries.
    """
    now = now or timezone.now()
    snap, _index = load_snapshot(cluster, now)
    usage = policy_views.budget_usage(snap)
    ratios = policy_views.budget_ratios(snap)
    ents = policy_views.entitlements(snap)
    keys = [str(bid) for bid in tree]
    order = policy_views.ratio_order(snap, keys)
    position = {k: i for i, k in enumerate(order)}
    total_gpus = sum(h.size for h in snap.hosts)
    shares_total = total_gpus * snap.window

    # C(b) by the policy's definition: nominated workloads commit from the nomination (§3.2, §3.4).
    committed = committed_usage(snap.attempts, snap.now, snap.nominations, {w.id: w for w in snap.pending})
    running: dict[int, int] = defaultdict(int)
    for a in snap.attempts:
        running[int(a.budget)] += len(a.gpus)
    pending = Counter(int(w.budget) for w in snap.pending)
    demand = _demand(cluster.pk, now, snap.window)

    children: dict[int | None, list[int]] = defaultdict(list)
    for b in tree.values():
        children[b.parent_id].append(b.id)
    live_parents = {b.parent_id for b in tree.values() if b.archived_at is None}

    def subtree_sum(values: dict[int, int], bid: int) -> int:
        return values.get(bid, 0) + sum(subtree_sum(values, c) for c in children.get(bid, ()))

    committed_by_id = {int(k): v for k, v in committed.items()}
    standing = ClusterStanding(cluster=cluster.name, gpus=total_gpus, window_s=snap.window, at=now)
    for budget, depth in _tree_order(tree):
        key = str(budget.id)
        entitlement = ents.get(key, 0)
        siblings = [s for s in children.get(budget.parent_id, ()) if tree[s].archived_at is None or ents.get(str(s), 0)]
        ranked = sorted(siblings, key=lambda s: position.get(str(s), len(position)))
        u = usage.get(key, 0)
        d = subtree_sum(demand, budget.id)
        basis = min(entitlement, d)
        standing.budgets.append(
            BudgetStanding(
                budget_id=budget.id,
                name=budget.name,
                path=budget.path,
                parent_id=budget.parent_id,
                depth=depth,
                leaf=budget.id not in live_parents,
                archived=budget.archived_at is not None,
                hold=budget.hold,
                shares=budget.shares,
                normalized_share=round(entitlement / shares_total, 6) if shares_total else 0.0,
                usage_gpu_hours=_hours(u),
                committed_gpu_hours=_hours(subtree_sum(committed_by_id, budget.id)),
                entitlement_gpu_hours=_hours(entitlement),
                ratio=round(ratios[key], 4) if entitlement and key in ratios else None,
                rank=ranked.index(budget.id) + 1 if budget.id in ranked and budget.parent_id is not None else None,
                siblings=len(ranked),
                demand_gpu_hours=_hours(d),
                attainment=round(u / basis, 4) if basis else None,
                running_gpus=subtree_sum(dict(running), budget.id),
                pending_workloads=subtree_sum(dict(pending), budget.id),
            )
        )
    return standing


# --- occupancy -------------------------------------------------------------------------------


@dataclass(slots=True)
class Occupancy:
    """GPUs of one cluster right now, by what they do, and its workloads by state.

    Every registered GPU (host not removed) is in exactly one of ``allocated`` (held by an
    allocated attempt), ``unallocated`` (held by an unallocated or unfunded attempt), ``idle``
    (schedulable and free), ``unavailable`` (free, but its host is not active or it is unhealthy).
    """

    cluster: str
    gpus: int = 0
    allocated: int = 0
    unallocated: int = 0
    idle: int = 0
    unavailable: int = 0
    hosts_by_state: dict[str, int] = field(default_factory=dict)
    workloads_by_state: dict[str, int] = field(default_factory=dict)
    pending_by_reason: dict[str, int] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)

    @property
    def busy(self) -> int:
        return self.allocated + self.unallocated

    def fraction(self, part: int) -> float:
        return part / self.gpus if self.gpus else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["occupancy"] = round(self.fraction(self.busy), 4)
        return data


def occupancy(clusters: list[Cluster]) -> list[Occupancy]:
    """Occupancy of each cluster; four queries whatever the number of clusters."""
    by_id = {c.pk: Occupancy(cluster=c.name) for c in clusters}
    held: dict[int, bool] = {
        gpu_id: allocated and not unfunded
        for gpu_id, allocated, unfunded in AttemptGPU.objects.filter(
            open=True, attempt__ended_at__isnull=True, gpu__host__cluster_id__in=by_id
        ).values_list("gpu_id", "attempt__allocated", "attempt__unfunded")
    }
    host_states: dict[int, Counter[str]] = defaultdict(Counter)
    for gid, cid, host_state, health, model in GPU.objects.filter(
        host__cluster_id__in=by_id, host__removed_at__isnull=True
    ).values_list("id", "host__cluster_id", "host__state", "health", "model"):
        occ = by_id[cid]
        occ.gpus += 1
        occ.models[model] = occ.models.get(model, 0) + 1
        if gid in held:
            if held[gid]:
                occ.allocated += 1
            else:
                occ.unallocated += 1
        elif host_state == Host.State.ACTIVE and health != GPU.Health.UNHEALTHY:
            occ.idle += 1
        else:
            occ.unavailable += 1
    for cid, state in Host.objects.filter(cluster_id__in=by_id, removed_at__isnull=True).values_list(
        "cluster_id", "state"
    ):
        host_states[cid][state] += 1
    live = Workload.objects.filter(cluster_id__in=by_id).exclude(state__in=Workload.FINAL_STATES)
    for cid, state, reason in live.values_list("cluster_id", "state", "pending_reason"):
        occ = by_id[cid]
        occ.workloads_by_state[state] = occ.workloads_by_state.get(state, 0) + 1
        if state == Workload.State.PENDING:
            key = reason or "not_yet_considered"
            occ.pending_by_reason[key] = occ.pending_by_reason.get(key, 0) + 1
    for cid, occ in by_id.items():
        occ.hosts_by_state = dict(sorted(host_states[cid].items()))
        occ.models = dict(sorted(occ.models.items()))
    return list(by_id.values())


# --- why pending -------------------------------------------------------------------------------


def _window_words() -> str:
    window = int(settings.FAIRWAY["LOOKBACK_WINDOW_S"])
    if window == 7 * 86400:
        return "this week"
    if window % 86400 == 0:
        return f"in the last {window // 86400} days"
    if window % 3600 == 0:
        return f"in the last {window // 3600} hours"
    return f"in the last {window} seconds"


def _when(epoch_s: Any) -> str:
    """An epoch (seconds) as ``14:05 UTC`` today, else ``Mar 3 14:05 UTC``."""
    if not isinstance(epoch_s, int | float):
        return "an unknown time"
    at = datetime.fromtimestamp(epoch_s, tz=UTC)
    if at.date() == timezone.now().date():
        return f"{at:%H:%M} UTC"
    return f"{at:%b} {at.day} {at:%H:%M} UTC"


def _times(ratio: Any) -> str:
    return f"{ratio:.2f}×" if isinstance(ratio, int | float) else "?×"


def _hosts(detail: dict[str, Any]) -> str:
    hosts = detail.get("hosts") or ([detail["host"]] if detail.get("host") else [])
    return ", ".join(str(h) for h in hosts)


def _fair_share_sentence(detail: dict[str, Any]) -> str | None:
    if "other_budget" not in detail:
        return None
    mine, theirs = detail.get("ratio"), detail.get("other_ratio")
    first = detail["other_budget"] if (theirs or 0) <= (mine or 0) else detail.get("budget")
    return (
        f"Budget {detail.get('budget')} has used {_times(mine)} its share {_window_words()} "
        f"(counting this workload's minimum runtime); {detail['other_budget']} has used {_times(theirs)} "
        f"— {first} goes first."
    )


def explain_pending(workload: Workload) -> list[str]:
    """Why ``workload`` is pending, in plain sentences with the numbers of its ``pending_detail``
    (reason codes of DESIGN.md §3.8). Empty when the workload is not pending."""
    if workload.state != Workload.State.PENDING:
        return []
    reason = workload.pending_reason
    detail: dict[str, Any] = workload.pending_detail or {}
    lines: list[str] = []
    if not reason:
        lines.append("Submitted; the scheduler has not considered it yet (it will within a few seconds).")
    elif reason == "unschedulable":
        lines.append(
            f"No host of cluster {workload.cluster.name} can ever hold {detail.get('gpus', workload.gpu_count)} "
            f"× {detail.get('model', workload.gpu_model)} GPUs: it waits until such hardware is registered."
        )
    elif reason == "dependency":
        if detail.get("group") is not None:
            lines.append(
                f"Its array group already runs {detail.get('limit')} members, its %N limit: "
                "it starts when one of them ends."
            )
        else:
            waits = [
                f"#{d.after_id} ({d.after.state}, needs {'success' if d.condition == 'ok' else 'any end'})"
                for d in workload.dependencies.select_related("after").order_by("after_id")
                if d.after.state not in Workload.FINAL_STATES
            ]
            lines.append(f"It waits for {', '.join(waits) or 'the workloads it depends on'} to end.")
    elif reason == "held":
        lines.append("Its budget (or a budget above it) is on hold: no new work starts until leadership releases it.")
    elif reason == "budget_capped":
        if detail.get("unfunded"):
            lines.append(
                f"Budget {detail.get('budget')} has reached its cap, so this workload may only run unallocated "
                "(unfunded): it waits for GPUs that no allocated work can use."
            )
        else:
            lines.append(
                f"Budget {detail.get('budget')} has reached its cap and holds new work until its usage "
                "falls below the cap."
            )
    elif reason == "awaiting_preemption":
        victims = ", ".join(f"#{v}" for v in detail.get("victims", []))
        lines.append(
            f"Workloads {victims} on {detail.get('host')} are being stopped to make room for it; "
            "it starts as soon as they have left."
        )
    elif reason == "reserved_for_other":
        where = _hosts(detail)
        lines.append(
            f"GPUs are free{' on ' + where if where else ''}, but they are reserved for workload "
            f"#{detail.get('reserved_for')}, which ranks higher and needs them (large work is not starved)."
        )
    elif reason == "protected_work":
        where = _hosts(detail) or "the hosts it needs"
        lines.append(
            f"Protected work on {where} ends at {_when(detail.get('protected_until'))}; it can take those GPUs then."
        )
        sentence = _fair_share_sentence(detail)
        if sentence:
            lines.append(sentence)
    elif reason == "fair_share":
        lines.append(
            _fair_share_sentence(detail)
            or "Other budgets are further below their share; their work goes first and may not be preempted for it."
        )
        if _hosts(detail):
            lines.append(f"Room could be made on {_hosts(detail)} only by preempting that work.")
    elif reason == "insufficient_gpus":
        if not workload.allocated:
            lines.append(
                "Unallocated work (minimum runtime 0) only uses GPUs that no allocated work can use, "
                "and none are free now."
            )
        else:
            lines.append(
                f"Not enough {workload.gpu_model} GPUs are free, and no work it may preempt would make room "
                "(the GPUs are held by its own budget's work or by budgets further below their share)."
            )
    else:
        lines.append(f"Pending: {reason}.")
    if detail.get("reserved_start"):
        lines.append(f"GPUs are reserved for it: it starts by {_when(detail['reserved_start'])} at the latest.")
    return lines


def estimate_words(workload: Workload) -> str:
    """The estimated start in words (DESIGN.md §3.8: an upper bound, or none within one window)."""
    if workload.state != Workload.State.PENDING:
        return ""
    if workload.estimated_start is not None:
        return f"By {_when(workload.estimated_start.timestamp())} at the latest (if nothing else ends earlier)."
    reserved = (workload.pending_detail or {}).get("reserved_start")
    if isinstance(reserved, int | float):
        return f"By {_when(reserved)} at the latest (GPUs are reserved for it)."
    return (
        "None yet: estimates are refreshed about once a minute, and there is none when no start "
        "is found within one window without other work ending."
    )
