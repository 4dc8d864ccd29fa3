"""The single-host victim search's hosts (DESIGN.md §3.4; victims.py): each host's possible victims
(:data:`Rows`, kept between passes) and the hosts in ascending order of a lower bound of the key
of the victim sets they hold (:func:`candidate_hosts`), with its plain reading
(:func:`candidate_hosts_walk`)."""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterator
from fractions import Fraction

import scheduler.policy.contract as contract
from scheduler.policy.contract import KeyContext
from scheduler.policy.pass_state import PassState
from scheduler.policy.standing import Standing
from scheduler.policy.state import ClusterState, HostView
from scheduler.policy.types import Workload

BOUND_FIELDS: dict[contract.Criterion, int | None] = {
    contract.allocated_gpus: 1,
    contract.gpus: 2,
    contract.victim_count: None,
    contract.sides: 3,
    contract.start_times: 4,
    contract.fabrics: None,
    contract.host_names: 0,
    contract.workload_ids: None,
}
"""Where :func:`bound_order` reads each criterion's bound (:data:`contract.BOUNDS`) in a
:class:`contract.SetBound`: the field's index (a 1-tuple of it in ``BOUNDS``), or None where the
bound is the same for every host (it orders no two hosts)."""

_bound_orders: dict[tuple[contract.Criterion, ...], tuple[tuple[int, ...], Callable[[tuple[object, ...]], object]]] = {}


def bound_fields() -> tuple[int, ...]:
    """The fields :func:`bound_order` reads, in its order (``(1, 2, 3, 4, 0)`` under the
    contract's order of the criteria)."""
    return _bound_order()[0]


def bound_order() -> Callable[[tuple[object, ...]], object]:
    """A sort key of :class:`contract.SetBound` s whose ``side`` and ``start`` are known (the
    hosts of :func:`candidate_hosts`) that orders them as ``(contract.key_bound(b), b.host)``
    does, without building ``key_bound``'s tuple of tuples for every host: the fields of
    :data:`BOUND_FIELDS` in :data:`contract.CRITERIA`'s order, up to the first criterion without a
    bound, the constant ones left out (equal everywhere), the host's name last
    (``operator.itemgetter``, kept per order). It reads any tuple of a SetBound's fields, ``side``
    given as anything ordered as the entries are. ``tests/policy/test_victim_bounds.py`` compares
    the two orders."""
    return _bound_order()[1]


def _bound_order() -> tuple[tuple[int, ...], Callable[[tuple[object, ...]], object]]:
    got = _bound_orders.get(contract.CRITERIA)
    if got is None:
        fields: list[int] = []
        for c in contract.CRITERIA:
            if c not in BOUND_FIELDS:
                break  # key_bound stops here: no bound known
            i = BOUND_FIELDS[c]
            if i is not None and i not in fields:
                fields.append(i)
        if 0 not in fields:
            fields.append(0)  # the host's name breaks ties, as after key_bound
        got = _bound_orders[contract.CRITERIA] = (tuple(fields), operator.itemgetter(*fields))
    return got


def side_ranks(
    ps: PassState, ctx: KeyContext, allowed: frozenset[str], names: set[str] | None
) -> tuple[dict[str, int], list[tuple[int, Fraction]]]:
    """Each side entry ranked among the allowed budgets holding victims anywhere
    (``Standing.victim_hosts``; all of ``allowed`` without ``names``) and unallocated work's
    (rank 0): each budget's rank, and the entries by rank (:func:`candidate_hosts`)."""
    if names is not None:
        on = ps.standing.victim_hosts
        ranked = [v for v in allowed if on.get(v)]
    else:
        ranked = list(allowed)
    entry = {v: contract.allocated_side(ctx, v) for v in ranked}
    by_rank = sorted({contract.UNALLOCATED_SIDE, *entry.values()})
    rank = {e: i for i, e in enumerate(by_rank)}
    return {v: rank[e] for v, e in entry.items()}, by_rank


