"""Victim search (DESIGN.md §3.4): the best inclusion-minimal sufficient set of victims.

Eligibility is :func:`contract.victim_class` (only class NOW may go), the order is
:func:`contract.victim_key`. Single-host work: every non-empty subset of a host's NOW work that
frees enough GPUs and from which no victim could be spared; hosts in order of a lower bound on
the key's leading counts, so the scan stops early (:func:`contract.counts_lead` says when that
holds). A gang: sets of whole hosts holding only NOW work, exact up to
:data:`~scheduler.policy.gang_victims.MAX_EXACT_GANG_SETS` host combinations, greedy above
(docs/policy.md; the gang search is in gang_victims.py).
"""

from __future__ import annotations

import scheduler.policy.contract as contract
import scheduler.policy.resources as resources
import scheduler.policy.victim_index as victim_index
from scheduler.policy.contract import NOW, KeyContext
from scheduler.policy.gang_victims import Found as Found  # re-exported: the answer of search()
from scheduler.policy.gang_victims import search_gang
from scheduler.policy.pass_state import PassState
from scheduler.policy.reclaim import ReclaimIndex
from scheduler.policy.standing import Standing
from scheduler.policy.state import KEPT_LIMIT, AttemptView, ClusterState, HostView
from scheduler.policy.types import Workload
from scheduler.policy.victim_hosts import candidate_hosts, host_rows

Counts = tuple[int, int, int]
"""A set's (allocated GPUs, GPUs, victims): criteria 1–3 while :func:`contract.counts_lead`."""


def search(ps: PassState, reclaim: ReclaimIndex, w: Workload) -> Found | None:
    """The victims ``w`` may preempt and the GPUs it then takes, or None (§3.4 rules 1–3)."""
    return search_gang(ps, w) if ps.is_gang(w) else search_single(ps, reclaim, w)


def search_single(ps: PassState, reclaim: ReclaimIndex, w: Workload) -> Found | None:
    """Best victim set on one host for ``w``."""
    # The reclaim index serves default requests (its sets are sufficient for a host's share), and
    # the scan's shortcuts rest on its having found no unallocated-only set: explicit CPU or memory
    # requests take the full scan (same key, slower; such work is rare).
    lead = contract.counts_lead() and w.cpus is None and w.memory is None
    if lead:
        hit = reclaim.best(w.model, w.gpus, lambda h: ps.host_allowed(w, h))
        if hit is not None:
            return take_victims(ps, w, *hit)
    allowed = ps.room_budgets(w)
    names = _victim_host_names(ps.standing, allowed) if lead else None
    if names is not None and not names:
        return None  # the reclaim index found no set and no allowed budget holds a victim
    ctx = ps.key_context(w)
    if names is not None and _most_room(ps, ctx, w, allowed, names) < w.gpus:
        # no host holds enough GPUs free, unallocated or of allowed budgets' unprotected work
        if ps.check and next(candidate_hosts(ps, ctx, w, allowed, names), None) is not None:
            raise AssertionError(f"kept victim room for {w.id} at {ps.now} ruled out a candidate host")
        return None
    best: tuple[tuple[object, ...], list[AttemptView], HostView] | None = None
    counts: Counts | None = None  # the best set's leading counts, while contract.counts_lead
    for bound, hv in victim_index.candidates(ps, ctx, w, allowed, names):
        if best is not None and bound > best[0]:
            break  # no set on this host or a later one beats the best (contract.key_bound)
        if not ps.host_allowed(w, hv.name):
            continue
        found = _best_on_host(ps, ctx, w, hv, allowed, lead, counts, None if best is None else best[0])
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], found[1], hv)
            if lead:
                counts = found[2]
    if best is None:
        return None
    return take_victims(ps, w, best[1], best[2])


