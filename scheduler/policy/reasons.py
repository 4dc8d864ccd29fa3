"""Why a blocked allocated workload is pending (DESIGN.md §3.8), with its numbers.

The reason is the best *room level* over hosts, reservations ignored: 0 free GPUs, 1 adding
NOW work (unallocated, unprotected work rule 2 allows), 2 adding LATER work (protected), 3
adding FORBIDDEN work (rule 2 forbids it), 4 none. Levels 0–1 give ``reserved_for_other``, 2
``protected_work``, 3 ``fair_share``, 4 ``insufficient_gpus``. The levels are the totals of
each host's room profile read from the pass's index (:func:`room_index.indexed_counts`), kept in
tables per (model, budget classes) until the state changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import scheduler.policy.contract as contract
import scheduler.policy.reserve as reserve
import scheduler.policy.room_index as room_index
from scheduler.policy.pass_state import PassState
from scheduler.policy.state import HostView
from scheduler.policy.types import PendingInfo, PendingReason, Workload

LevelTable = list[dict[int, str]]
"""For levels 0–3 and every GPU count t: the first host (by name) with t GPUs of room."""


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
    """The (memoized, shape-wide) reason for ``w``, with ``reserved_start`` only if ``w`` itself
    holds a reservation (§3.8: a workload holding a reservation carries its start): then a copy;
    else the shared object itself (a reason in the decisions is never mutated)."""
    start = ps.dec.reserved_start.get(w.id)
    if start is None:
        return shared
    return PendingInfo(shared.reason, {**shared.detail, "reserved_start": start})


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
        host = table[level].get(w.gpus)
        if host is not None:
            detail: dict[str, object] = {"host": host}
            if level == 2:
                host, until = _earliest_protected(ps, w, host)
                detail = {"host": host, "protected_until": until}
            if level in (2, 3):
                detail["blocking"] = _blocking(ps, w, [host], level)
            if level == 3:
                witness = _witness(ps, w, host)
                if witness is not None:
                    detail.update(fair_share_detail(ps, w, witness))
            return level, detail
    return 4, {}


def _earliest_protected(ps: PassState, w: Workload, first: str) -> tuple[str, int]:
    """At level 2, the host whose room for ``w`` comes earliest and when (its protection end).

    The candidates are the active hosts whose level-2 room reaches ``w.gpus``; the earliest is
    read as the reservation (§3.5) reads it: its shape's kept ranking (``reserve.Ranking``,
    every host's start by its room profile, reserved or not, earliest first, ties by name) once
    the reservation search has walked it all; else (no search for this shape in this pass, e.g.
    the reservations are all taken) each candidate's start by ``reserve.host_start``. So the
    reason names the host the reservation waits for, not merely the first by name. The instant
    shown is that host's ``room_by`` with starting attempts counted now, as it always was."""
    cls = ps.budget_classes(w)
    now_set = frozenset(v for v, c in cls.items() if c == contract.NOW)
    allowed = ps.room_budgets(w)
    agg = ps.standing.agg
    hosts = ps.state.hosts

    def candidate(hv: HostView) -> bool:
        unprotected, protected = _now_work(agg.get(hv.name), now_set)
        return hv.active and len(hv.free) + hv.unalloc + unprotected + protected >= w.gpus

    def shown(name: str) -> int:
        room = contract.host_room(ps.state, hosts[name], w, allowed, ps.tree.budgets, ps.now)
        return room.room_by(w.gpus, ps.now, starting_now=True)

    def walk() -> str:
        """The plain walk (the oracle of the kept ranking under ``ps.check``): every host's start."""
        best: tuple[int, str] | None = None
        for hv in ps.standing.hosts_by_model.get(w.model, ()):
            t = reserve.host_start(ps, w, hv, allowed)
            if t is not None and (best is None or (t, hv.name) < best) and candidate(hv):
                best = (t, hv.name)
        return first if best is None else best[1]

    ranking = ps.memo.single_ranked.get((w.model, w.gpus, allowed, w.cpus, w.memory))
    if ranking is not None and ranking.walked == len(ranking.hosts):
        name = next((h for _, h in ranking.ranked if candidate(hosts[h])), first)
        if ps.check and name != (walked := walk()):
            raise AssertionError(f"protected_work host for {w.id} at {ps.now}: ranking {name} != walk {walked}")
        return name, shown(name)
    cache = ps.memo.level_table  # kept as long as the level tables, per what the walk reads
    key = ("earliest", w.model, w.gpus, allowed, now_set, w.cpus, w.memory, first)
    name = cache.get(key)
    if name is None:
        name = cache[key] = walk()
    return name, shown(name)


