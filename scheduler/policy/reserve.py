"""Reservations (DESIGN.md §3.5): the host (set) where a blocked workload could start earliest.

Room over time is the host's room profile (:func:`contract.host_room`): free GPUs now, the GPUs
of attempts already stopping from their release (those nominated for another workload
excepted), unallocated and allowed unprotected work now, allowed protected work at the end of
its protection; on hosts where CPUs or memory can bind, the instant they suffice too (the later
of the two). Each host's profile is read from its :class:`room_index.RoomBase`, kept between
passes per host version; a pass keeps each host's answer per (host version, allowed budgets),
and a single-host search's ranking of hosts per shape until the state changes
(:func:`_earliest_single`).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from functools import partial

import scheduler.policy.contract as contract
import scheduler.policy.resources as resources
import scheduler.policy.room_index as room_index
from scheduler.policy.pass_state import PassState
from scheduler.policy.placement import pick_hosts_by_fabric
from scheduler.policy.state import HostView
from scheduler.policy.types import Workload

Best = tuple[int, int, tuple[str, ...]]
"""(reserved start, fabrics, host names): the earliest, then fewest fabrics, then names."""


def reserve(ps: PassState, w: Workload) -> bool:
    """Reserve the earliest host (set) for ``w``; True when one was found.

    A search that found no host depends on the workload only through its model, size and how
    rule 2 classes every budget (it has no nomination): the failure stands for every workload
    with no more room until room can grow (:meth:`PassState.failed_before`).
    """
    gang = ps.is_gang(w)
    kind = "rg" if gang else "r"
    if ps.failed_before(kind, w):
        return False
    best = _earliest_gang(ps, w) if gang else _earliest_single(ps, w)
    if best is None:
        # M plays no part in a reservation but through a scheduled drain (a longer M fails there too)
        ps.remember_failure(kind, w, w.min_runtime if ps.drains else 0)
        return False
    t, _, hosts = best
    ps.reserving.add(w.id)
    for h in hosts:
        ps.reserved[h] = (w.id, t)
    ps.dec.reserved_start[w.id] = t
    ps.reserved_hosts()
    return True


def _room(ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str]) -> contract.HostRoom:
    return contract.host_room(ps.state, hv, w, allowed, ps.tree.budgets, ps.now)


def _base(ps: PassState, hv: HostView) -> room_index.RoomBase:
    """``hv``'s :func:`room_index.room_base`, kept between passes while its version stands."""
    version = ps.state.version.get(hv.name, 0)
    kept = ps.standing.rooms.get(hv.name)
    if kept is None or kept[0] != version:
        kept = ps.standing.rooms[hv.name] = (version, room_index.room_base(ps.state, hv))
    return kept[1]


def bound_hosts(ps: PassState, model: str, n: int, allowed: frozenset[str]) -> Sequence[HostView]:
    """The hosts of ``model``, in ``Standing.hosts_by_model``'s order, that the single-host
    bound of :func:`_earliest_single` can keep for ``n`` GPUs: those whose healthy GPUs exceed
    the allocated work there by ``n`` or more (``Standing.slack``) and those where an allowed
    budget holds allocated work (``Standing.budget_hosts``); on every other host the bound's
    room, healthy GPUs less all allocated work, is below ``n``. All of them when that union is
    not much smaller (the walk costs less than the union's sort)."""
    every = ps.standing.hosts_by_model.get(model, ())
    st = ps.standing
    if n < 1:
        return every
    names = {h for h, s in st.slack.get(model, {}).items() if s >= n}
    on = st.budget_hosts
    for v in allowed:
        where = on.get(v)
        if where:
            names.update(where)
            if len(names) * 2 > len(every):
                return every
    rank, hosts = st.rank, st.state.hosts
    mine = sorted(rank[h] for h in names if (hv := hosts.get(h)) is not None and hv.model == model)
    return [every[i] for i in mine]


