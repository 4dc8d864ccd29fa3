"""Read-only reports for people: budget standing, cluster occupancy, why a workload is pending.

Nothing here changes state. Budget figures come from the same snapshot and policy views the
tick uses (``scheduler.snapshot.load_snapshot`` → ``scheduler.policy.views``), so what the UI
and the API show is what the scheduler sees. Units: GPU-seconds inside, GPU-hours where a
name says so; times are aware UTC datetimes.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q
from django.utils import timezone

from budgets.models import Budget
from budgets.services import active_boosts, ancestor_ids, boost_words, budget_paths, load_tree, tree_walk
from fairway_cli.numbers import gpu_hours_text, instant_text
from fairway_cli.words import (
    HOLD_WORDS,
    MAINTENANCE_WORDS,
    drain_only,
    no_attempt_text,
    occupancy_words,
    rank_words,
    reason_words,
    short_words,
    side_label,
    standing_heading_words,
)
from scheduler.accounting import silent_until_of
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload
from scheduler.policy.contract import protection_end
from scheduler.policy.figures import (
    NOT_ASKING,
    BudgetFigures,
    asking_span,
    budget_figures,
    owed,
    usage_curve,
    workload_demand,
)
from scheduler.policy.types import PendingReason
from scheduler.sim.estimate import reservation_latest
from scheduler.sizes import format_size
from scheduler.snapshot import epoch_up, load_snapshot
from scheduler.tick_figures import StandingFigures, shows_numbers, standing_figures

# --- budget standing -------------------------------------------------------------------------


@dataclass(slots=True)
class BudgetStanding:
    """One budget on one cluster over the lookback window ``W`` (DESIGN.md §1, §3.1, §3.2, §8).

    ``usage_gpu_hours``: allocated GPU-hours charged to the subtree inside the window.
    ``committed_gpu_hours``: ``C(b)``, protection still ahead of its running allocated attempts plus
    ``gpus × M`` of its nominated workloads (``scheduler.policy.usage.committed_usage``).
    ``entitlement_gpu_hours``: ``s(b) × GPUs × W``. ``ratio``: ``(U + C) / E`` (None when the
    budget has no share); ``ratio_text`` the same with the significant digits that tell it from
    every other budget's ratio. ``rank``: 1 = most deserving among its live siblings (lower ratio
    first, §3.2). ``demand_gpu_hours``: GPU-time its allocated workloads asked for while pending or
    running inside the window and able to run (not held, capped, waiting for other work or fitting
    no hardware), each at most the run time it needed; ``owed_gpu_hours``:
    min(entitlement, demand); ``attainment``: usage ÷ owed, capped at 1 (§8; None when owed is 0).
    All from :func:`scheduler.policy.figures.budget_figures`.
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
    ratio_text: str
    rank: int | None
    siblings: int
    demand_gpu_hours: float
    owed_gpu_hours: float
    attainment: float | None
    effective_usage: float = 0.0
    """Slurm's ``EffectvUsage`` (Fair Tree): U(b) ÷ U(parent), the budget's share of its parent's
    usage (its siblings' and its own); a root 1 when it has usage; 0 when the parent has none."""
    running_gpus: int = 0
    pending_workloads: int = 0
    usage_curve_gpu_hours: list[float] = field(default_factory=list)
    """Cumulative usage at evenly spaced instants from the window's start to now (when asked for)."""
    cap_gpu_hours: float | None = None
    """The cap (DESIGN.md §3.7): allocated GPU-hours per ``cap_period_days``; None: no cap."""
    cap_period_days: int = 30
    on_cap: str = Budget.OnCap.DOWNGRADE
    capped: bool = False
    """The cap is reached now (over every cluster, as the tick judges it)."""
    cap_used_gpu_hours: float | None = None
    """Allocated GPU-hours of the subtree over the cap period, every cluster (what ``capped``
    compares with the cap; ``policy.caps.cap_state``); None without a cap."""
    cap_text: str = ""
    """The cap in the words every surface shows (:func:`cap_words`); "" without a cap."""
    boost_until: datetime | None = None
    """When its active temporary share ends (docs/standing.md, "Temporary shares"); None: none."""
    boost_then_shares: int | None = None
    """The shares it returns to then."""
    boost_text: str = ""
    """``share 3 until Dec 20 00:00:00 UTC (then 1)`` (``budgets.services.boost_words``); "" without one."""
    rank_text: str = ""
    """``3rd of 3``: the rank as the pages and the CLI say it (:func:`fairway_cli.words.rank_words`)."""


@dataclass(slots=True)
class ClusterStanding:
    """Every budget's standing on one cluster, in tree order (depth first, siblings by name)."""

    cluster: str
    gpus: int
    window_s: int
    at: datetime
    budgets: list[BudgetStanding] = field(default_factory=list)

    @property
    def heading_text(self) -> str:
        """``default: 20 GPUs × 7d = 3,360 GPU-h per window``: the budgets page's heading and the
        CLI's (:func:`fairway_cli.words.standing_heading_words`), the root's entitlement."""
        entitled = self.budgets[0].entitlement_gpu_hours if self.budgets else 0.0
        return standing_heading_words(self.cluster, self.gpus, self.window_s, entitled)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "gpus": self.gpus,
            "window_s": self.window_s,
            "heading_text": self.heading_text,
            "at": self.at,
            "budgets": [asdict(b) for b in self.budgets],  # the serializer lists the fields it shows
        }


def _hours(gpu_seconds: float) -> float:
    return round(float(gpu_seconds) / 3600, 3)


def no_attempt_words(state: str) -> str:
    """What a workload without an attempt says of it (the API's ``no_attempt``, its page's
    attempts and log tail): a pending one may still get one; a finished one never ran, which
    "no attempt yet" did not say of a workload canceled before it started (try55)."""
    return no_attempt_text(state, state in Workload.FINAL_STATES)


def cap_words(
    cap_gpu_hours: float | None, period_days: int, on_cap: str, capped: bool, used_gpu_hours: float | None = None
) -> str:
    """A budget's cap as the budgets page and ``fairway budgets`` show it: ``100 GPU-h / 30 d,
    then unfunded``, led by what its subtree used of it in the period when known (``41.2 of 100
    GPU-h / 30 d``: the cap alone left leadership unable to tell how near it was, try38),
    ``(reached)`` appended when its usage has reached it; "" without a cap."""
    if cap_gpu_hours is None:
        return ""
    then = "held" if on_cap == Budget.OnCap.HOLD else "unfunded"
    used = f"{gpu_hours_text(used_gpu_hours)} of " if used_gpu_hours is not None else ""
    return f"{used}{gpu_hours_text(cap_gpu_hours)} GPU-h / {period_days} d, then {then}" + (
        " (reached)" if capped else ""
    )