def _most_room(ps: PassState, ctx: KeyContext, w: Workload, allowed: frozenset[str], names: set[str]) -> int:
    """The most GPUs :func:`~scheduler.policy.victim_hosts.candidate_hosts` counts on one host of ``w``'s model holding
    unprotected work of an ``allowed`` budget (free GPUs, unallocated work and that work; -1:
    no such host; ``names``: the hosts holding such work, :func:`_victim_host_names`): below
    ``w.gpus``, it yields no host. Kept between passes per (model,
    allowed budgets) in ``Standing.most_room`` with each host's count (:func:`_room_of`, which
    reads only that host) and the log mark: the hosts bumped since
    (``ClusterState.changed_since``) are counted again."""
    key = (w.model, allowed)
    st = ps.state
    kept = ps.standing.most_room.get(key)
    since = None if kept is None else st.changed_since(kept[0])
    if kept is not None and since is not None:
        rooms, most = kept[1], kept[2]
        moved = [hv for h in since if (hv := st.hosts.get(h)) is not None and hv.model == w.model]
        for hv in moved:
            rooms[hv.name] = _room_of(ps, ctx, hv, allowed)
        if moved:
            most = max(rooms.values(), default=-1)
    else:
        hosts = ps.state.hosts  # the hosts holding allowed budgets' unprotected work (the others: -1)
        rooms = {h: _room_of(ps, ctx, hv, allowed) for h in names if (hv := hosts[h]).model == w.model}
        most = max(rooms.values(), default=-1)
        if len(ps.standing.most_room) > KEPT_LIMIT:
            ps.standing.most_room.clear()  # a bound on what is kept (allowed sets vary)
    ps.standing.most_room[key] = (st.mark(), rooms, most)
    return most


def _room_of(ps: PassState, ctx: KeyContext, hv: HostView, allowed: frozenset[str]) -> int:
    """:func:`_most_room`'s count for one host: -1 unless active and holding unprotected work of
    an allowed budget (``Standing.victim_hosts``, as :func:`_victim_host_names`)."""
    on = ps.standing.victim_hosts
    if not hv.active or not any(hv.name in on.get(v, ()) for v in allowed):
        return -1
    per = host_rows(ps, ctx, hv)[1]
    return len(hv.free) + hv.unalloc + sum(g for v, (_, g) in per.items() if v in allowed)


def _victim_host_names(standing: Standing, allowed: frozenset[str]) -> set[str]:
    """The hosts where a budget of ``allowed`` holds unprotected allocated work
    (``Standing.victim_hosts``), walking the smaller of the two (rule 2 allows few budgets)."""
    names: set[str] = set()
    on = standing.victim_hosts
    if len(allowed) < len(on):
        for v in allowed:
            where = on.get(v)
            if where:
                names.update(where)
    else:
        for v, where in on.items():
            if where and v in allowed:
                names.update(where)
    return names


def _best_on_host(
    ps: PassState,
    ctx: KeyContext,
    w: Workload,
    hv: HostView,
    allowed: frozenset[str],
    lead: bool,
    bound: Counts | None,
    beat: tuple[object, ...] | None,
) -> tuple[tuple[object, ...], list[AttemptView], Counts] | None:
    """The best inclusion-minimal sufficient set of NOW work on ``hv``; with ``bound`` (the best
    set's leading counts so far, only while :func:`contract.counts_lead`), only sets whose counts
    are not worse; None at once when no set here can have a key below ``beat`` (the best key so
    far; :func:`contract.key_bound` over the host's victims)."""
    st = ps.state
    known = ps.tree.budgets
    name = hv.name
    vics: list[tuple[AttemptView, int]] = []
    for aid in hv.attempts:
        av = st.attempts[aid]
        freed = av.on_host.get(name, 0)
        if freed > 0 and contract.victim_class(av, w, allowed, known) == NOW:
            vics.append((av, freed))
    if bound is not None:
        # A victim alone worse than the best set on allocated GPUs or GPUs cannot be in a better set.
        ba, bt = bound[0], bound[1]
        vics = [
            (c, f)
            for c, f in vics
            if c.attempt.gpu_count <= bt and (not c.attempt.allocated or c.attempt.gpu_count <= ba)
        ]
    free = len(hv.free)
    if not vics or free + sum(f for _, f in vics) < w.gpus:
        return None
    n = w.gpus
    if beat is not None:
        side = min(contract.side_entry(ctx, c) for c, _ in vics)
        start = min(contract.start_entry(ctx, c) for c, _ in vics)
        least = contract.SetBound(name, max(0, n - free - hv.unalloc), n - free, side, start)
        if contract.key_bound(least) > beat:
            return None
    best: tuple[tuple[object, ...], list[AttemptView], Counts] | None = None
    if st.only_gpus(hv, w, w.gpus):
        sets = _minimal_sets(vics, free, w.gpus)
    else:
        sets = minimal_sets_with_resources(st, hv, w, vics, free)
    for mask, prefix in sets:
        if bound is not None and prefix > bound:
            continue
        chosen = [vics[i][0] for i in range(len(vics)) if mask >> i & 1]
        key = contract.victim_key(ctx, chosen, [name])
        if best is None or key < best[0]:
            best = (key, chosen, prefix)
            if lead:
                bound = prefix  # the key's first three criteria (contract.counts_lead)
    return best