BLOCKING_SHOWN = 8
"""At most this many blocking workloads are named in a reason (the first by protection end)."""


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
    st = ps.state
    size = st.largest[w.model]
    k = w.gpus // size
    levels = gang_table(ps, w, size)
    if len(levels) < k or levels[k - 1][0] >= 4:
        return 4, {}
    level, last = levels[k - 1]
    detail: dict[str, object] = {"hosts": [h for _, h in levels[:k]]}
    if level in (2, 3):
        detail["blocking"] = _blocking(ps, w, [h for _, h in levels[:k]], level)
    if level == 2:
        pus = [
            st.attempts[aid].attempt.protected_until or ps.now for _, h in levels[:k] for aid in st.hosts[h].attempts
        ]
        detail["protected_until"] = max(pus) if pus else ps.now
    if level == 3:
        witness = _witness(ps, w, last)
        if witness is not None:
            detail.update(fair_share_detail(ps, w, witness))
    return level, detail


def level_table(ps: PassState, w: Workload) -> LevelTable:
    """For room levels 0–3 and every GPU count t: the first host (by name) with t GPUs of room.

    Each level reads only part of the budget classes, and its table is kept per that part until
    the state changes (one pass over the hosts each): level 0 (free GPUs) per model; levels 1
    and 2 (adding the unallocated work and the NOW budgets' unprotected, then protected, work)
    per (model, NOW budgets); level 3 (adding every allocated budget's work but the NEVER
    ones': ``Standing.agg_held`` less theirs) per (model, NEVER budgets).
    """
    cls = ps.budget_classes(w)
    now_set = frozenset(v for v, c in cls.items() if c == contract.NOW)
    never_set = frozenset(v for v, c in cls.items() if c == contract.NEVER)
    cache = ps.memo.level_table
    free = cache.get(("free", w.model))
    if free is None:
        free = cache[("free", w.model)] = _first_hosts(ps, w.model, lambda hv, per: len(hv.free))
    key1 = ("now", w.model, now_set)
    if key1 not in cache:
        cache[key1] = _now_tables(ps, w.model, now_set)
    low, later = cache[key1]
    key3 = ("all", w.model, never_set)
    every = cache.get(key3)
    if every is None:
        held = ps.standing.agg_held

        def room3(hv: HostView, per: dict[str, list[int]] | None) -> int:
            room = len(hv.free) + hv.unalloc + held.get(hv.name, 0)
            if per:
                for v in never_set:
                    counts = per.get(v)
                    if counts is not None:
                        room -= counts[0] + counts[1]
            return room

        every = cache[key3] = _first_hosts(ps, w.model, room3)
    return [free, low, later, every]


def _first_hosts(ps: PassState, model: str, room_of: Callable[[HostView, Any], int]) -> dict[int, str]:
    """GPU count t → the first active host of ``model`` (in the index's order) whose room is ≥ t."""
    table: dict[int, str] = {}
    filled = 0
    agg = ps.standing.agg
    for hv in ps.standing.hosts_by_model.get(model, ()):
        if not hv.active:
            continue
        room = room_of(hv, agg.get(hv.name))
        if room > filled:
            for t in range(filled + 1, room + 1):
                table[t] = hv.name
            filled = room
    return table


def _now_tables(ps: PassState, model: str, now_set: frozenset[str]) -> tuple[dict[int, str], dict[int, str]]:
    """:func:`_first_hosts` for levels 1 (free, unallocated and the NOW budgets' unprotected work)
    and 2 (their protected work too), in one pass."""
    t1: dict[int, str] = {}
    t2: dict[int, str] = {}
    f1 = f2 = 0
    agg = ps.standing.agg
    for hv in ps.standing.hosts_by_model.get(model, ()):
        if not hv.active:
            continue
        unprotected, protected = _now_work(agg.get(hv.name), now_set)
        h1 = len(hv.free) + hv.unalloc + unprotected
        h2 = h1 + protected
        if h1 > f1:
            for t in range(f1 + 1, h1 + 1):
                t1[t] = hv.name
            f1 = h1
        if h2 > f2:
            for t in range(f2 + 1, h2 + 1):
                t2[t] = hv.name
            f2 = h2
    return t1, t2