def _earliest_single(ps: PassState, w: Workload) -> Best | None:
    """The host where ``w`` could start earliest, ties to the first by name, from its shape's
    :class:`Ranking`, kept in the pass's memo per (model, GPUs, allowed budgets, CPUs, memory)
    until the state changes (a reservation changes none of what it read: reserved hosts are
    skipped when it is read). With ``ps.check`` every answer is compared with the plain walk
    (:func:`_earliest_single_walk`)."""
    allowed = ps.room_budgets(w)
    key = (w.model, w.gpus, allowed, w.cpus, w.memory)
    ranking = ps.memo.single_ranked.get(key)
    if ranking is None:
        ranking = ps.memo.single_ranked[key] = Ranking(_single_starts(ps, w, allowed))
    found = ranking.first(ps.reserved) if not ps.drains else ranking.first_allowed(ps, w)
    best = None if found is None else (found[0], 1, (found[1],))
    if ps.check and best != (walked := _earliest_single_walk(ps, w)):
        raise AssertionError(f"kept reservation ranking for {w.id} at {ps.now}: {best} != {walked}")
    return best


class Ranking:
    """One shape's single-host search in a pass: ``(instant, host)`` of every host of its model
    where the shape could start (:func:`host_start`, read by :func:`_single_starts`), reserved
    or not, earliest first, ties by name."""

    __slots__ = ("ranked",)

    def __init__(self, ranked: list[tuple[int, str]]) -> None:
        ranked.sort()
        self.ranked = ranked

    def first(self, reserved: Container[str]) -> tuple[int, str] | None:
        """The earliest ``(instant, host)`` among the hosts not reserved, ties by name."""
        return next((c for c in self.ranked if c[1] not in reserved), None)

    def first_allowed(self, ps: PassState, w: Workload) -> tuple[int, str] | None:
        """:meth:`first` where a host's scheduled drain lets ``w`` start at the instant too
        (:meth:`PassState.drain_allows`)."""
        reserved = ps.reserved
        return next((c for c in self.ranked if c[1] not in reserved and ps.drain_allows(w, c[1], c[0])), None)


_VOLATILE = -(1 << 62)
"""A host's start kept by :func:`_single_starts` as read again at every call (not kept)."""


def _single_starts(ps: PassState, w: Workload, allowed: frozenset[str]) -> list[tuple[int, str]]:
    """``(instant, host)`` of each host of ``w``'s model where ``w`` could start
    (:func:`host_start`). Kept between passes per (model, allowed budgets, GPUs, CPUs, memory)
    in ``Standing.single_starts`` as each host's ``t`` (the start is ``max(now, t)``, the
    argument of :func:`host_start`) or None (never), with the log mark of the reading: a host
    bumped since (``ClusterState.changed_since``) is read again; a host whose start is not kept
    (:func:`_keeps`) is read at every call."""
    hkey = (allowed, w.gpus, w.cpus, w.memory)
    key = (w.model, *hkey)
    st = ps.state
    froms, since = st.kept_per_host(  # the hosts the bound leaves out have no start (ruled_out)
        ps.standing.single_starts,
        key,
        lambda: {hv.name: _start_from(ps, w, hv, allowed, hkey) for hv in bound_hosts(ps, w.model, w.gpus, allowed)},
    )
    for h in since or ():  # a host the bound left out when the answer was built may be in it now
        if (hv := st.hosts.get(h)) is not None and hv.model == w.model:
            froms[h] = _start_from(ps, w, hv, allowed, hkey)
    now = ps.now
    out = []
    for h, t in froms.items():
        if t == _VOLATILE:
            t = host_start(ps, w, st.hosts[h], allowed, hkey)
        if t is not None:
            out.append((now if t < now else t, h))
    return out