def ratio_texts(values: list[Any]) -> list[str]:
    """Ratios as text with the fewest significant digits (at least 3) that print every two
    different values differently (the finding: "0.00× … 0.00× — small goes first")."""
    nums = [None if v is None else float(v) for v in values]
    distinct = {v for v in nums if v is not None}
    for digits in range(3, 18):
        texts = [None if v is None else _significant(v, digits) for v in nums]
        if len({t for t in texts if t is not None}) == len(distinct):
            return [t if t is not None else "–" for t in texts]
    return [t if t is not None else "–" for t in texts]


def sibling_ratio_texts(order: Sequence[tuple[Budget, int]], figures: Mapping[str, BudgetFigures]) -> list[str]:
    """The ratio texts of the budgets in ``order``, each with the digits :func:`ratio_texts` needs
    among its siblings (the budgets its rank compares it with, and the why-pending sentence too),
    not over the whole tree: two budgets under different parents, equal to three digits, made every
    ratio of the page take four ("0.8476×") while the sentence said "0.848×" (shots59)."""
    by_parent: dict[int | None, list[int]] = defaultdict(list)
    for i, (budget, _depth) in enumerate(order):
        by_parent[budget.parent_id].append(i)
    texts = [""] * len(order)
    for members in by_parent.values():
        ratios = [f.ratio if (f := figures.get(str(order[i][0].id))) else None for i in members]
        for i, text in zip(members, ratio_texts(ratios), strict=True):
            texts[i] = text
    return texts