def _now_work(per: dict[str, list[int]] | None, now_set: frozenset[str]) -> tuple[int, int]:
    """GPUs of the NOW budgets' allocated work on one host (``Standing.agg`` entry): unprotected,
    protected. Walks the smaller of the two sets."""
    if not per or not now_set:
        return 0, 0
    if len(now_set) < len(per):
        pairs = [per[v] for v in now_set if v in per]
    else:
        pairs = [counts for v, counts in per.items() if v in now_set]
    return sum(c[0] for c in pairs), sum(c[1] for c in pairs)


def gang_table(ps: PassState, w: Workload, size: int) -> list[tuple[int, str]]:
    """Whole hosts of ``size`` GPUs as ``(level, name)``, best first.

    The level of a host is the worst class of its work (:meth:`room_index.RoomCounts.worst`):
    :func:`_gang_level` of its budgets, found here with two set tests per host
    (:func:`_gang_level_by_sets`). Built once per (model, size, budget classes) until the state
    changes.
    """
    cls = ps.budget_classes(w)
    key = (w.model, size, tuple(cls.values()))
    cached = ps.memo.gang_table.get(key)
    if cached is not None:
        return cached
    never = frozenset(v for v, c in cls.items() if c != contract.NOW and c != contract.FORBIDDEN)
    forbidden = frozenset(v for v, c in cls.items() if c == contract.FORBIDDEN)
    levels = [(_gang_level_by_sets(never, forbidden, *host[1:]), host[0]) for host in _gang_hosts(ps, w.model, size)]
    levels.sort()
    ps.memo.gang_table[key] = levels
    return levels


def _gang_level(cls: dict[str, int], unallocated: int, items: list[tuple[str, bool]]) -> int:
    """:func:`room_index.worst_level` of a whole host from its budgets' classes: ``unallocated``
    (1 when unallocated work is there) and each budget's allocated work with whether some of it
    is protected. The plain statement; the tables use :func:`_gang_level_by_sets`
    (tests/policy/test_queues_kept.py compares them)."""
    now = later = forbidden = never = False
    for v, protected in items:
        c = cls[v]
        if c == contract.NOW:
            later = later or protected
            now = now or not protected
        elif c == contract.FORBIDDEN:
            forbidden = True
        else:
            never = True
    return room_index.worst_level(int(now or unallocated), int(later), int(forbidden), never)


def _gang_level_by_sets(
    never: frozenset[str], forbidden: frozenset[str], blocked: bool, held: frozenset[str], protected: bool, busy: int
) -> int:
    """:func:`_gang_level` (4 when ``blocked``) from the NEVER and FORBIDDEN budgets and a host's
    summary (:func:`_gang_hosts`). Whether work is protected or not matters only once every
    budget there is NOW: then LATER is "some budget's work is protected", else NOW is "some
    work is there"."""
    if blocked or not never.isdisjoint(held):
        return 4
    return room_index.worst_level(busy, int(protected), int(not forbidden.isdisjoint(held)), False)


GangHost = tuple[str, bool, frozenset[str], bool, int]
"""(name, blocked, budgets with allocated work there, some of it protected, 1 if any work is there)."""


def _gang_hosts(ps: PassState, model: str, size: int) -> list[GangHost]:
    """Whole healthy active hosts of ``size`` GPUs, in the index's order, with what their gang
    level reads whatever the budget classes: blocked (leaving work or nominated GPUs), the
    budgets holding allocated work there (nonzero ``Standing.agg`` entries), whether some of it
    is protected, and 1 when any work (unallocated or allocated) is there. Kept until the state
    changes."""
    key = ("hosts", model, size)
    cached = ps.memo.gang_table.get(key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    out: list[GangHost] = []
    nominees = ps.state.nominees
    agg = ps.standing.agg
    for hv in ps.standing.hosts_by_model.get(model, ()):
        if not hv.active or not hv.all_healthy or hv.size != size:
            continue
        blocked = bool(hv.stopping or nominees.get(hv.name))
        per = agg.get(hv.name) or {}
        held = frozenset(v for v, counts in per.items() if counts[0] or counts[1])
        protected = any(counts[1] > 0 for counts in per.values())
        out.append((hv.name, blocked, held, protected, 1 if hv.unalloc or held else 0))
    ps.memo.gang_table[key] = out  # type: ignore[assignment]
    return out


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
