"""Victim search for a gang (DESIGN.md §3.4): sets of whole hosts holding only NOW work, exact up
to :data:`MAX_EXACT_GANG_SETS` host combinations, greedy above (docs/policy.md). Split from
victims.py (the single-host search), whose ``search`` calls :func:`search_gang`.
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import scheduler.policy.contract as contract
import scheduler.policy.resources as resources
import scheduler.policy.room_index as room_index
from scheduler.policy.contract import NEVER, NOW, KeyContext
from scheduler.policy.pass_state import PassState
from scheduler.policy.standing import Standing
from scheduler.policy.state import KEPT_LIMIT, AttemptView, HostView
from scheduler.policy.types import GpuRef, Workload

MAX_EXACT_GANG_SETS = 2000
"""Above this many host combinations the gang victim choice is greedy (docs/policy.md)."""

Found = tuple[list[AttemptView], tuple[GpuRef, ...]]
"""Victims to stop and the GPUs to nominate for the preemptor (both searches' answer)."""


def _host_vacate(ps: PassState, w: Workload, hv: HostView) -> tuple[int, list[AttemptView]]:
    """Worst victim class over the host's attempts (an empty host gives NOW) and its attempts."""
    if ps.state.nominated_for_other(hv.name, w.id):
        return NEVER, []
    worst = NOW
    vics = []
    for aid in hv.attempts:
        av = ps.state.attempts[aid]
        worst = max(worst, ps.victim_class(w, av))
        vics.append(av)
    return worst, vics


def search_gang(ps: PassState, w: Workload) -> Found | None:
    """Best set of whole hosts for the gang ``w`` whose work may all be preempted now."""
    size = ps.state.largest[w.model]
    k = w.gpus // size
    options: list[tuple[HostView, list[AttemptView]]] = []
    for name in gang_options(ps, w, size):
        hv = ps.state.hosts[name]
        if not ps.host_allowed(w, name) or not resources.fits_empty(hv.host, size, w.cpus, w.memory):
            continue
        worst, vics = _host_vacate(ps, w, hv)
        if worst == NOW:
            options.append((hv, vics))
    if len(options) < k:
        return None
    ctx = ps.key_context(w)
    if comb(len(options), k) <= MAX_EXACT_GANG_SETS:
        chosen = _exact_gang(ctx, options, k)
    else:
        options.sort(key=lambda o: (contract.victim_key(ctx, o[1], [o[0].name]), o[0].name))
        chosen = options[:k]
    if chosen is None:
        return None
    victims = sorted({v.attempt.id: v for _, vs in chosen for v in vs}.values(), key=lambda v: v.attempt.id)
    if not victims:
        return None
    hosts = sorted((hv for hv, _ in chosen), key=lambda h: h.name)
    return victims, tuple((hv.name, i) for hv in hosts for i in sorted(hv.healthy))


def _exact_gang(
    ctx: KeyContext, options: list[tuple[HostView, list[AttemptView]]], k: int
) -> list[tuple[HostView, list[AttemptView]]] | None:
    best: tuple[tuple[object, ...], list[tuple[HostView, list[AttemptView]]]] | None = None
    for combo in combinations(options, k):
        victims = sorted({v.attempt.id: v for _, vs in combo for v in vs}.values(), key=lambda v: v.attempt.id)
        if not victims:
            continue
        key = contract.victim_key(ctx, victims, [hv.name for hv, _ in combo])
        if best is None or key < best[0]:
            best = (key, list(combo))
    return None if best is None else best[1]


def gang_options(ps: PassState, w: Workload, size: int) -> list[str]:
    """Whole healthy hosts of ``size`` GPUs, best first, that ``w`` could vacate now: nothing
    leaving or nominated there, only unallocated work and unprotected work rule 2 allows
    (room profile level 0 or 1, read from the index). Kept per (model, size, allowed budgets, allocated)
    until the state changes."""
    allowed = ps.room_budgets(w)
    key = (w.model, size, allowed, w.allocated)  # unallocated work reads other levels (vacate_level)
    cached = ps.memo.gang_options.get(key)
    if cached is not None:
        return cached
    if not w.allocated:
        out = ps.memo.gang_options[key] = _options(ps, w, size, allowed)
        return out
    # Kept between passes (Standing.gang_options): each whole healthy host's level with the
    # log mark of the reading; the hosts bumped since (ClusterState.changed_since) are read
    # again, the others kept: vacate_level reads, of a host, only what its version covers (work
    # leaving, nominations, each budget's allocated work and its protection, unallocated work)
    # and, of the workload, only ``allowed``; the hosts themselves never change in a kept
    # standing (Standing.fits).
    out = _kept_options(ps, w, size, allowed)
    if ps.check and out != (fresh := _options(ps, w, size, allowed, fresh=True)):
        raise AssertionError(f"kept gang options for {w.id} at {ps.now}: {out} != {fresh}")
    ps.memo.gang_options[key] = out
    return out


def _kept_options(ps: PassState, w: Workload, size: int, allowed: frozenset[str]) -> list[str]:
    """:func:`_options` for allocated ``w`` from the levels kept per (model, size, allowed):
    only the whole hosts bumped since they were read are read again."""
    key = (w.model, size, allowed)
    st = ps.state
    kept = ps.standing.gang_options.get(key)
    since = None if kept is None else st.changed_since(kept[0])
    if kept is not None and since is not None:
        levels, out = kept[1], kept[2]
        moved = [h for h in since if h in levels]
        for h in moved:
            levels[h] = _level(ps, w, st.hosts[h], allowed)
        if moved:
            out = _ordered(levels)
    else:
        hosts = st.hosts
        levels = {h: _level(ps, w, hosts[h], allowed) for h in gang_hosts_of(ps.standing, w.model, size)}
        out = _ordered(levels)
        if len(ps.standing.gang_options) > KEPT_LIMIT:
            ps.standing.gang_options.clear()  # a bound on what is kept (allowed sets vary)
    ps.standing.gang_options[key] = (st.mark(), levels, out)
    return out


def _ordered(levels: dict[str, int | None]) -> list[str]:
    """The options in :func:`_options`' order: empty hosts (level 0) by name, then the others."""
    return sorted(h for h, lv in levels.items() if lv == 0) + sorted(h for h, lv in levels.items() if lv)


def _level(ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str]) -> int | None:
    """:func:`vacate_level` for allocated ``w``, kept per host version and allowed budgets
    (``Standing.levels``)."""
    v = ps.state.version.get(hv.name)
    kept = ps.standing.levels.get(hv.name)
    if kept is None or kept[0] != v:
        kept = ps.standing.levels[hv.name] = (v, {})
    level = kept[1].get(allowed, _UNKNOWN)
    if level == _UNKNOWN:
        level = kept[1][allowed] = vacate_level(ps, w, hv, allowed)
    return level