def candidate_hosts(
    ps: PassState, ctx: KeyContext, w: Workload, allowed: frozenset[str], names: set[str] | None
) -> Iterator[tuple[tuple[object, ...], HostView]]:
    """Hosts that may hold a victim set with a lower bound of its key (:func:`host_bound`),
    ascending, lazily (a heap: the scan usually stops after a few); a host without a victim
    holds no set.

    With the counts leading and no unallocated-only set anywhere (the reclaim index found none),
    every candidate set holds an allocated victim rule 2 allows now: only hosts holding one,
    ``names`` (``victims._victim_host_names``; None: every host of the model).

    :func:`candidate_hosts_walk` read in one loop over the hosts: each side entry is ranked among
    the allowed budgets holding victims anywhere (``Standing.victim_hosts``; all of ``allowed``
    without ``names``) instead of among the kept hosts' (the same order), and the heap holds
    :func:`bound_order` instead of :func:`contract.key_bound` (the same order, built
    cheaper: it is read for every host, the full key only for the hosts taken out). Under
    ``check`` the two are compared (and tests/policy/test_victim_bounds.py)."""
    if not w.allocated:
        return  # nothing is a victim of unallocated work (contract.victim_class)
    st = ps.state
    if names is not None:
        views = [st.hosts[name] for name in names]
    else:
        views = list(ps.standing.hosts_by_model.get(w.model, ()))
    budget_rank, by_rank = side_ranks(ps, ctx, allowed, names)
    n, model, order = w.gpus, w.model, bound_order()
    heap: list[tuple[object, tuple[str, int, int, int, int], HostView]] = []
    for hv in views:
        if not hv.active or hv.model != model:
            continue
        unalloc, per = host_rows(ps, ctx, hv)
        f = len(hv.free)
        room = f + hv.unalloc  # free GPUs and every victim's GPUs there: short of n, no set
        side = None if unalloc is None else 0
        start = unalloc
        for v, (s, g) in per.items():
            r = budget_rank.get(v)
            if r is None:
                continue  # not allowed (a budget of ``allowed`` holding victims is ranked)
            room += g
            if side is None or r < side:
                side = r
            if start is None or s < start:
                start = s
        if room >= n and side is not None and start is not None:
            # a SetBound's fields with the side's rank for its entry (the same order, no tuples)
            least = (hv.name, max(0, n - f - hv.unalloc), n - f, side, start)
            heap.append((order(least), least, hv))
    if ps.check:
        _check_candidates(ps, ctx, w, allowed, names, heap, by_rank)
    heapq.heapify(heap)
    while heap:
        _, (name, a, g, side, start), hv = heapq.heappop(heap)
        yield contract.key_bound(contract.SetBound(name, a, g, by_rank[side], start)), hv


def _check_candidates(
    ps: PassState,
    ctx: KeyContext,
    w: Workload,
    allowed: frozenset[str],
    names: set[str] | None,
    heap: list[tuple[object, tuple[str, int, int, int, int], HostView]],
    by_rank: list[tuple[int, Fraction]],
) -> None:
    """Under ``check``: :func:`candidate_hosts`' heap, taken out in order, gives what
    :func:`candidate_hosts_walk` gives."""
    fast = [
        (contract.key_bound(contract.SetBound(name, a, g, by_rank[side], start)), hv.name)
        for _, (name, a, g, side, start), hv in sorted(heap, key=lambda e: e[0])  # type: ignore[arg-type,return-value]
    ]
    walk = [(b, hv.name) for b, hv in candidate_hosts_walk(ps, ctx, w, allowed, names)]
    if fast != walk:
        raise AssertionError(f"candidate hosts of {w.id} at {ps.now}: {fast} != {walk}")


def candidate_hosts_walk(
    ps: PassState, ctx: KeyContext, w: Workload, allowed: frozenset[str], names: set[str] | None
) -> Iterator[tuple[tuple[object, ...], HostView]]:
    """The plain reading of :func:`candidate_hosts`: the hosts with room for ``w``, then each
    one's :func:`host_bound` with its side entry ranked among the kept hosts' budgets, in a
    heap by :func:`contract.key_bound` and name."""
    if not w.allocated:
        return
    st = ps.state
    if names is not None:
        views = [st.hosts[name] for name in names]
    else:
        views = list(ps.standing.hosts_by_model.get(w.model, ()))
    # For allocated w the budgets of class NOW (contract.budget_class) are exactly ``allowed``.
    n = w.gpus
    kept: list[tuple[HostView, Rows]] = []
    present: set[str] = set()  # allowed budgets with unprotected work on a kept host
    for hv in views:
        if not hv.active or hv.model != w.model:
            continue
        rows = host_rows(ps, ctx, hv)
        # free GPUs and every victim's GPUs there: short of n, no set (the full check's sum)
        room = len(hv.free) + hv.unalloc
        mine = [v for v in rows[1] if v in allowed]
        for v in mine:
            room += rows[1][v][1]
        if room < n:
            continue
        kept.append((hv, rows))
        present.update(mine)
    # The heap orders hosts by the bound with each side entry replaced by its rank among the
    # entries of the kept hosts' budgets: the same order, with integers to compare instead of
    # fractions (only the budgets present are read: rule 2 may allow many).
    entry = {v: contract.allocated_side(ctx, v) for v in sorted(present)}
    by_rank = sorted({contract.UNALLOCATED_SIDE, *entry.values()})
    rank = {e: i for i, e in enumerate(by_rank)}
    budget_rank = {v: rank[e] for v, e in entry.items()}
    heap = []
    for hv, rows in kept:
        least = host_bound(w, hv, rows, budget_rank)
        if least is not None:
            heap.append((contract.key_bound(least), hv.name, least, hv))
    heapq.heapify(heap)
    while heap:
        _, _, least, hv = heapq.heappop(heap)
        assert least.side is not None  # noqa: S101 (host_bound sets it)
        yield contract.key_bound(least._replace(side=by_rank[int(least.side[1])])), hv