def _start_from(
    ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str], key: tuple[object, ...]
) -> int | None:
    """What :func:`_single_starts` keeps of ``hv``: :func:`host_start`'s kept ``t`` (None:
    never; an inactive host never, its state fixed in a kept standing), else :data:`_VOLATILE`."""
    if not hv.active:
        return None
    host_start(ps, w, hv, allowed, key)
    kept = ps.standing.starts[hv.name][1]
    if key not in kept:
        return _VOLATILE  # not kept: read again at every call
    got = kept[key]
    return None if got is None else got[0]


def _earliest_single_walk(ps: PassState, w: Workload) -> Best | None:
    """:func:`_earliest_single` by walking the hosts (the oracle of its kept ranking): in name
    order (``Standing.hosts_by_model``, only those :func:`bound_hosts` keeps), so once a host is
    found where ``w`` could start now, no later host can beat it and the walk stops."""
    allowed = ps.room_budgets(w)
    best: Best | None = None
    reserved = ps.reserved
    for hv in bound_hosts(ps, w.model, w.gpus, allowed):
        if hv.name in reserved:
            continue
        t = _host_start_fresh(ps, w, hv, allowed) if hv.active else None
        if t is None or not ps.drain_allows(w, hv.name, t):
            continue
        cand = (t, 1, (hv.name,))
        if best is None or cand < best:
            best = cand
            if t == ps.now:
                break  # the earliest instant at the first name: nothing later in the walk beats it
    return best


def host_start(
    ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str], key: tuple[object, ...] | None = None
) -> int | None:
    """The earliest instant ``w`` could start on ``hv`` (:func:`_host_start_fresh`), kept between
    passes in ``Standing.starts`` while the host's version stands.

    Why a kept answer holds at a later ``now``: with the version unchanged the host's
    :class:`room_index.RoomBase` is the same, and every instant of its room profile but the
    clamped ones is a constant: a release ``r`` counts from ``max(now, r)`` (``now`` when
    unknown), room now from ``now``, a protected attempt from its end ``protected_until``, which
    is later than ``now`` (a protection's end bumps the version, ``Standing._end_protections``).
    With ``F(x)`` the GPUs there by ``x`` (steps at those constants), the answer is
    ``max(now, T)``, ``T`` the least ``x`` with ``F(x) ≥ n``: kept as ``(t, now)`` of the pass
    that computed it, it is ``t`` again when ``t > now`` of then (``t = T``), and the new ``now``
    when it was ``now`` of then and time has not gone back (``T ≤`` both). Not kept when an
    instant moves with ``now`` (a starting attempt's protection ends at ``now + M``,
    :func:`contract.protection_end`) or CPUs or memory can bind. Under ``ps.check`` every kept
    answer is compared with a fresh one."""
    if not hv.active:
        return None
    name, now = hv.name, ps.now
    version = ps.state.version.get(name, 0)
    kept = ps.standing.starts.get(name)
    if kept is None or kept[0] != version:
        kept = ps.standing.starts[name] = (version, {})
    if key is None:
        key = (allowed, w.gpus, w.cpus, w.memory)
    # ``in``, not a sentinel tuple compared by ``is`` (identity of a tuple is no contract: cc37)
    got = kept[1].get(key)
    if key in kept[1] and (got is None or got[0] > got[1] or now >= got[1]):
        t = None if got is None else max(now, got[0])
        if ps.check and t != (fresh := _host_start_fresh(ps, w, hv, allowed)):
            raise AssertionError(f"kept start of {w.id} on {name} at {now}: {t} != {fresh}")
        return t
    if ruled_out(ps, w.gpus, hv, allowed):
        kept[1][key] = None  # the bound reads no instant
        return None
    t = _single_start(ps, w, hv, allowed)
    if _keeps(ps, w, hv):
        kept[1][key] = None if t is None else (t, now)
    return t


def _keeps(ps: PassState, w: Workload, hv: HostView) -> bool:
    """:func:`host_start`'s answer on ``hv`` reads ``now`` only by clamping: no protected
    attempt there is still starting and only GPUs can bind."""
    if not ps.state.only_gpus(hv, w, w.gpus):
        return False
    return all(pu is not None for entries in _base(ps, hv).protected.values() for pu, _, _ in entries)


