"""The room tables of the pending reasons (DESIGN.md §3.8): per room level and GPU count, the
first host with that room (:func:`level_table`), and the whole hosts of a gang by level
(:func:`gang_table`), read from the pass's index (``Standing.agg``) and kept in the pass's memo
until the state changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import scheduler.policy.contract as contract
import scheduler.policy.room_index as room_index
from scheduler.policy.pass_state import PassState
from scheduler.policy.state import HostView
from scheduler.policy.types import Workload

LevelTable = list[dict[int, str]]
"""For levels 0–3 and every GPU count t: the first host (by name) with t GPUs of room."""


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
        unprotected, protected = now_work(agg.get(hv.name), now_set)
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


def now_work(per: dict[str, list[int]] | None, now_set: frozenset[str]) -> tuple[int, int]:
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
    :func:`gang_level` of its budgets, found here with two set tests per host
    (:func:`gang_level_by_sets`). Built once per (model, size, budget classes) until the state
    changes.
    """
    cls = ps.budget_classes(w)
    key = (w.model, size, tuple(cls.values()))
    cached = ps.memo.gang_table.get(key)
    if cached is not None:
        return cached
    never = frozenset(v for v, c in cls.items() if c != contract.NOW and c != contract.FORBIDDEN)
    forbidden = frozenset(v for v, c in cls.items() if c == contract.FORBIDDEN)
    levels = [(gang_level_by_sets(never, forbidden, *host[1:]), host[0]) for host in _gang_hosts(ps, w.model, size)]
    levels.sort()
    ps.memo.gang_table[key] = levels
    return levels


def gang_level(cls: dict[str, int], unallocated: int, items: list[tuple[str, bool]]) -> int:
    """:func:`room_index.worst_level` of a whole host from its budgets' classes: ``unallocated``
    (1 when unallocated work is there) and each budget's allocated work with whether some of it
    is protected. The plain statement; the tables use :func:`gang_level_by_sets`
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


def gang_level_by_sets(
    never: frozenset[str], forbidden: frozenset[str], blocked: bool, held: frozenset[str], protected: bool, busy: int
) -> int:
    """:func:`gang_level` (4 when ``blocked``) from the NEVER and FORBIDDEN budgets and a host's
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