Rows = tuple[int | None, dict[str, tuple[int, int]]]
"""A host's possible victims for any preemptor: the least :func:`contract.start_entry` (the
latest start) of its unallocated work (None: none), and per budget of its unprotected
allocated work with their GPUs there (no entry: none); attempts not leaving, with healthy GPUs
there."""


def host_rows(ps: PassState, ctx: KeyContext, hv: HostView) -> Rows:
    """The host's :data:`Rows`, kept between passes (``Standing.victim_rows``) while the host's
    version stands (every change of its GPUs, work, nominations or protections bumps it) and,
    when a starting attempt's entry read the instant, while the instant stands
    (:func:`kept_rows_differences` checks them)."""
    name = hv.name
    version = ps.state.version.get(name, 0)
    kept = ps.standing.victim_rows.get(name)
    if kept is not None and kept[0] == version and (kept[1] is None or kept[1] == ctx.now):
        return kept[2]  # type: ignore[return-value]
    rows, reads_now = fresh_rows(ps.state, ctx, hv)
    ps.standing.victim_rows[name] = (version, ctx.now if reads_now else None, rows)
    return rows


def fresh_rows(st: ClusterState, ctx: KeyContext, hv: HostView) -> tuple[Rows, bool]:
    """The host's :data:`Rows` from its attempts, and whether they read the instant."""
    name = hv.name
    attempts = st.attempts
    unalloc: int | None = None
    per: dict[str, tuple[int, int]] = {}
    reads_now = False
    for aid in hv.attempts:
        av = attempts[aid]
        got = av.on_host.get(name, 0)
        if av.stopping or got <= 0:
            continue
        a = av.attempt
        reads_now = reads_now or a.started_at is None
        s = contract.start_entry(ctx, av)
        if not a.allocated:
            unalloc = s if unalloc is None or s < unalloc else unalloc
        elif not av.protected:
            old = per.get(a.budget)
            per[a.budget] = (s, got) if old is None else (min(s, old[0]), old[1] + got)
    return (unalloc, per), reads_now


def kept_rows_differences(standing: Standing) -> list[str]:
    """Hosts whose kept victim rows, still valid by their version and instant, differ from fresh
    ones (tests: ``IncrementalScheduler(check=True)`` after every sync)."""
    st = standing.state
    ctx = KeyContext(lambda v: Fraction(0), lambda h: "", st.now)
    out = []
    for name, (version, now, rows) in standing.victim_rows.items():
        if version == st.version.get(name, 0) and now in (None, st.now):
            fresh = fresh_rows(st, ctx, st.hosts[name])[0]
            if fresh != rows:
                out.append(f"victim rows of {name}: {rows} != {fresh}")
    return out


def host_bound(w: Workload, hv: HostView, rows: Rows, budget_rank: dict[str, int]) -> contract.SetBound | None:
    """What bounds the victim sets on ``hv`` for allocated ``w`` (:func:`contract.key_bound`),
    with the side entry given by its rank (``(0, rank)``), or None when the host holds no victim
    (class NOW, :func:`contract.victim_class`): GPUs still missing after free and unallocated
    GPUs (allocated GPUs), after free GPUs (GPUs), the least side entry and the latest start of
    a victim. Unallocated work is a victim of every allocated workload (rank 0, the least
    entry); unprotected allocated work is one when its budget's class is NOW (``budget_rank``
    holds those budgets)."""
    unalloc, per = rows
    side = None if unalloc is None else 0
    start = unalloc
    for v, (s, _) in per.items():
        r = budget_rank.get(v)
        if r is None:
            continue
        if side is None or r < side:
            side = r
        if start is None or s < start:
            start = s
    if side is None:
        return None
    n, f = w.gpus, len(hv.free)
    return contract.SetBound(hv.name, max(0, n - f - hv.unalloc), n - f, (0, side), start)
