"""The pending reasons' plain host walks (DESIGN.md §3.8, §3.3, §3.5): a host's room level with
CPUs and memory counted (:func:`host_levels`, for the shapes where they can bind, :func:`binds`)
and which of them fall short; and the host a ``protected_work`` reason names, read as the
reservation reads it (:func:`earliest_protected`, ``reserve.host_start``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import scheduler.policy.contract as contract
import scheduler.policy.reserve as reserve
import scheduler.policy.resources as resources
from scheduler.policy.pass_state import PassState
from scheduler.policy.reason_tables import now_work
from scheduler.policy.room_index import RoomBase
from scheduler.policy.state import HostView
from scheduler.policy.types import Host, Workload


def binds(ps: PassState, w: Workload, hv: HostView) -> bool:
    """CPUs or memory can bind ``w`` on ``hv`` (not :meth:`ClusterState.only_gpus`)."""
    return not ps.state.only_gpus(hv, w, w.gpus)


def resource_levels(ps: PassState, w: Workload) -> tuple[int, str | None, list[str]]:
    """The best room level over hosts with CPUs and memory counted, the first host (by name) at
    it, and, when that level is worse than GPUs alone give, the resources that fall short on the
    hosts whose GPUs suffice at the better level (``cpus``, ``memory``). The plain walk over the
    hosts (:func:`host_levels`), for the shapes that CPUs or memory can bind."""
    best: tuple[int, str | None] = (4, None)
    gpu_best = 4
    short_at: dict[int, set[str]] = {}
    for hv in ps.standing.hosts_by_model.get(w.model, ()):
        if not hv.active:
            continue
        g, r, short = host_levels(ps, w, hv, binds(ps, w, hv))
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


def host_levels(ps: PassState, w: Workload, hv: HostView, bind: bool) -> tuple[int, int, list[str]]:
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
    return g, r, short_resources(hv, w, (freed[g][0], freed[g][1]))


RESOURCES = ("cpus", "memory")
"""The names a reason gives CPUs and memory (``resources``), in this order."""


def only_resource(h: Host, r: str) -> Host:
    """``h`` with only resource ``r`` (of :data:`RESOURCES`) limiting: the other unknown."""
    return replace(h, memory=None) if r == "cpus" else replace(h, cpus=None)


def short_resources(hv: HostView, w: Workload, freed: resources.Res) -> list[str]:
    """Which of CPUs and memory fall short for ``w`` on ``hv`` with ``freed`` given back
    (:func:`resources.fits` of each alone)."""
    h = hv.host
    used = (hv.used[0] - freed[0], hv.used[1] - freed[1])
    want = resources.need(h, w.gpus, w.cpus, w.memory)
    return [r for r in RESOURCES if not resources.fits(only_resource(h, r), used, want)]


def unallocated_short(ps: PassState, w: Workload) -> list[str]:
    """Of unallocated ``w`` that no free placement takes (it never preempts, §3.3): the resources
    (:data:`RESOURCES`) short on the active hosts whose free GPUs would take it, so its reason
    says CPUs or memory where GPUs are free (try63: "not enough GPUs" beside 3 free ones); [] where
    GPUs are what is short, and for a gang. Memoized per shape until the pass starts more work."""
    if ps.is_gang(w):
        return []
    key = (w.model, w.gpus, w.cpus, w.memory, len(ps.dec.starts))
    hit = ps.memo.unallocated_short.get(key)
    if hit is None:
        short: set[str] = set()
        for hv in ps.standing.hosts_by_model.get(w.model, ()):
            if hv.active and len(hv.free) >= w.gpus and binds(ps, w, hv):
                short.update(short_resources(hv, w, resources.NONE))
        hit = ps.memo.unallocated_short[key] = sorted(short, key=RESOURCES.index)
    return list(hit)


def earliest_protected(ps: PassState, w: Workload, first: str) -> tuple[str, int]:
    """At level 2, the host whose room for ``w`` comes earliest and when (its protection end).

    The candidates are the active hosts whose level-2 room reaches ``w.gpus``; the earliest is
    read as the reservation (§3.5) reads it: its shape's kept ranking (``reserve.Ranking``,
    every host's start by its room profile, reserved or not, earliest first, ties by name) where
    the reservation search made one; else (no search for this shape in this pass, e.g.
    the reservations are all taken) each candidate's start by ``reserve.host_start``. So the
    reason names the host the reservation waits for, not merely the first by name. The instant
    shown is that host's start by ``reserve.host_start``, the reservation's own statement (a
    still-starting attempt protected until ``now + M`` at the earliest, an attempt already
    leaving at its release; where CPUs or memory can bind, the later of that and when they
    suffice): the reason and the reservation never name different instants. Where CPUs or
    memory can bind (:func:`binds`), a candidate needs them too at level 2."""
    cls = ps.budget_classes(w)
    now_set = frozenset(v for v, c in cls.items() if c == contract.NOW)
    allowed = ps.room_budgets(w)
    agg = ps.standing.agg
    hosts = ps.state.hosts

    def candidate(hv: HostView) -> bool:
        unprotected, protected = now_work(agg.get(hv.name), now_set)
        if not (hv.active and len(hv.free) + hv.unalloc + unprotected + protected >= w.gpus):
            return False
        return not binds(ps, w, hv) or host_levels(ps, w, hv, True)[1] <= 2

    def shown(name: str) -> int:
        t = reserve.host_start(ps, w, hosts[name], allowed)
        return ps.now if t is None else t  # None only for a name no candidate gave (``first``)

    def walk() -> str:  # the plain walk: the oracle of the kept ranking and of the bound's walk
        return walk_every(ps, w, allowed, candidate, first)

    ranking = ps.memo.single_ranked.get((w.model, w.gpus, allowed, w.cpus, w.memory))
    if ranking is not None:
        name = next((h for _, h in ranking.ranked if candidate(hosts[h])), first)
        if ps.check and name != (walked := walk()):
            raise AssertionError(f"protected_work host for {w.id} at {ps.now}: ranking {name} != walk {walked}")
        return name, shown(name)
    cache = ps.memo.level_table  # kept as long as the level tables, per what the walk reads
    key = ("earliest", w.model, w.gpus, allowed, now_set, w.cpus, w.memory, first)
    name = cache.get(key)
    if name is None:
        name = cache[key] = walk_bound(ps, w, allowed, candidate, first)
        if ps.check and name != (walked := walk()):
            raise AssertionError(f"protected_work host for {w.id} at {ps.now}: bound {name} != walk {walked}")
    return name, shown(name)


def walk_every(
    ps: PassState, w: Workload, allowed: frozenset[str], candidate: Callable[[HostView], bool], first: str
) -> str:
    """The plain walk of :func:`earliest_protected`: every host of ``w``'s model by its start
    (``reserve.host_start``), the least ``(start, name)`` among the candidates; ``first`` where
    none is one."""
    best: tuple[int, str] | None = None
    for hv in ps.standing.hosts_by_model.get(w.model, ()):
        t = reserve.host_start(ps, w, hv, allowed)
        if t is not None and (best is None or (t, hv.name) < best) and candidate(hv):
            best = (t, hv.name)
    return first if best is None else best[1]


def walk_bound(
    ps: PassState, w: Workload, allowed: frozenset[str], candidate: Callable[[HostView], bool], first: str
) -> str:
    """:func:`walk_every` over the hosts ``reserve.bound_hosts`` keeps (every other host's start
    is None: its healthy GPUs less the allocated work there fall short of ``w.gpus`` and no
    allowed budget holds work there, ``reserve.ruled_out``), the cheap candidate test first: the
    same least ``(start, name)``, with ``reserve.host_start`` read on a few hundred hosts, not on
    every host of the model (tick48: at 4,000 hosts the plain walk was ≈ 40 % of a tick); once a
    host is found, a host whose ``(start_floor, name)`` is not below it cannot beat it
    and is not read (tick49: most hosts' first protection end is the earliest start). Compared
    with :func:`walk_every` under ``ps.check``."""
    best: tuple[int, str] | None = None
    n = w.gpus
    for hv in reserve.bound_hosts(ps, w.model, n, allowed):
        if best is not None and (start_floor(ps, hv, n), hv.name) > best:
            continue
        if not candidate(hv):
            continue
        t = reserve.host_start(ps, w, hv, allowed)
        if t is not None and (best is None or (t, hv.name) < best):
            best = (t, hv.name)
    return first if best is None else best[1]


NEVER_STARTS = 1 << 62
""":func:`start_floor` of a host where no workload of that many GPUs ever starts."""


def start_floor(ps: PassState, hv: HostView, n: int) -> int:
    """A lower bound of :func:`reserve.host_start` on ``hv`` for any workload of ``n`` GPUs, whatever its
    allowed budgets (tick49): ``now`` where the room now with every budget's unprotected work
    counted reaches ``n``, else the earliest instant after ``now`` when any leaving attempt or any
    budget's protected work frees GPUs (:data:`NEVER_STARTS` where none does: the room never
    reaches ``n``). The room profile ``reserve._single_start`` reads (``RoomBase.over_time``) counts
    only the allowed budgets' work, at the same instants; CPUs or memory only delay it. Kept per
    pass per host version (``ps.memo.host_room``)."""
    key = ("floor", hv.name, ps.state.version.get(hv.name, 0))
    got = ps.memo.host_room.get(key)
    if got is None:
        got = ps.memo.host_room[key] = _floor(reserve._base(ps, hv), ps.now)
    upper_now, first_after = got
    return ps.now if upper_now >= n else first_after


def _floor(base: RoomBase, now: int) -> tuple[int, int]:
    """(GPUs that may be room at ``now``, the earliest later instant that frees any) of ``base``."""
    room = base.free + base.unalloc + sum(base.unprotected.values())
    first = NEVER_STARTS
    instants = [(now if r is None else r, g) for r, g in base.leaving]
    instants.extend((contract.protection_end(pu, m, now), g) for es in base.protected.values() for pu, m, g in es)
    for at, g in instants:
        if at <= now:
            room += g
        elif at < first:
            first = at
    return room, first