def _minimal_sets(vics: list[tuple[AttemptView, int]], free: int, n: int) -> list[tuple[int, Counts]]:
    """Every inclusion-minimal subset (as a bit mask over ``vics``) that, with ``free`` GPUs, frees
    ``n``, with its counts (allocated GPUs, GPUs, victims). Sums of a subset are built from the
    subset without its lowest member: GPUs gained, GPUs, allocated GPUs, victims, smallest gain."""
    size = 1 << len(vics)
    got = [free] * size
    tot = [0] * size
    alc = [0] * size
    cnt = [0] * size
    least = [1 << 30] * size
    out = []
    for mask in range(1, size):
        low = mask & -mask
        rest = mask ^ low
        c, f = vics[low.bit_length() - 1]
        g = c.attempt.gpu_count
        got[mask] = got[rest] + f
        tot[mask] = tot[rest] + g
        alc[mask] = alc[rest] + (g if c.attempt.allocated else 0)
        cnt[mask] = cnt[rest] + 1
        least[mask] = f if f < least[rest] else least[rest]
        if got[mask] < n or got[mask] - least[mask] >= n:
            continue  # not sufficient, or not inclusion-minimal
        out.append((mask, (alc[mask], tot[mask], cnt[mask])))
    return out


def minimal_sets_with_resources(
    st: ClusterState, hv: HostView, w: Workload, vics: list[tuple[AttemptView, int]], free: int
) -> list[tuple[int, Counts]]:
    """:func:`_minimal_sets` where CPUs or memory may bind (``ClusterState.only_gpus`` false):
    sufficient when GPUs, CPUs and memory all suffice with the set gone (§3.4 rule 3),
    inclusion-minimal when no member can be spared. Plain enumeration: such hosts are few."""
    n = w.gpus
    name = hv.name
    out = []
    res = [c.res.get(name, resources.NONE) for c, _ in vics]

    def enough(mask: int) -> bool:
        got = free
        freed = [0, 0]
        for i in range(len(vics)):
            if mask >> i & 1:
                got += vics[i][1]
                freed[0] += res[i][0]
                freed[1] += res[i][1]
        return got >= n and st.fits(hv, w, n, (freed[0], freed[1]))

    for mask in range(1, 1 << len(vics)):
        if not enough(mask):
            continue
        if any(mask >> i & 1 and enough(mask ^ (1 << i)) for i in range(len(vics))):
            continue  # not inclusion-minimal
        chosen = [vics[i][0] for i in range(len(vics)) if mask >> i & 1]
        g = sum(c.attempt.gpu_count for c in chosen)
        a = sum(c.attempt.gpu_count for c in chosen if c.attempt.allocated)
        out.append((mask, (a, g, len(chosen))))
    return out


def take_victims(ps: PassState, w: Workload, victims: list[AttemptView], hv: HostView) -> Found:
    """The victims and the GPUs to nominate: the lowest indices among free and freed GPUs."""
    nominated = ps.state.nominated
    pool = set(hv.free)
    for av in victims:
        pool.update(
            i for h, i in av.attempt.gpus if h == hv.name and i in hv.healthy and nominated.get((h, i)) in (None, w.id)
        )
    gpus = tuple((hv.name, i) for i in sorted(pool)[: w.gpus])
    return victims, gpus