def _host_start_fresh(ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str]) -> int | None:
    """The earliest instant ``w`` could start on active ``hv`` (:func:`_single_start`), None
    when its bound rules it out (:func:`ruled_out`)."""
    return None if ruled_out(ps, w.gpus, hv, allowed) else _single_start(ps, w, hv, allowed)


def ruled_out(ps: PassState, n: int, hv: HostView, allowed: frozenset[str]) -> bool:
    """Upper bound on the room ever made on ``hv``: healthy GPUs less allocated work that is
    never room for a workload whose rule 2 allows ``allowed`` (forbidden by rule 2, or its own
    budget's) fall short of its ``n`` GPUs; the allowed budgets' work is summed only when the
    rest falls short."""
    short = n - len(hv.healthy) + ps.standing.agg_held.get(hv.name, 0)
    if short > 0:
        per = ps.standing.agg.get(hv.name)
        if not (allowed and per) or allowed_work(per, allowed) < short:
            return True
    return False


def _single_start(ps: PassState, w: Workload, hv: HostView, allowed: frozenset[str]) -> int | None:
    """The earliest instant ``w`` could start on ``hv`` by its room profile, None if never."""
    n = w.gpus
    now = ps.now
    cache = ps.memo.host_room
    key = (hv.name, ps.state.version.get(hv.name, 0), allowed)
    room = cache.get(key)
    if room is None:
        room = cache[key] = _base(ps, hv).over_time(allowed, now)
    have, events, most = room
    if most < n:
        return None
    t = now
    if have < n:
        for at, freed in events:
            have += freed
            if have >= n:
                t = at
                break
    if not ps.state.only_gpus(hv, w, n):
        # CPUs and memory too: the later of the two instants (both only grow with time)
        pkey = ("profile", *key)
        profile = cache.get(pkey)
        if profile is None:
            profile = cache[pkey] = _room(ps, w, hv, allowed)
        t_res = profile.resources_by(now, partial(ps.state.fits, hv, w, n))
        if t_res is None:
            return None
        t = max(t, t_res)
    return t


def allowed_work(per: dict[str, list[int]], allowed: frozenset[str]) -> int:
    """GPUs of the allowed budgets' allocated work on one host (``Standing.agg`` entry), walking
    the smaller of the two."""
    if len(allowed) < len(per):
        return sum(c[0] + c[1] for v in allowed if (c := per.get(v)) is not None)
    return sum(c[0] + c[1] for v, c in per.items() if v in allowed)


def gang_hosts(ps: PassState, model: str, size: int, cpus: int | None, memory: int | None) -> list[HostView]:
    """Hosts a gang of ``model`` in whole hosts of ``size`` GPUs could ever have whole: active,
    every GPU healthy, that size, room for the requests on an empty host; in name order. Kept
    in the standing (its hosts never change)."""
    key = (model, size, cpus, memory)
    out = ps.standing.gang_hosts.get(key)
    if out is None:
        out = ps.standing.gang_hosts[key] = [
            hv
            for hv in ps.standing.hosts_by_model.get(model, ())
            if hv.active and hv.all_healthy and hv.size == size and resources.fits_empty(hv.host, size, cpus, memory)
        ]
    return out


def _earliest_gang(ps: PassState, w: Workload) -> Best | None:
    return earliest_gang(ps, w, ps.reserved, drains=True)


