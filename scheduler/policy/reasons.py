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
bind, the hosts are walked plainly (:func:`_host_levels`). When CPUs or memory make the level
worse than GPUs alone would, the reason says which (``resources``: ``cpus``, ``memory``).

A ``protected_work`` reason names the room the reservation reads: one host, the earliest by
``reserve.host_start``, and that start (:func:`_earliest_protected`); a gang, the reservation's own statement
(``reserve.earliest_gang``, reservations ignored): its hosts and its start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import scheduler.policy.contract as contract
import scheduler.policy.reserve as reserve
import scheduler.policy.resources as resources
import scheduler.policy.room_index as room_index
from scheduler.policy.pass_state import PassState
from scheduler.policy.state import HostView
from scheduler.policy.types import Host, PendingInfo, PendingReason, Workload

LevelTable = list[dict[int, str]]
"""For levels 0–3 and every GPU count t: the first host (by name) with t GPUs of room."""


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
    if host is not None and _binds(ps, w, ps.state.hosts[host]):
        # The first host the GPU tables name may lack CPUs or memory at that level: walk them all.
        # (Where it is one where only GPUs bind, no host can be at a better level or before it.)
        level, host, short = _resource_levels(ps, w)
    detail: dict[str, object] = {}
    if host is not None:
        detail["host"] = host
        if level == 2:
            host, until = _earliest_protected(ps, w, host)
            detail = {"host": host, "protected_until": until}
        if level in (2, 3):
            detail["blocking"] = _blocking(ps, w, [host], level)
        if level == 3:
            witness = _witness(ps, w, host)
            if witness is not None:
                detail.update(fair_share_detail(ps, w, witness))
    if short:
        detail["resources"] = short
    return level, detail


def _binds(ps: PassState, w: Workload, hv: HostView) -> bool:
    """CPUs or memory can bind ``w`` on ``hv`` (not :meth:`ClusterState.only_gpus`)."""
    return not ps.state.only_gpus(hv, w, w.gpus)


def _resource_levels(ps: PassState, w: Workload) -> tuple[int, str | None, list[str]]:
    """The best room level over hosts with CPUs and memory counted, the first host (by name) at
    it, and, when that level is worse than GPUs alone give, the resources that fall short on the
    hosts whose GPUs suffice at the better level (``cpus``, ``memory``). The plain walk over the
    hosts (:func:`_host_levels`), for the shapes that CPUs or memory can bind."""
    best: tuple[int, str | None] = (4, None)
    gpu_best = 4
    short_at: dict[int, set[str]] = {}
    for hv in ps.standing.hosts_by_model.get(w.model, ()):
        if not hv.active:
            continue
        g, r, short = _host_levels(ps, w, hv, _binds(ps, w, hv))
        gpu_best = min(gpu_best, g)
        if g < r:
            short_at.setdefault(g, set()).update(short)
        if r < best[0]:
            best = (r, hv.name)
    level, host = best
    short = sorted(short_at.get(gpu_best, ())) if gpu_best < level else []
    return level, host, short


LEVEL_OF_CLASS = {contract.NOW: 1, contract.LATER: 2, contract.FORBIDDEN: 3}
"""The room level (module docstring) at which work of each victim class counts as room."""


def _host_levels(ps: PassState, w: Workload, hv: HostView, bind: bool) -> tuple[int, int, list[str]]:
    """``hv``'s room level for ``w`` by GPUs alone, with CPUs and memory too (``bind``: they can
    bind there), and the resources short at the first (4: no such level). Plainly, from the
    host's attempts and :func:`contract.victim_class`, as the tables count GPUs."""
    name = hv.name
    st = ps.state
    allowed = ps.room_budgets(w)
    known = ps.tree.budgets
    gpus = [len(hv.free)] * 4
    freed = [[0, 0] for _ in range(4)]
    for aid in hv.attempts:
        av = st.attempts[aid]
        lv = LEVEL_OF_CLASS.get(contract.victim_class(av, w, allowed, known))
        if lv is None:
            continue
        got = av.on_host.get(name, 0)
        res = av.res.get(name, resources.NONE)
        for x in range(lv, 4):
            gpus[x] += got
            freed[x][0] += res[0]
            freed[x][1] += res[1]
    g = next((x for x in range(4) if gpus[x] >= w.gpus), 4)
    if not bind or g == 4:
        return g, g, []
    r = next((x for x in range(g, 4) if st.fits(hv, w, w.gpus, (freed[x][0], freed[x][1]))), 4)
    if r == g:
        return g, r, []
    return g, r, _short(hv, w, (freed[g][0], freed[g][1]))


