"""The room tables of the pending reasons (DESIGN.md §3.8): per room level and GPU count, the
first host with that room (:func:`level_table`), and the whole hosts of a gang by level
(:func:`gang_table`), read from the pass's index (``Standing.agg``) and kept in the pass's memo
until the state changes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _first_hosts(
    ps: PassState, model: str, room_of: Callable[[HostView, Any], int], hosts: Sequence[HostView] | None = None
) -> dict[int, str]:
    """GPU count t → the first active host of ``model`` (in the index's order) whose room is ≥ t.

    Read over ``hosts`` (a part of the index's, in its order, that holds every host whose room
    can exceed 0: :func:`_level1_hosts`) or the index's; the walk stops once the table reaches the
    model's largest host (``ClusterState.largest``): no host's room exceeds its GPUs, so no later
    host adds an entry (tick50). Under ``check`` compared with :func:`first_hosts_walk`."""
    table: dict[int, str] = {}
    filled = 0
    cap = ps.state.largest.get(model, 0)
    agg = ps.standing.agg
    for hv in ps.standing.hosts_by_model.get(model, ()) if hosts is None else hosts:
        if filled >= cap:
            break
        if not hv.active:
            continue
        room = room_of(hv, agg.get(hv.name))
        if room > filled:
            for t in range(filled + 1, room + 1):
                table[t] = hv.name
            filled = room
    if ps.check and table != (walked := first_hosts_walk(ps, model, room_of)):
        raise AssertionError(f"level table of {model} at {ps.now}: {table} != walk {walked}")
    return table


def first_hosts_walk(ps: PassState, model: str, room_of: Callable[[HostView, Any], int]) -> dict[int, str]:
    """:func:`_first_hosts` by the plain walk over every host of ``model`` (its oracle)."""
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
    and 2 (their protected work too). Level 1 reads only :func:`_level1_hosts`: elsewhere its
    room is 0 whatever the NOW budgets."""

    def room1(hv: HostView, per: dict[str, list[int]] | None) -> int:
        return len(hv.free) + hv.unalloc + now_work(per, now_set)[0]

    def room2(hv: HostView, per: dict[str, list[int]] | None) -> int:
        unprotected, protected = now_work(per, now_set)
        return len(hv.free) + hv.unalloc + unprotected + protected

    return _first_hosts(ps, model, room1, _level1_hosts(ps, model)), _first_hosts(ps, model, room2)


def _level1_hosts(ps: PassState, model: str) -> list[HostView]:
    """The active hosts of ``model``, in the index's order, with free GPUs, unallocated work or
    some budget's unprotected allocated work: a bound of level 1's room for any NOW budgets
    (:func:`now_work` sums a part of those budgets). Kept with the level tables."""
    key = ("level1", model)
    kept: list[HostView] | None = ps.memo.level_table.get(key)
    if kept is None:
        agg = ps.standing.agg
        kept = ps.memo.level_table[key] = [
            hv
            for hv in ps.standing.hosts_by_model.get(model, ())
            if hv.active and (hv.free or hv.unalloc or any(c[0] for c in (agg.get(hv.name) or {}).values()))
        ]
    return kept


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
    cached: list[tuple[int, str]] | None = ps.memo.gang_table.get(key)
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
    cached: list[GangHost] | None = ps.memo.gang_table.get(key)
    if cached is not None:
        return cached
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
    ps.memo.gang_table[key] = out
    return out


GangReads = tuple[list[tuple[int, str]], list[tuple[int, str]], list[str]]
"""What a gang reason reads of the whole hosts by ``(level, name)``: the first ``k`` of them all,
the first ``k`` of those the gang's CPUs and memory fit, and, where those fall short of the first
(worse level or too few), the hosts left out at or below the ``k``-th level of them all, in order."""


def gang_reads(ps: PassState, w: Workload, size: int, k: int, fit: list[HostView]) -> GangReads:
    """:func:`gang_reads_plain` read from one index of the whole hosts per pass
    (:func:`_gang_index`: per budget, the hosts where it holds work, as bits), each level's
    hosts by two or three masks per budget-class vector instead of :func:`gang_table`'s level of
    every whole host and a sort (tick48b: 56 such tables over 4,000 hosts were ≈ 15 % of a
    tick). Compared with :func:`gang_reads_plain` under ``ps.check``."""
    names, pos, every_mask, masks = _gang_masks(ps, w, size)
    same = len(fit) == len(names)
    within = every_mask
    if not same:
        key = ("fit", w.model, size, w.cpus, w.memory)
        fit_mask: int | None = ps.memo.gang_table.get(key)
        if fit_mask is None:
            fit_mask = ps.memo.gang_table[key] = sum(1 << pos[hv.name] for hv in fit if hv.name in pos)
        within = fit_mask
    first = _first_bits(names, masks, every_mask, k)
    kept = first if same else _first_bits(names, masks, within, k)
    gone: list[str] = []
    if not same and len(first) >= k and first[k - 1][0] < 4 and (len(kept) < k or kept[k - 1][0] > first[k - 1][0]):
        gone = [name for _, name in _first_bits(names, masks[: first[k - 1][0] + 1], every_mask & ~within, len(names))]
    reads = (first, kept, gone)
    if ps.check and reads != (plain := gang_reads_plain(ps, w, size, k, fit)):
        raise AssertionError(f"gang reason reads for {w.id} at {ps.now}: index {reads} != table {plain}")
    return reads


def gang_reads_plain(ps: PassState, w: Workload, size: int, k: int, fit: list[HostView]) -> GangReads:
    """The plain statement of :func:`gang_reads`, read from :func:`gang_table`."""
    every = gang_table(ps, w, size)
    names = {hv.name for hv in fit}
    levels = every if len(fit) == len(every) else [x for x in every if x[1] in names]
    gone: list[str] = []
    if (
        levels is not every
        and len(every) >= k
        and every[k - 1][0] < 4
        and (len(levels) < k or levels[k - 1][0] > every[k - 1][0])
    ):
        gone = [h for lv, h in every if h not in names and lv <= every[k - 1][0]]
    return every[:k], levels[:k], gone


def _first_bits(names: list[str], masks: list[int], within: int, k: int) -> list[tuple[int, str]]:
    """The first ``k`` ``(level, name)`` among the hosts in ``within``: level by level (``masks``),
    each level's hosts by bit (name order)."""
    out: list[tuple[int, str]] = []
    for level, mask in enumerate(masks):
        m = mask & within
        while m and len(out) < k:
            low = m & -m
            out.append((level, names[low.bit_length() - 1]))
            m ^= low
        if len(out) >= k:
            break
    return out


def _gang_masks(ps: PassState, w: Workload, size: int) -> tuple[list[str], dict[str, int], int, list[int]]:
    """The whole hosts of ``size`` by level 0–4 for ``w``'s budget classes, as bit masks over
    :func:`_gang_index`'s names: level 4 blocked or a NEVER budget's work there
    (:func:`gang_level_by_sets`), 3 a FORBIDDEN budget's, 2 protected work, 1 any work, 0 none.
    Kept per (model, size, budget classes) until the state changes."""
    names, pos, every_mask, blocked, protected, busy, held = _gang_index(ps, w.model, size)
    cls = ps.budget_classes(w)
    key = ("masks", w.model, size, tuple(cls.values()))
    masks: list[int] | None = ps.memo.gang_table.get(key)
    if masks is None:
        never, forbidden = blocked, 0
        for v, m in held.items():
            c = cls.get(v)
            if c is None or c == contract.NOW:
                continue
            if c == contract.FORBIDDEN:
                forbidden |= m
            else:
                never |= m
        rest = every_mask & ~never & ~forbidden
        later = rest & protected
        now = rest & busy & ~later
        masks = [rest & ~later & ~now, now, later, forbidden & ~never, never]
        ps.memo.gang_table[key] = masks
    return names, pos, every_mask, masks


GangIndex = tuple[list[str], dict[str, int], int, int, int, int, dict[str, int]]
"""(names in name order, name → bit, every host, blocked, protected work, any work, budget → the
hosts where it holds allocated work), each set of hosts as bits."""


def _gang_index(ps: PassState, model: str, size: int) -> GangIndex:
    """:func:`_gang_hosts` as bits (:data:`GangIndex`), built once until the state changes."""
    key = ("index", model, size)
    cached: GangIndex | None = ps.memo.gang_table.get(key)
    if cached is not None:
        return cached
    hosts = sorted(_gang_hosts(ps, model, size))
    names = [h[0] for h in hosts]
    blocked = protected = busy = 0
    held: dict[str, int] = {}
    for i, (_, is_blocked, budgets, is_protected, is_busy) in enumerate(hosts):
        bit = 1 << i
        blocked |= bit if is_blocked else 0
        protected |= bit if is_protected else 0
        busy |= bit if is_busy else 0
        for v in budgets:
            held[v] = held.get(v, 0) | bit
    out = (names, {n: i for i, n in enumerate(names)}, (1 << len(names)) - 1, blocked, protected, busy, held)
    ps.memo.gang_table[key] = out
    return out
