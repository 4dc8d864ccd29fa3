"""Why a blocked allocated workload is pending (DESIGN.md §3.8), with its numbers.

The reason is the best *room level* over hosts, reservations ignored: 0 free GPUs, 1 adding
NOW work (unallocated, unprotected work rule 2 allows), 2 adding LATER work (protected), 3
adding FORBIDDEN work (rule 2 forbids it), 4 none. Levels 0–1 give ``reserved_for_other``, 2
``protected_work``, 3 ``fair_share``, 4 ``insufficient_gpus``. The levels are the totals of
each host's room profile read from the pass's index (:func:`contract.indexed_counts`), kept in
tables per (model, budget classes) until the state changes.
"""

from __future__ import annotations

import scheduler.policy.contract as contract
from scheduler.policy.pass_state import PassState
from scheduler.policy.types import PendingInfo, PendingReason, Workload

LevelTable = list[dict[int, tuple[str, str | None]]]
"""For levels 0–3 and every GPU count t: the first host (by name) with t GPUs, and a witness
budget of its forbidden work."""


def explain(ps: PassState, w: Workload) -> None:
    """Record the pending reason of the blocked allocated workload ``w`` in the decisions."""
    memo = (w.budget, w.model, w.gpus, w.min_runtime)
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
        info = PendingInfo(PendingReason.INSUFFICIENT_GPUS, {})
    ps.memo.reason[memo] = info
    ps.dec.pending[w.id] = _with_reserved_start(ps, w, info)


def _with_reserved_start(ps: PassState, w: Workload, shared: PendingInfo) -> PendingInfo:
    """A copy of the (memoized, shape-wide) reason for ``w``, with ``reserved_start`` only if
    ``w`` itself holds a reservation (§3.8: a workload holding a reservation carries its start)."""
    info = PendingInfo(shared.reason, dict(shared.detail))
    if w.id in ps.dec.reserved_start:
        info.detail["reserved_start"] = ps.dec.reserved_start[w.id]
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

    The levels depend on the workload only through its model, size and the class of every
    budget holding work (own, allowed, forbidden); the fair-share numbers are recomputed for
    the workload itself.
    """
    cls = ps.budget_classes(w)
    key = (w.model, w.gpus, w.budget in ps.standing.agg_budgets and w.budget, tuple(cls.values()))
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
    for level in range(4):
        hit = table[level].get(w.gpus)
        if hit is not None:
            host, witness = hit
            detail: dict[str, object] = {"host": host}
            if level == 2:
                room = contract.host_room(
                    ps.state, ps.state.hosts[host], w, ps.room_budgets(w), ps.tree.budgets, ps.now
                )
                detail["protected_until"] = room.room_by(w.gpus, ps.now, starting_now=True)
            if level == 3 and witness is not None:
                detail.update(fair_share_detail(ps, w, witness))
            return level, detail
    return 4, {}


def _gang_levels(ps: PassState, w: Workload) -> tuple[int, dict[str, object]]:
    st = ps.state
    size = st.largest[w.model]
    k = w.gpus // size
    levels = gang_table(ps, w, size)
    if len(levels) < k or levels[k - 1][0] >= 4:
        return 4, {}
    level, _, witness = levels[k - 1]
    detail: dict[str, object] = {"hosts": [h for _, h, _ in levels[:k]]}
    if level == 2:
        pus = [
            st.attempts[aid].attempt.protected_until or ps.now for _, h, _ in levels[:k] for aid in st.hosts[h].attempts
        ]
        detail["protected_until"] = max(pus) if pus else ps.now
    if level == 3 and witness is not None:
        detail.update(fair_share_detail(ps, w, witness))
    return level, detail


def level_table(ps: PassState, w: Workload) -> LevelTable:
    """For room levels 0–3 and every GPU count t: the first host (by name) with t GPUs of room.

    Built once per (model, budget classes) until the state changes: one pass over the hosts.
    """
    cls = ps.budget_classes(w)
    key = (w.model, tuple(cls.values()))
    table = ps.memo.level_table.get(key)
    if table is not None:
        return table
    table = [{}, {}, {}, {}]
    filled = [0, 0, 0, 0]
    agg = ps.standing.agg
    for hv in ps.standing.hosts_by_model.get(w.model, ()):
        if not hv.active:
            continue
        now, later, forbidden, _, witness = contract.indexed_sums(hv, agg.get(hv.name), cls)
        h0 = len(hv.free)
        h1 = h0 + now
        h2 = h1 + later
        for level, room in enumerate((h0, h1, h2, h2 + forbidden)):  # RoomCounts.levels
            if room > filled[level]:
                for t in range(filled[level] + 1, room + 1):
                    table[level][t] = (hv.name, witness)
                filled[level] = room
    ps.memo.level_table[key] = table
    return table


def gang_table(ps: PassState, w: Workload, size: int) -> list[tuple[int, str, str | None]]:
    """Whole hosts of ``size`` GPUs as ``(level, name, witness budget)``, best first.

    The level of a host is the worst class of its work (:meth:`contract.RoomCounts.worst`).
    Built once per (model, size, budget classes) until the state changes.
    """
    cls = ps.budget_classes(w)
    key = (w.model, size, tuple(cls.values()))
    cached = ps.memo.gang_table.get(key)
    if cached is not None:
        return cached
    levels: list[tuple[int, str, str | None]] = []
    nominees = ps.state.nominees
    agg = ps.standing.agg
    for hv in ps.standing.hosts_by_model.get(w.model, ()):
        if not hv.active or not hv.all_healthy or hv.size != size:
            continue
        now, later, forbidden, never, witness = contract.indexed_sums(hv, agg.get(hv.name), cls)
        blocked = never or hv.stopping or nominees.get(hv.name)  # RoomCounts.worst
        levels.append((contract.worst_level(now, later, forbidden, blocked), hv.name, witness))
    levels.sort(key=lambda x: (x[0], x[1]))
    ps.memo.gang_table[key] = levels
    return levels


def fair_share_detail(ps: PassState, w: Workload, victim_budget: str) -> dict[str, object]:
    """The ratios rule 2 compared: P's side counting its commitment, and the victim's side."""
    split = ps.tree.split(w.budget, victim_budget)
    if split is None:
        return {}
    a, b = split
    return {
        "other_budget_key": victim_budget,
        "budget": ps.tree.path_name(a),
        # Three decimals: enough to read, and the stored reason does not change every tick.
        "ratio": round(ps.display_ratio(a, w.gpus * w.min_runtime), 3),
        "other_budget": ps.tree.path_name(b),
        "other_ratio": round(ps.display_ratio(b), 3),
    }
