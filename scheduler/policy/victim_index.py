"""The single-host victim search's candidate hosts kept between searches (est46; victim_hosts.py).

:func:`victim_hosts.candidate_hosts` reads every host holding a victim of the allowed budgets
(300–700 at the first size) per search to take ≈ 25 out; between two searches of the same
(model, allowed budgets) a few hosts change. :class:`CandidateIndex` keeps, per (model, allowed
budgets), each such host's part of the bound that depends on neither the preemptor's size nor
its sides: free GPUs, unallocated GPUs, the allowed victims' GPUs, whether it holds unallocated
work, which allowed budgets hold victims there, and the latest start (:func:`summary`), the hosts
grouped by all but the start, each group sorted by (start, host). A search reads the groups (≈ 70
here), not the hosts: a group's hosts share the bound's leading fields (GPUs still missing, the
side's rank), so a merge of the groups by their first host gives the hosts in
:func:`victim_hosts.bound_order`'s order (the contract's order of the criteria only). What changed
since the last read is read again: the hosts bumped since (``ClusterState.changed_since``), those
entering or leaving the search's hosts, and those whose rows read the instant when it moved.
Under ``check`` the hosts are compared with :func:`victim_hosts.candidate_hosts_walk`."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator
from typing import cast

import scheduler.policy.contract as contract
from scheduler.policy.contract import KeyContext
from scheduler.policy.pass_state import PassState
from scheduler.policy.state import KEPT_LIMIT, HostView
from scheduler.policy.types import Workload
from scheduler.policy.victim_hosts import (
    bound_fields,
    bound_order,
    candidate_hosts,
    candidate_hosts_walk,
    host_rows,
    side_ranks,
)

Group = tuple[int, int, int, bool, tuple[str, ...]]
"""(free GPUs, unallocated GPUs, the allowed budgets' victims' GPUs, unallocated work there, the
allowed budgets holding victims there, sorted)."""

CONTRACT_FIELDS = (1, 2, 3, 4, 0)
""":func:`victim_hosts.bound_fields` under the contract's order of the criteria: GPUs still
missing after free and unallocated GPUs, after free GPUs (one per group), the side's rank (one
per group), the start, the host (the order within a group). Under any other order the search
reads every host (:func:`victim_hosts.candidate_hosts`)."""

Summary = tuple[Group, tuple[int, str]]
"""A host's :data:`Group` and its place in it: (the latest start of a victim, the host)."""


class CandidateIndex:
    """One (model, allowed budgets)'s hosts by :data:`Group` (``Standing.candidates``)."""

    __slots__ = ("groups", "mark", "names", "now", "of", "reads_now")

    def __init__(self) -> None:
        self.mark = -1  # ClusterState.mark at the last read
        self.now: int | None = None  # the instant the rows that read it were read at
        self.names: set[str] = set()  # the search's hosts at the last read
        self.of: dict[str, Summary] = {}
        self.groups: dict[Group, list[tuple[int, str]]] = {}
        self.reads_now: set[str] = set()


def candidates(
    ps: PassState, ctx: KeyContext, w: Workload, allowed: frozenset[str], names: set[str] | None
) -> Iterator[tuple[tuple[object, ...], HostView]]:
    """:func:`victim_hosts.candidate_hosts`, from the kept index (:func:`kept_candidates`) where
    the search reads only the hosts holding allowed victims (``names``) under the contract's
    order; under ``check`` compared with :func:`victim_hosts.candidate_hosts_walk`."""
    if names is None or not w.allocated or bound_fields() != CONTRACT_FIELDS:
        return candidate_hosts(ps, ctx, w, allowed, names)
    got = kept_candidates(ps, ctx, w, allowed, names)
    if not ps.check:
        return got
    fast = list(got)
    walk = [(b, hv.name) for b, hv in candidate_hosts_walk(ps, ctx, w, allowed, names)]
    if [(b, hv.name) for b, hv in fast] != walk:
        raise AssertionError(f"kept candidate hosts of {w.id} at {ps.now}: {fast} != {walk}")
    return iter(fast)