def earliest_gang(ps: PassState, w: Workload, reserved: Container[str], *, drains: bool = False) -> Best | None:
    """The earliest whole-host set for the gang ``w`` among the hosts not in ``reserved``: the
    one statement of its reservation (``ps.reserved``; ``drains``: every host's scheduled drain
    lets it start then, :meth:`PassState.drain_allows`) and of its ``protected_work`` reason
    (nothing: §3.8 judges as if no host were reserved or had a drain scheduled). Each host's
    instant is read from :func:`_gang_starts`; with ``ps.check`` the answer is compared with the
    plain walk."""
    size = ps.state.largest[w.model]
    allowed = ps.room_budgets(w)
    now = ps.now
    per_host = [(now if t < now else t, h) for h, t in _gang_starts(ps, w, size, allowed) if h not in reserved]
    best = _gang_best(ps, per_host, w.gpus // size, w if drains and ps.drains else None)
    if ps.check and best != (walked := _earliest_gang_walk(ps, w, reserved, drains=drains)):
        raise AssertionError(f"kept gang starts for {w.id} at {ps.now}: {best} != {walked}")
    return best


def _gang_best(ps: PassState, per_host: list[tuple[int, str]], k: int, w: Workload | None = None) -> Best | None:
    """The earliest ``k`` of ``(instant, host)``: the ``k``-th instant, and the fewest fabrics
    among the hosts ready by then (``pick_hosts_by_fabric``). With ``w``, a host counts at an
    instant only if its scheduled drain lets ``w`` start then (:meth:`PassState.drain_allows`):
    the earliest instant where ``k`` such hosts are ready."""
    if len(per_host) < k:
        return None
    per_host.sort()
    if w is None:
        start = per_host[k - 1][0]
        eligible = [h for t, h in per_host if t <= start]
    else:
        for start in sorted({t for t, _ in per_host[k - 1 :]}):
            eligible = [h for t, h in per_host if t <= start and ps.drain_allows(w, h, start)]
            if len(eligible) >= k:
                break
        else:
            return None
    st = ps.state
    chosen = pick_hosts_by_fabric(st, eligible, k)
    fabrics = len({st.hosts[h].fabric for h in chosen})
    return (start, fabrics, tuple(sorted(chosen)))


def _gang_starts(ps: PassState, w: Workload, size: int, allowed: frozenset[str]) -> list[tuple[str, int]]:
    """``(host, t)`` of each host :func:`gang_hosts` names that ``w`` could have whole, vacated
    from ``max(now, t)`` (:meth:`RoomBase.vacated_from`). Kept between passes per (model, size,
    CPUs, memory, allowed budgets) in ``Standing.gang_starts`` with the log mark of the reading:
    a host bumped since (``ClusterState.changed_since``) is read again; a host where a starting
    attempt's protection is read (``STARTING``) is read at every call."""
    key = (w.model, size, w.cpus, w.memory, allowed)
    st = ps.state
    froms, since = st.kept_per_host(
        ps.standing.gang_starts,
        key,
        lambda: {
            hv.name: _base(ps, hv).vacated_from(allowed, None) for hv in gang_hosts(ps, w.model, size, w.cpus, w.memory)
        },
    )
    for h in since or ():
        if h in froms:
            froms[h] = _base(ps, st.hosts[h]).vacated_from(allowed, None)
    now = ps.now
    out = []
    for h, t in froms.items():
        if t == room_index.STARTING:
            t = _base(ps, st.hosts[h]).vacated_from(allowed, now)
        if t is not None:
            out.append((h, t))
    return out


def _earliest_gang_walk(ps: PassState, w: Workload, reserved: Container[str], *, drains: bool) -> Best | None:
    """:func:`earliest_gang` by reading every host's room (the oracle of the kept starts)."""
    size = ps.state.largest[w.model]
    per_host: list[tuple[int, str]] = []
    allowed = ps.room_budgets(w)
    for hv in gang_hosts(ps, w.model, size, w.cpus, w.memory):
        if hv.name in reserved:
            continue
        t = room_index.room_base(ps.state, hv).vacated_at(allowed, ps.now)
        if t is not None:
            per_host.append((t, hv.name))
    return _gang_best(ps, per_host, w.gpus // size, w if drains and ps.drains else None)
