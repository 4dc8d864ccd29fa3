"""Why a blocked allocated workload is pending (DESIGN.md §3.8), with its numbers.

The reason is the best *room level* over hosts, reservations ignored: 0 free GPUs, 1 adding
NOW work (unallocated, unprotected work rule 2 allows), 2 adding LATER work (protected), 3
adding FORBIDDEN work (rule 2 forbids it), 4 none. Levels 0–1 give ``reserved_for_other``, 2
``protected_work``, 3 ``fair_share``, 4 ``insufficient_gpus``. The levels are the totals of
each host's room profile read from the pass's index (:func:`room_index.indexed_counts`), kept in
tables per (model, budget classes) until the state changes.

CPUs and memory (§3.3) count as the placement counts them: a host is at a level only when, with
the work of that level gone, its CPUs and memory suffice too (a gang's whole host: with nothing
on it). The tables count GPUs only, which is exact on hosts where only GPUs can bind
(:meth:`ClusterState.only_gpus`); where the first host they name is one where CPUs or memory can
bind, the hosts are walked plainly (:func:`reason_hosts.host_levels`). When CPUs or memory make the level
worse than GPUs alone would, the reason says which (``resources``: ``cpus``, ``memory``).

A ``protected_work`` reason names the room the reservation reads: one host, the earliest by
``reserve.host_start``, and that start (:func:`reason_hosts.earliest_protected`); a gang, the
reservation's own statement (``reserve.earliest_gang``, reservations ignored): its hosts and its
start.

A scheduled drain refusing the room named is named too (``drain``: :func:`_with_drain`).

The room tables are in ``reason_tables.py``, the plain host walks (CPUs and memory, the
``protected_work`` host) in ``reason_hosts.py``.
"""

from __future__ import annotations

import scheduler.policy.reserve as reserve
import scheduler.policy.resources as resources
import scheduler.policy.room_index as room_index
from scheduler.policy.pass_state import PassState
from scheduler.policy.reason_hosts import RESOURCES, binds, earliest_protected, only_resource, resource_levels
from scheduler.policy.reason_tables import gang_reads, level_table
from scheduler.policy.types import Host, PendingInfo, PendingReason, Workload


def explain(ps: PassState, w: Workload) -> None:
    """Record the pending reason of the blocked allocated workload ``w`` in the decisions."""
    memo = (w.budget, w.model, w.gpus, w.min_runtime, w.cpus, w.memory)
    cached = ps.memo.reason.get(memo)
    if cached is not None:
        ps.dec.pending[w.id] = _with_reserved_start(ps, w, cached)
        return
    level, detail = _levels_memo(ps, w)
    if level <= 1:
        info = PendingInfo(PendingReason.RESERVED_FOR_OTHER, {"reserved_for": _holder(ps, w, detail), **detail})
    elif level == 2:
        info = PendingInfo(PendingReason.PROTECTED_WORK, detail)
    elif level == 3:
        info = PendingInfo(PendingReason.FAIR_SHARE, detail)
    else:
        info = PendingInfo(PendingReason.INSUFFICIENT_GPUS, detail)  # {} or which of CPUs, memory
    if ps.drains:
        info = _with_drain(ps, w, info)
    ps.memo.reason[memo] = info
    ps.dec.pending[w.id] = _with_reserved_start(ps, w, info)


def _with_reserved_start(ps: PassState, w: Workload, shared: PendingInfo) -> PendingInfo:
    """The (memoized, shape-wide) reason for ``w``, with ``reserved_start`` only if ``w`` itself
    holds a reservation (§3.8: a workload holding a reservation carries its start): then a copy;
    else the shared object itself (a reason in the decisions is never mutated)."""
    start = ps.dec.reserved_start.get(w.id)
    if start is None:
        return shared
    return PendingInfo(shared.reason, {**shared.detail, "reserved_start": start})