def summary(ps: PassState, ctx: KeyContext, hv: HostView, allowed: frozenset[str], model: str) -> Summary | None:
    """``hv``'s :data:`Summary` from its victim rows (:func:`victim_hosts.host_rows`), None where
    it holds no victim of ``allowed`` or unallocated one (no side: no set), or is not active or
    of ``model`` (the loop of :func:`victim_hosts.candidate_hosts`, without the preemptor)."""
    if not hv.active or hv.model != model:
        return None
    unalloc, per = host_rows(ps, ctx, hv)
    alloc, start, there = 0, unalloc, []
    for v, (s, g) in per.items():
        if v in allowed:
            alloc += g
            there.append(v)
            if start is None or s < start:
                start = s
    if start is None:
        return None
    return (len(hv.free), hv.unalloc, alloc, unalloc is not None, tuple(sorted(there))), (start, hv.name)


def _read(
    ix: CandidateIndex,
    ps: PassState,
    ctx: KeyContext,
    hosts: set[str],
    names: set[str],
    key: tuple[str, frozenset[str]],
) -> None:
    """Read ``hosts`` again into ``ix`` (those not in ``names`` leave it)."""
    views, rows = ps.state.hosts, ps.standing.victim_rows
    for h in hosts:
        old = ix.of.pop(h, None)
        if old is not None:
            place = ix.groups[old[0]]
            del place[bisect.bisect_left(place, old[1])]
            if not place:
                del ix.groups[old[0]]
        ix.reads_now.discard(h)
        if h not in names:
            continue
        got = summary(ps, ctx, views[h], key[1], key[0])
        kept = rows.get(h)
        if kept is not None and kept[1] is not None:
            ix.reads_now.add(h)  # its rows read the instant: read again when it moves
        if got is not None:
            ix.of[h] = got
            bisect.insort(ix.groups.setdefault(got[0], []), got[1])


def kept_index(ps: PassState, ctx: KeyContext, model: str, allowed: frozenset[str], names: set[str]) -> CandidateIndex:
    """The :class:`CandidateIndex` of (``model``, ``allowed``), read again where it moved."""
    st = ps.state
    store: dict[tuple[str, frozenset[str]], object] | None = getattr(ps.standing, "candidates", None)
    if store is None:  # a standing pickled before it was kept
        store = ps.standing.candidates = {}
    key = (model, allowed)
    ix = cast(CandidateIndex | None, store.get(key))
    since = None if ix is None else st.changed_since(ix.mark)
    if ix is None or since is None:
        if len(store) > KEPT_LIMIT:
            store.clear()  # a bound on what is kept (allowed sets vary)
        ix = store[key] = CandidateIndex()
        since = set(names)
    else:
        since = {h for h in since if h in names or h in ix.of}
        if ix.names != names:
            since |= ix.names ^ names
        if ix.now != ctx.now:
            since |= ix.reads_now
    _read(ix, ps, ctx, since, names, key)
    ix.mark, ix.now, ix.names = st.mark(), ctx.now, set(names)
    return ix


def kept_candidates(
    ps: PassState,
    ctx: KeyContext,
    w: Workload,
    allowed: frozenset[str],
    names: set[str],
) -> Iterator[tuple[tuple[object, ...], HostView]]:
    """:func:`victim_hosts.candidate_hosts` of the search's hosts ``names`` from the kept index:
    the groups with room for ``w`` merged by their first host, lazily."""
    ix = kept_index(ps, ctx, w.model, allowed, names)
    budget_rank, by_rank = side_ranks(ps, ctx, allowed, names)
    n, order = w.gpus, bound_order()
    heap: list[tuple[object, tuple[str, int, int, int, int], list[tuple[int, str]], int]] = []
    sides: dict[tuple[str, ...], int] = {}
    for (f, u, alloc, unalloc, there), place in ix.groups.items():
        if f + u + alloc < n:
            continue  # free GPUs and every victim's GPUs there: short of n, no set
        if unalloc:
            side = 0
        elif (side := sides.get(there, -1)) < 0:
            side = sides[there] = min(map(budget_rank.__getitem__, there))
        start, name = place[0]
        least = (name, max(0, n - f - u), n - f, side, start)
        heap.append((order(least), least, place, 0))
    heapq.heapify(heap)
    views = ps.state.hosts
    while heap:
        _, (name, a, g, side, start), place, i = heap[0]
        yield contract.key_bound(contract.SetBound(name, a, g, by_rank[side], start)), views[name]
        if i + 1 < len(place):
            start, name = place[i + 1]
            least = (name, a, g, side, start)
            heapq.heapreplace(heap, (order(least), least, place, i + 1))
        else:
            heapq.heappop(heap)