def _short(hv: HostView, w: Workload, freed: resources.Res) -> list[str]:
    """Which of CPUs and memory fall short for ``w`` on ``hv`` with ``freed`` given back
    (:func:`resources.fits` of each alone)."""
    h = hv.host
    used = (hv.used[0] - freed[0], hv.used[1] - freed[1])
    want = resources.need(h, w.gpus, w.cpus, w.memory)
    return [r for r in RESOURCES if not resources.fits(_only(h, r), used, want)]


RESOURCES = ("cpus", "memory")
"""The names a reason gives CPUs and memory (``resources``), in this order."""


def _only(h: Host, r: str) -> Host:
    """``h`` with only resource ``r`` (of :data:`RESOURCES`) limiting: the other unknown."""
    return replace(h, memory=None) if r == "cpus" else replace(h, cpus=None)


def _earliest_protected(ps: PassState, w: Workload, first: str) -> tuple[str, int]:
    """At level 2, the host whose room for ``w`` comes earliest and when (its protection end).

    The candidates are the active hosts whose level-2 room reaches ``w.gpus``; the earliest is
    read as the reservation (§3.5) reads it: its shape's kept ranking (``reserve.Ranking``,
    every host's start by its room profile, reserved or not, earliest first, ties by name) once
    the reservation search has walked it all; else (no search for this shape in this pass, e.g.
    the reservations are all taken) each candidate's start by ``reserve.host_start``. So the
    reason names the host the reservation waits for, not merely the first by name. The instant
    shown is that host's start by ``reserve.host_start``, the reservation's own statement (a
    still-starting attempt protected until ``now + M`` at the earliest, an attempt already
    leaving at its release; where CPUs or memory can bind, the later of that and when they
    suffice): the reason and the reservation never name different instants. Where CPUs or
    memory can bind (:func:`_binds`), a candidate needs them too at level 2."""
    cls = ps.budget_classes(w)
    now_set = frozenset(v for v, c in cls.items() if c == contract.NOW)
    allowed = ps.room_budgets(w)
    agg = ps.standing.agg
    hosts = ps.state.hosts

    def candidate(hv: HostView) -> bool:
        unprotected, protected = _now_work(agg.get(hv.name), now_set)
        if not (hv.active and len(hv.free) + hv.unalloc + unprotected + protected >= w.gpus):
            return False
        return not _binds(ps, w, hv) or _host_levels(ps, w, hv, True)[1] <= 2

    def shown(name: str) -> int:
        t = reserve.host_start(ps, w, hosts[name], allowed)
        return ps.now if t is None else t  # None only for a name no candidate gave (``first``)

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
    """The ``k``-th best whole host's level (:func:`gang_table`) among the hosts whose CPUs and
    memory take the gang's requests with nothing else there (``reserve.gang_hosts``). At level 2
    the hosts and the instant are the reservation's (``reserve.earliest_gang``, no host reserved):
    the reason and the reservation never name different room."""
    st = ps.state
    size = st.largest[w.model]
    k = w.gpus // size
    every = gang_table(ps, w, size)
    fit = reserve.gang_hosts(ps, w.model, size, w.cpus, w.memory)
    levels = every if len(fit) == len(every) else [x for x in every if x[1] in {hv.name for hv in fit}]
    short: list[str] = []
    if (
        levels is not every
        and len(every) >= k
        and every[k - 1][0] < 4
        and (len(levels) < k or levels[k - 1][0] > every[k - 1][0])
    ):
        # CPUs or memory keep the gang off hosts that GPUs alone would give it: say which.
        kept = {h for _, h in levels}
        gone = [st.hosts[h].host for lv, h in every if h not in kept and lv <= every[k - 1][0]]
        short = [
            r for r in RESOURCES if any(not resources.fits_empty(_only(h, r), size, w.cpus, w.memory) for h in gone)
        ]
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
    if level in (2, 3):
        detail["blocking"] = _blocking(ps, w, hosts, level)
    if level == 3:
        witness = _witness(ps, w, last)
        if witness is not None:
            detail.update(fair_share_detail(ps, w, witness))
    if short:
        detail["resources"] = short
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