def _with_drain(ps: PassState, w: Workload, info: PendingInfo) -> PendingInfo:
    """The reason, naming (``drain``: host and instant) the first host of the room it names whose
    scheduled drain refuses ``w`` then (:meth:`PassState.drain_allows`: its protection would end
    after the drain; docs/deploy.md "Scheduled drains"). The room itself is judged as if no drain
    were scheduled, as if no host were reserved (§3.8): where that room is free now but refused
    only by the drain, ``reserved_for_other`` then says "reserved for maintenance" (Slurm's
    reason for a maint reservation), ``reserved_for`` naming only a holder of that host."""
    d = info.detail
    hosts = d.get("hosts")
    named = hosts if isinstance(hosts, list) else [d.get("host")]
    at = d.get("protected_until")
    start = at if isinstance(at, int) else ps.now
    for h in named:
        if isinstance(h, str) and not ps.drain_allows(w, h, start):
            detail = {**d, "drain": {"host": h, "at": ps.drains[h]}}
            if info.reason == PendingReason.RESERVED_FOR_OTHER:
                r = ps.reserved.get(h)
                detail["reserved_for"] = r[0] if r is not None and r[0] != w.id else None
            return PendingInfo(info.reason, detail)
    return info


def _holder(ps: PassState, w: Workload, detail: dict[str, object]) -> str | None:
    """The workload holding a reservation on the host (set) that has room, else any other."""
    hosts = detail.get("hosts")
    for h in [detail.get("host"), *(hosts if isinstance(hosts, list) else [])]:
        if isinstance(h, str) and h in ps.reserved and ps.reserved[h][0] != w.id:
            return ps.reserved[h][0]
    return next((wid for wid, _ in ps.reserved.values() if wid != w.id), None)


def _levels_memo(ps: PassState, w: Workload) -> tuple[int, dict[str, object]]:
    """:func:`_levels`, shared by workloads that see every budget the same way.

    The levels depend on the workload only through its model, size, CPU and memory requests and
    the class of every budget holding work (own, allowed, forbidden); the fair-share numbers are
    recomputed for the workload itself.
    """
    cls = ps.budget_classes(w)
    key = (w.model, w.gpus, w.cpus, w.memory, w.budget in ps.standing.agg_budgets and w.budget, tuple(cls.values()))
    hit = ps.memo.levels.get(key)
    if hit is None:
        hit = ps.memo.levels[key] = _levels(ps, w)
    level, detail = hit
    detail = dict(detail)
    if level == 3 and "other_budget_key" in detail:
        detail.update(fair_share_detail(ps, w, str(detail["other_budget_key"])))
    return level, detail


def _levels(ps: PassState, w: Workload) -> tuple[int, dict[str, object]]:
    """Best room level over hosts, ignoring reservations, and its detail."""
    if ps.is_gang(w):
        return _gang_levels(ps, w)
    table = level_table(ps, w)
    level, host = next(((lv, h) for lv in range(4) if (h := table[lv].get(w.gpus)) is not None), (4, None))
    short: list[str] = []
    if host is not None and binds(ps, w, ps.state.hosts[host]):
        # The first host the GPU tables name may lack CPUs or memory at that level: walk them all.
        # (Where it is one where only GPUs bind, no host can be at a better level or before it.)
        level, host, short = resource_levels(ps, w)
    detail: dict[str, object] = {}
    if host is not None:
        detail["host"] = host
        if level == 2:
            host, until = earliest_protected(ps, w, host)
            detail = {"host": host, "protected_until": until}
        _blocking_detail(ps, w, [host], host, level, detail)
    if short:
        detail["resources"] = short
    return level, detail


def _blocking_detail(
    ps: PassState, w: Workload, hosts: list[str], witness_host: str, level: int, detail: dict[str, object]
) -> None:
    """Add to ``detail`` the work in the way (levels 2 and 3) and, at level 3, the fair-share
    numbers against the budget whose work ``witness_host`` holds: one statement for single hosts
    and gangs."""
    if level in (2, 3):
        detail["blocking"] = _blocking(ps, w, hosts, level)
    if level == 3:
        witness = _witness(ps, w, witness_host)
        if witness is not None:
            detail.update(fair_share_detail(ps, w, witness))


BLOCKING_SHOWN = 8
"""At most this many blocking workloads are named in a reason (the first by protection end)."""