def gang_hosts_of(standing: Standing, model: str, size: int) -> list[str]:
    """The names of the active hosts of ``model`` with ``size`` GPUs all healthy, in
    ``hosts_by_model``'s order: the hosts :func:`gang_options` reads (kept in the standing:
    its hosts never change)."""
    key = (model, size)
    out = standing.whole_hosts.get(key)
    if out is None:
        out = standing.whole_hosts[key] = [
            hv.name for hv in standing.hosts_by_model.get(model, ()) if hv.active and hv.all_healthy and hv.size == size
        ]
    return out


_UNKNOWN = -1


def _options(ps: PassState, w: Workload, size: int, allowed: frozenset[str], *, fresh: bool = False) -> list[str]:
    """:func:`gang_options` computed: every whole healthy host of ``size`` read, each host's
    level for allocated ``w`` kept per allowed budgets while its version stands
    (``Standing.levels``; ``fresh``: none read, the oracle under ``check``)."""
    kept = w.allocated and not fresh
    empty: list[str] = []
    usable: list[str] = []
    for hv in ps.standing.hosts_by_model.get(w.model, ()):
        if not hv.active or not hv.all_healthy or hv.size != size:
            continue
        level = vacate_level(ps, w, hv, allowed) if not kept else _level(ps, w, hv, allowed)
        if level is not None:
            (usable if level else empty).append(hv.name)
    return sorted(empty) + sorted(usable)


def vacate_level(ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str]) -> int | None:
    """The host's level for a gang (:meth:`room_index.RoomCounts.worst`, read from the index) when
    at most 1, else None. For allocated ``w`` at most 1 means: nothing leaving or nominated there
    (else 4) and every budget's work there unprotected (else LATER: 2 or more) and of a budget
    in ``allowed`` (class NOW; else FORBIDDEN or NEVER); then 1 when some work is there, else 0.
    ``test_vacate_level_is_the_indexed_level`` compares it with the full counts."""
    st = ps.state
    per = ps.standing.agg.get(hv.name)
    if not w.allocated:
        level = room_index.indexed_counts(st, hv, per, ps.budget_classes(w)).worst()
        return level if level <= 1 else None
    if hv.stopping or st.nominees.get(hv.name):
        return None
    if per and any(c[1] or v not in allowed for v, c in per.items()):
        return None
    return 1 if hv.unalloc or per else 0