def _significant(value: float, digits: int) -> str:
    """``value`` rounded to ``digits`` significant digits, in plain (not exponent) notation."""
    if value == 0:
        return "0"
    text = format(Decimal(f"{value:.{digits - 1}e}"), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _effective_usage(own: BudgetFigures, parent: BudgetFigures | None) -> float:
    """Slurm's ``EffectvUsage`` under Fair Tree: the budget's usage over its parent's (a subtree's
    usage includes its sub-budgets', so this is its fraction of the usage under its parent); a
    root, with no parent, 1 when it has usage. 0 when there is no usage to divide by."""
    whole = own.usage if parent is None else parent.usage
    return float(own.usage / whole) if whole else 0.0


def _demand(cluster_id: int, now: datetime, window_s: int) -> dict[str, int]:
    """Budget key → GPU-seconds its allocated workloads asked for inside the window
    (:func:`scheduler.policy.figures.workload_demand`: the time present while it could run, at most
    the run time a finished workload needed there). A workload asks from the instant its
    prerequisites were final, and not in a current wait of a reason in
    :data:`~scheduler.policy.figures.NOT_ASKING` (held, capped, waiting for other work, no
    hardware): :func:`~scheduler.policy.figures.asking_span`. A workload running on an ``offline``
    host asks up to that host's last heartbeat (:func:`scheduler.accounting.silent_until_of`, where
    its usage stops). Two queries, three when work runs."""
    since = now - timedelta(seconds=window_s)
    rows = list(
        Workload.objects.filter(cluster_id=cluster_id, min_runtime_s__gt=0, submitted_at__lt=now)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=since))
        .values_list("id", "budget_id", "gpu_count", "submitted_at", "finished_at", "state", "pending_reason")
        # The instant its prerequisites (``after``) were all final: the last end, when none is open.
        .annotate(
            ready=Max("dependencies__after__finished_at"),
            open_after=Count("dependencies", filter=Q(dependencies__after__finished_at__isnull=True)),
        )
    )
    ids = [r[0] for r in rows]
    # Whole seconds (floored), as the usage counts a closed attempt and as it is charged
    # (lifecycle.charged_seconds): with the exact instants a finished budget was owed 0.519 GPU-h
    # and delivered 0.521.
    now_s, since_s = math.floor(now.timestamp()), math.floor(since.timestamp())
    ran: dict[int, int] = defaultdict(int)
    last_end: dict[int, datetime] = {}
    running: list[int] = []
    for wid, started, ended in (
        Attempt.objects.filter(workload_id__in=ids, started_at__isnull=False, started_at__lt=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
        .values_list("workload_id", "started_at", "ended_at")
    ):
        lo, hi = max(math.floor(started.timestamp()), since_s), min(math.floor((ended or now).timestamp()), now_s)
        if hi > lo:
            ran[wid] += hi - lo
        if ended is None:
            running.append(wid)
        elif wid not in last_end or ended > last_end[wid]:
            last_end[wid] = ended
    # A running attempt on an offline host asks, as it is charged and its usage counts, only up to
    # that host's last heartbeat (DESIGN.md §4; accounting's one statement of the rule): counted to
    # now, its demand grew while its usage stood still and the attainment fell (num42).
    silent = silent_until_of(running) if running else {}
    demand: dict[str, int] = defaultdict(int)
    for wid, budget_id, gpus, submitted_at, finished_at, state, reason, ready_at, open_after in rows:
        # Prerequisites not all final (or final only after ``now``): not ready; none: ready at once.
        ready = math.inf if open_after or (ready_at is not None and ready_at > now) else None
        if ready is None and ready_at is not None:
            ready = math.floor(ready_at.timestamp())
        waiting = None
        if state == Workload.State.PENDING and reason in NOT_ASKING:
            waiting = math.floor(max(submitted_at, last_end.get(wid, submitted_at)).timestamp())
        end = math.floor(min(finished_at or now, now, silent.get(wid, now)).timestamp())
        lo, hi = asking_span(max(math.floor(submitted_at.timestamp()), since_s), end, ready, waiting)
        if hi > lo:
            need = ran[wid] if finished_at is not None and finished_at <= now else None
            demand[str(budget_id)] += workload_demand(gpus, int(hi - lo), need)
    return demand


def budget_standings(
    cluster: Cluster, tree: dict[int, Budget], now: datetime | None = None, *, curve_points: int = 0
) -> ClusterStanding:
    """The standing of every budget of ``tree`` on ``cluster`` at ``now`` (default: the server's now).

    The figures are :func:`scheduler.policy.figures.budget_figures` of the cluster's snapshot, the
    one computation every surface reads. Cost: one snapshot load (a fixed number of queries) plus
    two for the demand. ``curve_points`` > 1 also fills ``usage_curve_gpu_hours``
    (:func:`scheduler.policy.figures.usage_curve`).
    """
    now = now or timezone.now()
    snap, index = load_snapshot(cluster, now, with_cap_records=False)  # nothing simulated: caps summed in SQL
    figures = budget_figures(snap, _demand(cluster.pk, now, snap.window))
    curves = usage_curve(snap, curve_points) if curve_points > 1 else {}
    total_gpus = sum(h.size for h in snap.hosts)
    running: dict[str, int] = defaultdict(int)
    for a in snap.attempts:
        running[a.budget] += len(a.gpus)
    pending = Counter(w.budget for w in snap.pending)
    children: dict[int | None, list[int]] = defaultdict(list)
    for b in tree.values():
        children[b.parent_id].append(b.id)
    live_parents = {b.parent_id for b in tree.values() if b.archived_at is None}

    def subtree_sum(values: dict[str, int], bid: int) -> int:
        return values.get(str(bid), 0) + sum(subtree_sum(values, c) for c in children.get(bid, ()))

    capped = {b.key for b in snap.budgets if b.capped}
    boosts = active_boosts()
    standing = ClusterStanding(cluster=cluster.name, gpus=total_gpus, window_s=snap.window, at=now)
    order = tree_walk(tree)
    texts = sibling_ratio_texts(order, figures)
    for (budget, depth), text in zip(order, texts, strict=True):
        f = figures.get(str(budget.id))
        if f is None:  # a budget of another root's tree: not in this cluster's snapshot
            continue
        cap = float(budget.cap_gpu_hours) if budget.cap_gpu_hours is not None else None
        is_capped = str(budget.id) in capped
        cap_used = _hours(index.cap_used.get(budget.id, 0)) if cap is not None else None
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
                normalized_share=float(f.share),
                usage_gpu_hours=_hours(f.usage),
                committed_gpu_hours=_hours(f.committed),
                entitlement_gpu_hours=_hours(f.entitlement),
                ratio=float(f.ratio) if f.ratio is not None else None,
                ratio_text=text,
                rank=f.rank if budget.parent_id is not None else None,
                siblings=f.siblings,
                demand_gpu_hours=_hours(f.demand),
                owed_gpu_hours=_hours(owed(f.entitlement, f.demand)),
                attainment=float(f.attainment) if f.attainment is not None else None,
                effective_usage=_effective_usage(f, figures.get(str(budget.parent_id))),
                running_gpus=subtree_sum(running, budget.id),
                pending_workloads=subtree_sum(dict(pending), budget.id),
                usage_curve_gpu_hours=[_hours(v) for v in curves.get(str(budget.id), ())],
                cap_gpu_hours=cap,
                cap_period_days=budget.cap_period_days,
                on_cap=budget.on_cap,
                capped=is_capped,
                cap_used_gpu_hours=cap_used,
                cap_text=cap_words(cap, budget.cap_period_days, budget.on_cap, is_capped, cap_used),
                boost_until=boost.ends_at if (boost := boosts.get(budget.id)) else None,
                boost_then_shares=boost.base_shares if boost else None,
                boost_text=boost_words(boost, now),
                rank_text=rank_words(f.rank, f.siblings) if budget.parent_id is not None else "",
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
    ``unhealthy`` counts the free GPUs reporting unhealthy, whatever their host's state: a part of
    ``unavailable``, not a state of its own. The API, the web pages and /metrics read these numbers.
    """

    cluster: str
    gpus: int = 0
    allocated: int = 0
    unallocated: int = 0
    idle: int = 0
    unavailable: int = 0
    unhealthy: int = 0
    hosts_by_state: dict[str, int] = field(default_factory=dict)
    workloads_by_state: dict[str, int] = field(default_factory=dict)
    pending_by_reason: dict[str, int] = field(default_factory=dict)
    pending_held: dict[str, int] = field(default_factory=dict)
    """Of the pending ``held``: those on a hold of their own, by kind (``user``, ``admin``;
    docs/jobs.md "Hold and release"); the rest wait for their budget's hold."""
    pending_maintenance: int = 0
    """Of the pending ``reserved_for_other``: those a scheduled drain alone keeps out
    (:func:`fairway_cli.words.drain_only`), "GPUs reserved for maintenance" in the lists (list59)."""
    models: dict[str, int] = field(default_factory=dict)

    @property
    def busy(self) -> int:
        return self.allocated + self.unallocated

    @property
    def text(self) -> str:
        """``7 of 8 GPUs occupied (88%)``: the one sentence of the pages and the API (words63)."""
        return occupancy_words(self.busy, self.gpus)

    def fraction(self, part: int) -> float:
        return part / self.gpus if self.gpus else 0.0

    def why_waits(self) -> list[tuple[str, str, int]]:
        """ "Why work waits" on the metrics page: (words, reason code, count) per reason, a
        workload's own hold apart from its budget's (brk47: every ``held`` read "budget on
        hold"), in the words of the lists (:func:`fairway_cli.words.reason_words`)."""
        rows = []
        for reason, n in self.pending_by_reason.items():
            own = self.pending_held if reason == PendingReason.HELD else {}
            drains = self.pending_maintenance if reason == PendingReason.RESERVED_FOR_OTHER else 0
            if budgets := n - sum(own.values()) - drains:
                rows.append((reason_words(reason), reason, budgets))
            if drains:
                rows.append((MAINTENANCE_WORDS, reason, drains))
            rows += [(reason_words(reason, hold=kind), reason, own[kind]) for kind in HOLD_WORDS if kind in own]
        return rows

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["occupancy"] = round(self.fraction(self.busy), 4)
        data["occupancy_text"] = self.text
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
    for gid, cid, host_state, health, model in (
        GPU.objects.registered()
        .filter(host__cluster_id__in=by_id, host__removed_at__isnull=True)
        .values_list("id", "host__cluster_id", "host__state", "health", "model")
    ):
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
            occ.unhealthy += health == GPU.Health.UNHEALTHY
    for cid, state in Host.objects.filter(cluster_id__in=by_id, removed_at__isnull=True).values_list(
        "cluster_id", "state"
    ):
        host_states[cid][state] += 1
    live = Workload.objects.filter(cluster_id__in=by_id).exclude(state__in=Workload.FINAL_STATES)
    rows = live.values_list(
        "cluster_id", "state", "pending_reason", "hold", "pending_detail__drain", "pending_detail__reserved_for"
    )
    for cid, state, reason, hold, drain, reserved_for in rows:
        occ = by_id[cid]
        occ.workloads_by_state[state] = occ.workloads_by_state.get(state, 0) + 1
        if state == Workload.State.PENDING:
            key = reason or "not_yet_considered"
            occ.pending_by_reason[key] = occ.pending_by_reason.get(key, 0) + 1
            if key == PendingReason.HELD and hold:
                occ.pending_held[hold] = occ.pending_held.get(hold, 0) + 1
            occ.pending_maintenance += drain_only(key, {"drain": drain, "reserved_for": reserved_for}) is not None
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
    """An epoch (seconds) as ``14:05:09 UTC`` today, else ``Mar 3 14:05:09 UTC``
    (:func:`fairway_cli.numbers.instant_text`, the one wording of instants). Times keep their
    seconds, as the CLI, the events and the quote table write them: a bound like "starts by … at
    the latest" cut to the minute would name an instant up to 59 s before the real one (another
    day's too: a reservation's protection end and its latest start a grace later, read after
    midnight, were the same minute)."""
    if not isinstance(epoch_s, int | float):
        return "an unknown time"
    return instant_text(epoch_s)


def _hosts(detail: dict[str, Any]) -> str:
    hosts = detail.get("hosts") or ([detail["host"]] if detail.get("host") else [])
    return ", ".join(str(h) for h in hosts)


def _side(f: BudgetFigures | None, path: str, commitment: int, text: str) -> dict[str, Any]:
    if f is None:
        return {"path": path}
    ratio = f.ratio_with(commitment)
    used, committed, entitled = _hours(f.usage), _hours(f.committed + commitment), _hours(f.entitlement)
    return {
        "path": path,
        "after_this_one": commitment > 0,
        "label": side_label(path, commitment > 0),
        "used_gpu_hours": used,
        "committed_gpu_hours": committed,
        "entitled_gpu_hours": entitled,
        "ratio": float(ratio) if ratio is not None else None,
        "ratio_text": text,
        # As the sentence prints them (gpu_hours_text), so the page's table and the CLI's lines
        # show the sentence's digits, not three roundings of one number.
        "used_text": gpu_hours_text(used),
        "committed_text": gpu_hours_text(committed),
        "entitled_text": gpu_hours_text(entitled),
    }


def _numbers(
    workload: Workload, detail: dict[str, Any], now: datetime, standing: StandingFigures | None = None
) -> dict[str, Any]:
    """The figures behind a fair-share comparison, from the one standing: both sides' used,
    committed and entitled GPU-hours and ratios, this workload's commitment on its side, and
    ``at``, the standing's instant: the last tick's, which decided the reason on these figures
    (:func:`scheduler.tick_figures.standing_figures`; ``now``'s when no recent tick's are cached)."""
    if not shows_numbers(detail):
        return {}
    mine, rival = detail["budget_key"], detail["rival_key"]
    standing = standing or standing_figures(workload.cluster_id, now)
    figures = standing.figures
    commitment = workload.gpu_count * workload.min_runtime_s
    a, b = figures.get(str(mine)), figures.get(str(rival))
    ra = a.ratio_with(commitment) if a else None
    rb = b.ratio if b else None
    ta, tb = ratio_texts([ra, rb])
    first = "other_budget" if ra is not None and rb is not None and rb <= ra else "budget"
    return {
        "budget": _side(a, str(detail.get("budget")), commitment, ta),
        "other_budget": _side(b, str(detail.get("other_budget")), 0, tb),
        "commitment_gpu_hours": _hours(commitment),
        "first": first,
        "at": standing.at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }


def _blocking(
    workload: Workload,
    detail: dict[str, Any],
    now: datetime,
    tree: dict[int, Budget] | None,
    figures: dict[str, BudgetFigures] | None = None,
) -> list[dict[str, Any]]:
    """The blocking workloads the tick named that still hold GPUs, each with its budget and why it
    is in the way (one query each for the workloads and their open attempts; the budgets from
    ``tree`` when given, ``budgets.services.load_tree``'s shape, else one more).

    The policy names, under ``protected_work``, the victims rule 2 of DESIGN.md §3.4 allows that
    are still protected, and under ``fair_share`` the work rule 2 forbids (§3.8). So:

    - ``protected_work``: ``protected_until`` is the victim's protection end, never missing for
      allocated work: an attempt still starting is protected until ``M`` after the agent confirms
      it, so at least ``now + M`` (``starting: true``; the policy's room profile assumes the same,
      ``contract.host_room``). The earliest instant room could be made, not a start.
    - ``fair_share``: ``protected_until`` is null (num45: "protected until 17:12" read as "it
      starts at 17:12" where the work may not be preempted for it at any time);
      ``further_below`` gives the two sides rule 2 compared for this victim (its side and the
      waiting workload's, counting its commitment), from ``figures`` (the one standing).

    ``text`` is the entry in the words every surface shows (:func:`blocking_words`);
    ``protection_text`` repeats it for clients that read only that field."""
    ids = [int(x) for x in detail.get("blocking") or [] if str(x).isdigit()]
    if not ids:
        return []
    rows = {w.pk: w for w in Workload.objects.filter(pk__in=ids).only("id", "name", "budget_id", "min_runtime_s")}
    open_attempts = {
        wid: (started, until, allocated)
        for wid, started, until, allocated in Attempt.objects.filter(
            workload_id__in=ids, ended_at__isnull=True
        ).values_list("workload_id", "started_at", "protected_until", "allocated")
    }
    tree = tree if tree is not None else load_tree()
    paths = budget_paths(tree)
    forbidden = workload.pending_reason == "fair_share"
    out = []
    for wid in ids:
        w = rows.get(wid)
        if w is None or wid not in open_attempts:
            continue  # ended (or requeued) since the tick: no longer in the way
        started, until, allocated = open_attempts[wid]
        starting = started is None
        if starting and allocated:
            until = datetime.fromtimestamp(protection_end(None, w.min_runtime_s, epoch_up(now)), tz=UTC)
        entry: dict[str, Any] = {
            "workload": wid,
            "name": w.name,
            "budget": paths.get(w.budget_id, str(w.budget_id)),
            "protected_until": until.astimezone(UTC).isoformat().replace("+00:00", "Z") if until else None,
            "starting": starting,
            "forbidden": forbidden,
            "further_below": None,
        }
        if forbidden:
            entry["protected_until"] = None
            entry["further_below"] = _further_below(workload, w.budget_id, tree, paths, figures or {})
        entry["text"] = entry["protection_text"] = blocking_words(entry, until, now)
        out.append(entry)
    return out


def _further_below(
    workload: Workload,
    budget_id: int,
    tree: dict[int, Budget],
    paths: dict[int, str],
    figures: dict[str, BudgetFigures],
) -> dict[str, Any] | None:
    """The two sides rule 2 (DESIGN.md §3.4) compares between ``workload`` and work of budget
    ``budget_id``: the children of their lowest common ancestor (``Tree.split``'s ``(A, B)``),
    ``waiting_side`` A with the workload's commitment, ``side`` B, with their ratios from
    ``figures`` (texts by :func:`ratio_texts`, as the numbers print them). None when one budget
    contains the other or a side has no share."""
    mine, theirs = tree.get(workload.budget_id), tree.get(budget_id)
    if mine is None or theirs is None:
        return None
    chain_a, chain_b = ancestor_ids(mine, tree)[::-1], ancestor_ids(theirs, tree)[::-1]
    split = next(((a, b) for a, b in zip(chain_a, chain_b, strict=False) if a != b), None)
    if split is None:
        return None
    fa, fb = figures.get(str(split[0])), figures.get(str(split[1]))
    ra = fa.ratio_with(workload.gpu_count * workload.min_runtime_s) if fa else None
    rb = fb.ratio if fb else None
    if ra is None or rb is None:
        return None
    ta, tb = ratio_texts([ra, rb])
    return {
        "side": paths.get(split[1], str(split[1])),
        "ratio": float(rb),
        "ratio_text": tb,
        "waiting_side": paths.get(split[0], str(split[0])),
        "waiting_ratio": float(ra),
        "waiting_ratio_text": ta,
    }


def blocking_words(entry: dict[str, Any], until: datetime | None, now: datetime) -> str:
    """Why one blocking workload is in the way, in the words the API (``text``, ``why_pending``),
    the page and ``fairway show`` print (DESIGN.md §3.8, docs/estimates.md "The work in the way"):

    - work rule 2 forbids (``fair_share``): ``vision is further below its share (ratio 0.412× <
      1.73× for nlp): it may not be preempted for this workload`` — no protection end, which would
      read as the instant it starts (num45);
    - a victim rule 2 allows (``protected_work``): its protection end (:func:`_protection_words`),
      the earliest instant it could be preempted."""
    if entry.get("forbidden"):
        f = entry.get("further_below")
        if f is None:  # a side without a share, or the standing is gone: still no protection end
            return "its budget is further below its share: it may not be preempted for this workload"
        rel = "<" if f["ratio"] < f["waiting_ratio"] else "="
        return (
            f"{f['side']} is further below its share (ratio {f['ratio_text']}× {rel} {f['waiting_ratio_text']}× "
            f"for {f['waiting_side']}): it may not be preempted for this workload"
        )
    return _protection_words(until, bool(entry.get("starting")), now)


def _protection_words(until: datetime | None, starting: bool, now: datetime) -> str:
    """A blocking attempt's protection end in words: ``protected until 14:05:09 UTC``,
    ``starting, protected until at least 14:05:09 UTC`` or ``protection ended 13:05:09 UTC``.

    The end is the policy's: whole seconds rounded up (``snapshot.epoch_up``), the second the
    reason's own sentence names ("Protected work on h1 ends at …"), not the one before it."""
    if until is None:
        return "not protected"
    at = instant_text(until)  # rounded up, as epoch_up
    if starting:
        return f"starting, protected until at least {at}"
    return f"protected until {at}" if until > now else f"protection ended {at}"


def _blocking_line(blocking: list[dict[str, Any]]) -> str:
    return ", ".join(f"#{b['workload']} {b['name']} ({b['budget']}, {b['text']})" for b in blocking)


def _fair_share_sentence(numbers: dict[str, Any]) -> str | None:
    if not numbers:
        return None
    a, b = numbers["budget"], numbers["other_budget"]
    if a.get("ratio") is None or b.get("ratio") is None:
        return None
    first = b["path"] if numbers["first"] == "other_budget" else a["path"]
    return (
        f"Budget {a['path']} has used {a['ratio_text']}× its share {_window_words()} counting this workload's "
        f"{gpu_hours_text(numbers['commitment_gpu_hours'])} GPU-h of minimum runtime "
        f"({gpu_hours_text(a['used_gpu_hours'])} GPU-h used "
        f"+ {gpu_hours_text(a['committed_gpu_hours'])} GPU-h committed "
        f"of {gpu_hours_text(a['entitled_gpu_hours'])} GPU-h entitled); {b['path']} has used {b['ratio_text']}× "
        f"({gpu_hours_text(b['used_gpu_hours'])} + {gpu_hours_text(b['committed_gpu_hours'])} of "
        f"{gpu_hours_text(b['entitled_gpu_hours'])} GPU-h) — {first} goes first."
    )


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    """Why a workload is pending, in parts that each surface renders (the page links the blocking
    work, the CLI lists it, the API gives it structured and in words): ``reason`` (the code of
    DESIGN.md §3.8), ``sentences`` (the decision in words; none of them lists the blocking work),
    ``numbers`` (both sides of a fair-share comparison, from the one standing) and ``blocking``
    (the workloads in the way, with budget and protection end: :func:`_blocking`)."""

    reason: str = ""
    sentences: tuple[str, ...] = ()
    numbers: dict[str, Any] = field(default_factory=dict)
    blocking: tuple[dict[str, Any], ...] = ()

    @property
    def sentence(self) -> str:
        return self.sentences[0] if self.sentences else ""

    def lines(self) -> list[str]:
        """Every part as text, one line each: the sentences, then the blocking work ("In the way:
        #12 name (budget, protected until …).") — the API's ``why_pending``."""
        tail = [f"In the way: {_blocking_line(list(self.blocking))}."] if self.blocking else []
        return [*self.sentences, *tail]

    def as_dict(self) -> dict[str, Any]:
        """The API's ``pending_explanation``."""
        return {
            "reason": self.reason,
            "sentence": self.sentence,
            "sentences": list(self.sentences),
            "numbers": self.numbers,
            "blocking": list(self.blocking),
        }


def explain_pending(
    workload: Workload, now: datetime | None = None, tree: dict[int, Budget] | None = None
) -> PendingExplanation:
    """Why ``workload`` is pending (reason codes of DESIGN.md §3.8), in parts: see
    :class:`PendingExplanation`. Empty when the workload is not pending. ``tree``: every budget by
    id (``budgets.services.load_tree``), to name budgets without a query. Costs one cache read when
    there are numbers (the last tick's figures, :func:`scheduler.tick_figures.standing_figures`; a
    snapshot load without them), two queries when there is blocking work (three without ``tree``);
    computed once per request."""
    cached = getattr(workload, "_pending_explanation", None)
    if cached is not None:
        return cached
    out = PendingExplanation()
    if workload.state == Workload.State.PENDING:
        now = now or timezone.now()
        detail: dict[str, Any] = workload.pending_detail or {}
        numbers: dict[str, Any] = {}
        blocking: list[dict[str, Any]] = []
        if workload.pending_reason in ("fair_share", "protected_work"):
            # one standing for the numbers and the forbidden work's sides (fair_share)
            standing = (
                standing_figures(workload.cluster_id, now)
                if shows_numbers(detail) or (workload.pending_reason == "fair_share" and detail.get("blocking"))
                else None
            )
            numbers = _numbers(workload, detail, now, standing)
            blocking = _blocking(workload, detail, now, tree, standing.figures if standing else None)
        sentences = _lines(workload, detail, numbers, tree)
        out = PendingExplanation(workload.pending_reason, tuple(sentences), numbers, tuple(blocking))
    workload._pending_explanation = out  # type: ignore[attr-defined]  # one computation per request
    return out


def _held_path(workload: Workload, tree: dict[int, Budget] | None) -> str:
    """The path of the budget whose hold keeps ``workload`` waiting (its own or the nearest above
    it); "" when none is on hold any more."""
    tree = tree if tree is not None else load_tree()
    budget = tree.get(workload.budget_id)
    held = [tree[i] for i in ancestor_ids(budget, tree) if i in tree and tree[i].hold] if budget is not None else []
    return budget_paths(tree).get(held[0].pk, "") if held else ""


def _own_hold_sentence(workload: Workload) -> str:
    """The reason ``held`` of a workload on a hold of its own (docs/jobs.md "Hold and release"):
    which kind, since when, and who may release it."""
    since = f" since {instant_text(workload.held_at)}" if workload.held_at else ""
    who = "an admin" if workload.hold == "admin" else "its owner or a budget manager (or an admin)"
    return (
        f"{HOLD_WORDS.get(workload.hold, 'held').capitalize()} ({workload.hold} hold){since}: it never starts "
        f"until {who} releases it, and then keeps its place in its budget's queue."
    )


def _cap_numbers(path: str, budget_id: int, tree: dict[int, Budget] | None) -> str:
    """`` (0.01 GPU-hours of allocated use per 7 days)``: the cap, as leadership set it, of the
    budget at ``path`` among budget ``budget_id`` and its ancestors (the workload's, the one the
    policy named: tryout36, the sentence gave no number), archived or not (pages46: archived, the
    sentence lost its numbers; a live namesake is another budget); "" when it has no cap any more."""
    tree = tree if tree is not None else load_tree()
    own = tree.get(budget_id)
    for pk in ancestor_ids(own, tree) if own is not None else []:
        budget = tree.get(pk)
        if budget is not None and budget.path == path:
            if budget.cap_gpu_hours is None:
                return ""
            days = budget.cap_period_days
            return (
                f" ({gpu_hours_text(float(budget.cap_gpu_hours))} GPU-hours of allocated use per "
                f"{days} day{'' if days == 1 else 's'})"
            )
    return ""


def unfunded_sentence(budget: str, cap: str) -> str:
    """Why allocated work downgraded by budget ``budget``'s cap (``on_cap`` downgrade) waits: it runs
    unallocated, free and preemptible at any time (DESIGN.md §3.7). ``cap``: the cap's numbers
    (:func:`_cap_numbers`). The pending reason ``budget_capped`` with ``unfunded``, which a pass writes
    and, where the budget's nearest cap is 0 GPU-hours, the submission writes at once (rules48:
    ``fairway submit``, the API's answer and the form's message said nothing of it)."""
    return (
        f"Budget {budget} has reached its cap{cap}, so this workload runs unallocated (unfunded): free, "
        "but preemptible at any time (its minimum runtime protects nothing); it waits for GPUs that no "
        "allocated work can use."
    )


def _lines(
    workload: Workload, detail: dict[str, Any], numbers: dict[str, Any], tree: dict[int, Budget] | None = None
) -> list[str]:
    reason = workload.pending_reason
    lines: list[str] = []
    if not reason:
        lines.append(  # just submitted, changed or released (try46: "Submitted;" of work waiting for hours)
            "The scheduler has not considered it yet (it will within a few seconds)."
        )
    elif reason == "unschedulable":
        lines.append(
            f"No host of cluster {workload.cluster.name} can ever hold {detail.get('gpus', workload.gpu_count)} "
            f"× {detail.get('model', workload.gpu_model)} GPUs: it waits until such hardware is registered."
        )
    elif reason == "dependency":
        if detail.get("group") is not None:
            lines.append(
                f"Its array group already runs {detail.get('limit')} "
                f"member{'' if detail.get('limit') == 1 else 's'}, its limit (%{detail.get('limit')}): "
                "it starts when one of them ends."
            )
        else:
            waits = [
                f"#{d.after_id} ({d.after.state}, needs {'success' if d.condition == 'ok' else 'any end'})"
                for d in workload.dependencies.select_related("after").order_by("after_id")
                if d.after.state not in Workload.FINAL_STATES
            ]
            # The dependencies may have ended since the last tick wrote the reason (try50: "It waits
            # for the workloads it depends on to end." of work whose dependency had succeeded).
            lines.append(
                f"It waits for {', '.join(waits)} to end."
                if waits
                else "The workloads it waited for have ended: the scheduler judges it again within a few seconds."
            )
    elif reason == "held" and workload.hold:
        lines.append(_own_hold_sentence(workload))
    elif reason == "held":
        # the policy's detail names no budget: "its budget (or a budget above it)" left the reader
        # to find which of them leadership had held
        held = _held_path(workload, tree)
        lines.append(
            f"Budget {held} is on hold: no new work of it starts until leadership releases it."
            if held
            else "Its budget (or a budget above it) is on hold: no new work starts until leadership releases it."
        )
    elif reason == "budget_capped":
        cap = _cap_numbers(str(detail.get("budget", "")), workload.budget_id, tree)
        if detail.get("unfunded"):
            lines.append(unfunded_sentence(str(detail.get("budget")), cap))
        else:
            lines.append(
                f"Budget {detail.get('budget')} has reached its cap{cap} and holds new work until its usage "
                "falls below the cap."
            )
    elif reason == "awaiting_preemption":
        victims = ", ".join(f"#{v}" for v in detail.get("victims", []))
        lines.append(
            f"Workloads {victims} on {detail.get('host')} are being stopped to make room for it; "
            "it starts as soon as they have left."
        )
    elif drain_only(reason, detail) is not None:
        where = _hosts(detail)
        lines.append(f"GPUs are free{' on ' + where if where else ''}, but they are reserved for maintenance.")
    elif reason == "reserved_for_other":
        where = _hosts(detail)
        lines.append(
            f"GPUs are free{' on ' + where if where else ''}, but they are reserved for workload "
            f"#{detail.get('reserved_for')}, which ranks higher and needs them (large work is not starved)."
        )
    elif reason == "protected_work":
        where = _hosts(detail) or "the hosts it needs"
        lines.append(_protected_sentence(workload, where, detail.get("protected_until")))
        if detail.get("resources"):
            lines[-1] = lines[-1].replace("those GPUs", f"those GPUs and {_short_words(detail)}")
        sentence = _fair_share_sentence(numbers)
        if sentence:
            lines.append(sentence)
    elif reason == "fair_share":
        lines.append(
            _fair_share_sentence(numbers)
            or "Other budgets are further below their share; their work goes first and may not be preempted for it."
        )
        if _hosts(detail):
            lines.append(f"Room could be made on {_hosts(detail)} only by preempting the work there.")
    elif reason == "insufficient_gpus":
        if not workload.allocated and detail.get("resources"):
            lines.append(short_sentence(workload, detail))
        elif not workload.allocated:
            lines.append(
                "Unallocated work (minimum runtime 0) only uses GPUs that no allocated work can use, "
                f"and not enough are free now for its {workload.gpu_count} × {workload.gpu_model}."
            )
        elif detail.get("resources"):
            lines.append(short_sentence(workload, detail))
        elif (active := _active_gpus(workload)) < workload.gpu_count:
            # "the GPUs are held by its own budget's work or …" where no host takes work at all (every
            # host of its model drained, cordoned or offline) sent the reader to look for that work
            # (try37), as it did where fewer GPUs take work than it asks for (try51: a gang of 8, a
            # 4-GPU host of two drained)
            lines.append(
                f"Not enough {workload.gpu_model} GPUs are free: none of them is on a host that takes new work."
                if not active
                else f"Not enough {workload.gpu_model} GPUs are free: only {active} of them are on hosts that "
                f"take new work, fewer than its {workload.gpu_count}."
            )
        else:
            lines.append(
                f"Not enough {workload.gpu_model} GPUs are free, and no work it may preempt would make room "
                "(the GPUs are held by its own budget's work or by budgets further below their share)."
            )
        sentence = _hosts_taking_no_work(workload)
        if sentence:
            lines.append(sentence)
    else:
        lines.append(f"Pending: {reason}.")
    if detail.get("resources") and reason in ("reserved_for_other", "protected_work", "fair_share"):
        lines.insert(1, short_sentence(workload, detail))
    if reason in ("protected_work", "fair_share") and (sentence := _hosts_taking_no_work(workload)):
        # the busy hosts named, while GPUs shown free on a draining host went unexplained (try63)
        lines.append(sentence)
    drain = detail.get("drain")
    if isinstance(drain, dict):
        lines.append(drain_sentence(drain))
    if detail.get("reserved_start"):
        at, by_reservation = expected_start(workload)
        if by_reservation:
            lines.append(f"GPUs are reserved for it: it starts by {_when(at)} at the latest.")
        else:
            # The estimate found an earlier start on other GPUs: "reserved for it: it starts by
            # <the estimate>" credited the reservation with an instant it does not give (try40).
            lines.append(
                f"GPUs are also reserved for it, free by {_when(_reserved_by(detail['reserved_start']))} at the "
                f"latest; it may start earlier elsewhere: by {_when(at)} at the latest."
            )
    return lines


def drain_sentence(drain: dict[str, Any]) -> str:
    """A pending reason's ``drain`` detail (the policy's ``reasons._with_drain``: a drain scheduled
    on the room it names refuses it, docs/deploy.md "Scheduled drains") in one sentence."""
    return (
        f"Host {drain.get('host')} drains at {_when(drain.get('at'))} before its minimum runtime would end: "
        "it starts no work there that would still be protected then."
    )


def _protected_sentence(workload: Workload, where: str, until: Any) -> str:
    """The ``protected_work`` sentence: the victims' protection end is the earliest instant room
    could be made (DESIGN.md §3.8), not the start; when the estimate (the policy run forward,
    :func:`expected_start`) finds room only after that end and its grace, the sentence says so
    with the estimate's instant, so the page never shows two starts (num45: "ends at 17:12; it
    can take those GPUs then" beside "by 22:42 at the latest")."""
    sentence = f"Protected work on {where} ends at {_when(until)}, the earliest it could take those GPUs"
    at, _reserved = expected_start(workload)
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    if at is not None and isinstance(until, int | float) and at > until + grace:
        return (
            f"{sentence}; it is not expected to start then: the estimate, which runs the scheduler forward, "
            f"finds room for it by {_when(at)} at the latest."
        )
    return f"{sentence}."


def _short_words(detail: dict[str, Any]) -> str:
    """The resources ``detail`` says are short, in words: ``CPUs``, ``memory``, ``CPUs and memory``
    (``fairway_cli.words.short_words``: the lists' words name them the same way)."""
    return short_words(detail.get("resources"))


def short_sentence(workload: Workload, detail: dict[str, Any]) -> str:
    """The sentence saying CPUs or memory are what keeps ``workload`` pending (DESIGN.md §3.3, §3.8:
    the reason's ``resources``), with what it asks for per host: one wording for the page, the API
    (``why_pending``, ``pending_explanation``) and the CLI, which all read :func:`explain_pending`.

    ``insufficient_gpus``: its GPUs could be made free on some host, but never with the CPUs or
    memory it asks for there. Any other reason: GPUs alone would have given it a better one (e.g.
    GPUs are free now, but the CPUs on those hosts are held by protected work)."""
    asks = []
    for r in detail.get("resources") or ():
        if r == "cpus":
            asks.append(f"{workload.cpus} CPUs" if workload.cpus else "its per-GPU share of CPUs")
        elif r == "memory":
            mem = workload.memory_bytes
            asks.append(f"{format_size(mem)} of memory" if mem else "its per-GPU share of memory")
    words = _short_words(detail)
    verb = "is" if words == "memory" else "are"
    if workload.pending_reason == "insufficient_gpus" and not workload.allocated:
        # unallocated work never preempts: its GPUs are free on some host, its CPUs or memory not (try63)
        gpus = f"{workload.gpu_count} {workload.gpu_model} GPU{'' if workload.gpu_count == 1 else 's'}"
        return (
            f"Not enough {words} for it: it asks for {' and '.join(asks)} per host, and the hosts with {gpus} "
            "free have less left (unallocated work only uses what no allocated work holds)."
        )
    if workload.pending_reason == "insufficient_gpus":
        return (
            f"Not enough {words} for it: it asks for {' and '.join(asks)} per host, and no host where its "
            f"{workload.gpu_count} {workload.gpu_model} GPU{'' if workload.gpu_count == 1 else 's'} could be "
            "made free has that much, even with the work it may preempt gone."
        )
    return (
        f"{words[0].upper()}{words[1:]} {verb} what is short, not {workload.gpu_model} GPUs: it asks for "
        f"{' and '.join(asks)} per host, more than the hosts with room for its GPUs have left."
    )


def requests_text(workload: Workload) -> str:
    """A workload's CPU, memory and shared-memory requests per host in one line, for the page, the
    API (``requests_text``) and ``fairway show``: ``4 CPUs, 64G memory, 8G /dev/shm per host``, a
    request not given as ``per-GPU share of ...`` (try63: the page wrote ``4 CPUs, 8G per host`` and
    the CLI ``8G memory``, and a 1.5 GiB request ``1536M`` there and ``1.5G`` here)."""
    parts = [
        f"{workload.cpus} CPUs" if workload.cpus else "per-GPU share of CPUs",
        f"{format_size(workload.memory_bytes)} memory" if workload.memory_bytes else "per-GPU share of memory",
    ]
    if workload.shared_memory_bytes:
        parts.append(f"{format_size(workload.shared_memory_bytes)} /dev/shm")
    return ", ".join(parts) + " per host"


def _active_gpus(workload: Workload) -> int:
    """Registered GPUs of the workload's cluster and model on hosts that take new work (``active``,
    not removed). One query."""
    return GPU.objects.filter(
        host__cluster_id=workload.cluster_id,
        host__state=Host.State.ACTIVE,
        host__removed_at__isnull=True,
        model=workload.gpu_model,
        removed_at__isnull=True,
    ).count()


def _hosts_taking_no_work(workload: Workload) -> str:
    """The hosts of the workload's cluster and GPU model that take no new work (cordoned,
    draining, drained, offline; not removed ones), with their GPUs, in one sentence; empty when every such host is
    active. Without it, a cluster cordoned whole (e.g. after failed starts) read as busy. One query."""
    rows = (
        # a removed host is out of the cluster for good (its GPUs count nowhere): not named
        Host.objects.filter(
            cluster_id=workload.cluster_id,
            gpus__model=workload.gpu_model,
            gpus__removed_at__isnull=True,
            removed_at__isnull=True,
        )
        .exclude(state=Host.State.ACTIVE)
        .values_list("name", "state")
        .annotate(n=Count("gpus"))
        .order_by("name")
    )
    by_state: dict[str, list[str]] = defaultdict(list)
    gpus = 0
    for name, state, n in rows:
        by_state[state].append(name)
        gpus += n
    if not gpus:
        return ""
    shown = "; ".join(
        f"{state}: {', '.join(names[:5])}{f' and {len(names) - 5} more' if len(names) > 5 else ''}"
        for state, names in sorted(by_state.items())
    )
    are = "GPUs are" if gpus != 1 else "GPU is"
    return f"{gpus} {workload.gpu_model} {are} on hosts that take no new work ({shown})."


def _reserved_by(reserved_start: int | float) -> int:
    """The latest start of a workload whose reservation starts at ``reserved_start``: the same
    bound the estimates are capped by (``cap_by_reservations``), so the two never disagree."""
    return reservation_latest(reserved_start, int(settings.FAIRWAY["GRACE_PERIOD_S"]))


def expected_start(workload: Workload) -> tuple[int | None, bool]:
    """A pending workload's expected start, the one instant every surface shows (epoch seconds;
    None: none), and whether it is its reservation's bound: the stored estimate
    (``estimated_start``, which the lists and the API read), never later than the reservation of
    the last tick's reason (``reservation_latest``: its start plus the grace). The tick caps the
    stored estimate when it stores a reservation (``tick._cap_estimates``) and the estimates run
    caps by it (``cap_by_reservations``), so the minimum here is the stored value itself; it is
    kept so that a row written before either never shows a later instant than its reservation.
    """
    estimate = int(workload.estimated_start.timestamp()) if workload.estimated_start is not None else None
    reserved = (workload.pending_detail or {}).get("reserved_start")
    if isinstance(reserved, int | float):
        latest = _reserved_by(reserved)
        if estimate is None or latest <= estimate:
            return latest, True
    return estimate, False


def start_note() -> str:
    """What an estimated start is, in the words every surface prints after it (docs/estimates.md,
    "What the instant means"): the scheduler's start, not the job's."""
    tick = float(settings.FAIRWAY["TICK_INTERVAL_S"])
    return (
        f"That is the scheduler's start, to within a tick ({tick:g} s); "
        "the job runs a few seconds later, once its host has started it."
    )


def _capped_words(detail: dict[str, Any]) -> str:
    budget = detail.get("budget")
    return f"budget {budget}" if budget else "its budget"


def estimate_words(workload: Workload) -> str:
    """The estimated start in words (DESIGN.md §3.8: an upper bound, or none within one window),
    then what the instant means (``start_note``)."""
    if workload.state != Workload.State.PENDING:
        return ""
    at, reserved = expected_start(workload)
    if at is not None:
        # Never later than the reservation shown beside it (§3.8).
        why = "GPUs are reserved for it" if reserved else "if nothing else ends earlier"
        if workload.estimate_unfunded and not reserved:  # a reservation is made for funded work
            from fairway_cli.words import UNFUNDED_ESTIMATE

            return f"By {_when(at)} at the latest ({why}), {UNFUNDED_ESTIMATE}. {start_note()}"
        return f"By {_when(at)} at the latest ({why}). {start_note()}"
    from scheduler.estimates import dependency_words, estimable

    if not estimable(workload.pending_reason, workload.pending_detail):
        if workload.pending_reason == "dependency":  # its after list: the group's %N cap is estimable
            return dependency_words()
        # As its quote said ("none: waits for #12"): no refresh brings one while it waits. Said
        # for the wait at hand (try50: a held workload read "the estimate lets no work end on its
        # own (only at its wall-time limit) and no hold or hardware change", which named neither).
        if workload.pending_reason == "held" and workload.hold:
            return "Not given while it is held: the estimate releases no hold, so it gives one once it is released."
        if workload.pending_reason == "held":
            return (
                "Not given while its budget is on hold: the estimate lifts no hold, so it gives one "
                "once the budget is released."
            )
        return (
            "Not given while no host can hold it: the estimate registers no hardware, so it gives one "
            "once such a host is registered."
        )
    if workload.no_start_found:
        # The quote said "none before <a week on>" for the same search; "not known yet" read as
        # "come back later" (try37).
        days = int(settings.FAIRWAY["LOOKBACK_WINDOW_S"]) / 86400
        from scheduler.estimates import idle_hosts_words, work_running

        detail = workload.pending_detail or {}
        if workload.pending_reason == "budget_capped" and not detail.get("unfunded"):
            # Its cap keeps it waiting, not an idle cluster or running work (try44: "nothing is
            # running on the cluster" beside a reason naming the cap).
            return (
                f"No start within the next {days:g} days: {_capped_words(detail)} stays at "
                "its cap that long (usage leaves the cap's period only as it ages); it is estimated again as "
                "usage and caps change."
            )
        if isinstance(detail.get("drain"), dict):
            # A scheduled drain keeps it off the host, which the estimate foresees and then never resumes
            # (try59: "unless work ends before its wall-time limit" beside "reserved for maintenance").
            return (
                f"No start within the next {days:g} days: {drain_sentence(detail['drain'])[:-1]}, and once "
                "drained none until it is resumed, which the estimate does not foresee; it is estimated again "
                "as hosts and work change."
            )
        closed = idle_hosts_words(workload.cluster_id)
        if not work_running(workload.cluster_id):  # no running work to end (fin43)
            return (
                f"No start within the next {days:g} days: nothing is running on the cluster"
                f"{closed}; it is estimated again as hosts and work change."
            )
        if closed:  # running work that ends frees no GPU for it while no host takes new work (try44)
            return (
                f"No start within the next {days:g} days: work is running on the cluster{closed}, so "
                "nothing starts before a host takes new work again; it is estimated again as hosts and work change."
            )
        return (
            f"No start within the next {days:g} days: the last estimate found none unless work "
            "ends before its wall-time limit (the estimate lets running work end only there, and no "
            "other work arrive); it is estimated again as work starts and stops."
        )
    every = float(settings.FAIRWAY["ESTIMATE_INTERVAL_S"])
    return (
        f"Not known yet: estimates are refreshed every {every:g} s and after ticks that start or stop "
        "work, and give no time when no start is found within one window without other work ending."
    )