def _fits_empty(h: Host, r: str, size: int, w: Workload) -> bool:
    """A whole empty host ``h`` takes ``w``'s share of resource ``r`` alone."""
    return resources.fits_empty(only_resource(h, r), size, w.cpus, w.memory)


def _blocking(ps: PassState, w: Workload, hosts: list[str], level: int) -> list[str]:
    """Workload ids of the work on ``hosts`` that keeps ``w`` out: at level 2 the protected
    attempts rule 2 would let it take once unprotected, at level 3 the allocated attempts rule 2
    forbids it (other budgets only: its own budget's work never counts as room, §3.8). First by
    protection end, then id; stable from tick to tick while that work stays."""
    allowed = ps.room_budgets(w)
    found: list[tuple[int, str]] = []
    for h in hosts:
        for aid in ps.state.hosts[h].attempts:
            av = ps.state.attempts[aid]
            a = av.attempt
            if not a.allocated or av.stopping or a.budget == w.budget:
                continue
            if (level == 2 and av.protected and a.budget in allowed) or (level == 3 and a.budget not in allowed):
                found.append((a.protected_until or ps.now, a.workload))
    return [wid for _, wid in sorted(set(found))[:BLOCKING_SHOWN]]


def _witness(ps: PassState, w: Workload, host: str) -> str | None:
    """The smallest FORBIDDEN budget holding work on ``host`` (:func:`room_index.indexed_sums`)."""
    hv = ps.state.hosts[host]
    return room_index.indexed_sums(hv, ps.standing.agg.get(host), ps.budget_classes(w))[4]


def _gang_levels(ps: PassState, w: Workload) -> tuple[int, dict[str, object]]:
    """The ``k``-th best whole host's level (``reason_tables.gang_reads``) among the hosts whose CPUs and
    memory take the gang's requests with nothing else there (``reserve.gang_hosts``). At level 2
    the hosts and the instant are the reservation's (``reserve.earliest_gang``, no host reserved):
    the reason and the reservation never name different room."""
    st = ps.state
    size = st.largest[w.model]
    k = w.gpus // size
    fit = reserve.gang_hosts(ps, w.model, size, w.cpus, w.memory)
    _, levels, gone = gang_reads(ps, w, size, k, fit)
    # CPUs or memory keep the gang off hosts that GPUs alone would give it (``gone``): say which.
    short = [r for r in RESOURCES if any(not _fits_empty(st.hosts[h].host, r, size, w) for h in gone)]
    if len(levels) < k or levels[k - 1][0] >= 4:
        return 4, ({"resources": short} if short else {})
    level, last = levels[k - 1]
    hosts = [h for _, h in levels[:k]]
    detail: dict[str, object] = {}
    if level == 2:
        best = reserve.earliest_gang(ps, w, ())
        if best is not None:
            hosts = list(best[2])
            detail["protected_until"] = best[0]
        else:  # no whole-host set by the room profile (defensive: level 2 implies one)
            detail["protected_until"] = max(
                [st.attempts[aid].attempt.protected_until or ps.now for h in hosts for aid in st.hosts[h].attempts],
                default=ps.now,
            )
    detail = {"hosts": hosts, **detail}
    _blocking_detail(ps, w, hosts, last, level, detail)
    if short:
        detail["resources"] = short
    return level, detail


def fair_share_detail(ps: PassState, w: Workload, victim_budget: str) -> dict[str, object]:
    """The sides rule 2 compared: P's side (``budget``) and the victim's (``other_budget``), by key and path."""
    split = ps.tree.split(w.budget, victim_budget)
    if split is None:
        return {}
    a, b = split
    # Only what the pass decided: the two sides rule 2 compared. Their usage and ratios move every
    # second; the server derives them on read from the one standing (scheduler.policy.figures),
    # so the stored reason changes only when the decision does.
    return {
        "other_budget_key": victim_budget,
        "budget_key": a,
        "budget": ps.tree.path_name(a),
        "rival_key": b,
        "other_budget": ps.tree.path_name(b),
    }
