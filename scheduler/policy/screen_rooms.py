"""The idle screen's preemption test (``screen.py``): the room rule 2 lets a budget's allocated
work take on one host, kept between passes per (model, allowed budgets), and its walk (the oracle).
A host whose drain is scheduled counts only for work its drain allows (est61)."""

from __future__ import annotations

import scheduler.policy.room_index as room_index
from scheduler.policy.contract import NEVER, NOW
from scheduler.policy.screen_summary import ANY, NONE, Summary
from scheduler.policy.standing import Standing
from scheduler.policy.state import KEPT_LIMIT, HostView


def may_preempt(
    standing: Standing,
    summary: Summary,
    model: str,
    allowed: frozenset[str],
    need: int,
    hosts_needed: int,
    lo: int = ANY,
) -> bool:
    """True when some host's room profile, with the budgets rule 2 allows at the smallest
    commitment as class NOW, reaches ``need`` GPUs, or enough whole hosts are, among the hosts no
    scheduled drain before ``lo`` refuses: read from the rooms kept between passes
    (:func:`preempt_rooms`); :func:`may_preempt_walk` answers the same
    (tests/policy/test_screen.py)."""
    most, whole = preempt_rooms(standing, model, allowed)
    drains = standing.drains
    if most >= need:
        if not drains:
            return True
        open_most, rooms = open_rooms(standing, model, allowed)
        if open_most >= need or any(at >= lo and rooms.get(h, -1) >= need for h, at in drains.items()):
            return True
    if hosts_needed == NONE:
        return False
    vacatable = summary.open(model, lo)[3]
    if drains:
        whole = {h for h in whole if drains.get(h, lo) >= lo}
    vacatable += len(whole - summary.blocked) if summary.blocked else len(whole)
    return vacatable >= hosts_needed


def preempt_rooms(standing: Standing, model: str, allowed: frozenset[str]) -> tuple[int, set[str]]:
    """The most room now on one active host of ``model`` holding unprotected work of an
    ``allowed`` budget (free GPUs, unallocated work and that work; -1: no such host), and those
    hosts whose room is the whole host of the model's largest size, all healthy. Kept between
    passes per (model, allowed budgets) in ``Standing.preempt_rooms`` with each host's room
    (:func:`room_into`, which reads only that host) and the log mark: the hosts bumped since
    (``ClusterState.changed_since``, the pass's own changes too) are read again."""
    st = standing.state
    store = standing.preempt_rooms
    if store is None:
        store = standing.preempt_rooms = {}
    key = (model, allowed)
    kept = store.get(key)
    since = None if kept is None else st.changed_since(kept[0])
    if kept is not None and since is not None:
        _, rooms, most, whole = kept
        moved = False
        for h in since:
            hv = st.hosts.get(h)
            if hv is not None and hv.model == model:
                room_into(standing, hv, allowed, rooms, whole)
                moved = True
        if moved:
            most = max(rooms.values(), default=-1)
            if standing.open_rooms:
                standing.open_rooms.pop(key, None)  # open_rooms reads them again
    else:  # the hosts of the allowed budgets' unprotected work (any other host holds none of it)
        rooms, whole = {}, set()
        on, hosts = standing.victim_hosts, st.hosts
        for name in {h for v in allowed for h in on.get(v, ())}:
            if (hv := hosts[name]).model == model:
                room_into(standing, hv, allowed, rooms, whole)
        most = max(rooms.values(), default=-1)
        if len(store) > KEPT_LIMIT:
            store.clear()  # a bound on what is kept (allowed sets vary)
            standing.open_rooms = None
        elif standing.open_rooms:
            standing.open_rooms.pop(key, None)
    store[key] = (st.mark(), rooms, most, whole)
    return most, whole


def open_rooms(standing: Standing, model: str, allowed: frozenset[str]) -> tuple[int, dict[str, int]]:
    """:func:`preempt_rooms`'s most room over the hosts without a scheduled drain (-1: none), and
    its rooms by host; kept per (model, allowed budgets) in ``Standing.open_rooms`` until
    :func:`preempt_rooms` reads a host of that entry again (called right after it)."""
    rooms = standing.preempt_rooms[model, allowed][1]  # type: ignore[index]
    store = standing.open_rooms
    if store is None:
        store = standing.open_rooms = {}
    kept = store.get((model, allowed))
    if kept is not None and kept[0] is rooms:
        return kept[1], rooms
    drains = standing.drains
    most = max((r for h, r in rooms.items() if h not in drains), default=-1)
    store[model, allowed] = (rooms, most)
    return most, rooms


def room_into(
    standing: Standing, hv: HostView, allowed: frozenset[str], rooms: dict[str, int], whole: set[str]
) -> None:
    """One host's entry of :func:`preempt_rooms`: its room in ``rooms`` and whether it is whole
    in ``whole`` when it is active and holds unprotected work of an ``allowed`` budget
    (``Standing.agg``'s first count), else neither."""
    name = hv.name
    per = standing.agg.get(name)
    mine = sum(c[0] for v, c in per.items() if v in allowed) if per and hv.active else 0
    if not mine:
        rooms.pop(name, None)
        whole.discard(name)
        return
    room = rooms[name] = len(hv.free) + hv.unalloc + mine
    if hv.all_healthy and room == hv.size == standing.state.largest[hv.model]:
        whole.add(name)
    else:
        whole.discard(name)


def may_preempt_walk(
    standing: Standing,
    summary: Summary,
    model: str,
    allowed: frozenset[str],
    need: int,
    hosts_needed: int,
    lo: int = ANY,
) -> bool:
    """:func:`may_preempt` by walking the hosts of the allowed budgets' unprotected work, each
    host's room profile read from the index (its oracle)."""
    st = standing.state
    largest = st.largest[model]
    classes = {v: NOW if v in allowed else NEVER for v in standing.agg_budgets}
    vacatable = summary.open(model, lo)[3]
    hosts: set[str] = set()
    for v in allowed:
        hosts.update(standing.victim_hosts[v])
    for name in sorted(hosts):
        hv = st.hosts[name]
        if hv.model != model or not hv.active:
            continue
        if standing.drains.get(name, lo) < lo:
            continue  # its scheduled drain refuses the work
        counts = room_index.indexed_counts(st, hv, standing.agg[name], classes)
        if counts.now == hv.unalloc:
            continue  # no allowed unprotected work here
        room = counts.levels()[1]
        if room >= need:
            return True
        whole = hv.all_healthy and room == hv.size == largest
        if hosts_needed != NONE and whole and name not in summary.blocked:
            vacatable += 1
    return vacatable >= hosts_needed
