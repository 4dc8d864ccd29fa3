"""A quick screen for passes that cannot decide anything (used when reasons are not wanted).

Most passes of a backlogged cluster start and stop nothing: every GPU is held, and the
budgets with pending work are either more served than the holders of unprotected work
or find too few GPUs even with them. :func:`nothing_to_do` proves that cheaply from
aggregates, so :func:`scheduler.policy.schedule` can skip the full pass (DESIGN.md §3
is unchanged: the screen only ever answers "certainly nothing"; when in doubt it
answers False and the full pass runs).

The screen is conservative on every rule it reads:

- faults and drains: any draining host, or any open attempt on a GPU that is unhealthy,
  means the pass may stop something;
- nominations: any nomination means a nominee may start;
- §3.3 placement: a pending workload (not held, not capped with ``on_cap=hold``) that
  fits the free GPUs of one active host, or for a gang enough whole free hosts, may
  start; reservations are ignored (they only forbid);
- §3.4 preemption: for every budget ``p`` with pending allocated work, the victim
  budgets rule 2 allows are taken with ``p``'s smallest commitment (rule 2 only gets
  stricter with a larger one); a host where free GPUs, unallocated work and unprotected
  work of those budgets together reach ``p``'s smallest single-host request, or enough
  whole hosts holding only such work for its smallest gang, means ``p`` may preempt.

The property tests (tests/policy/test_properties.py) check on every pass of random
clusters that a pass the screen calls idle decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scheduler.policy.standing import Standing
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import OnCap, Snapshot, Workload

NONE = 1 << 30  # "no such request" for the smallest size of a budget's pending work


def nothing_to_do(snap: Snapshot, tree: BudgetTree) -> bool:
    """:func:`idle` for a bare snapshot (builds its :class:`Standing` and loads)."""
    from scheduler.policy.core import pass_loads

    standing = Standing(snap)
    pending = {w.id: w for w in snap.pending}
    return idle(standing, pending.values(), tree, lambda: pass_loads(snap, tree, standing.noms, pending)[1])


def idle(
    standing: Standing, pending: Iterable[Workload], tree: BudgetTree, loads: Callable[[], Mapping[str, int]]
) -> bool:
    """True only when a pass over the snapshot ``standing`` was built or synced from would
    start, stop and change nothing.

    ``loads`` gives ``U + C`` per budget rolled up the tree, as the pass computes it (called
    at most once, only when needed). Cost: one walk over hosts and pending workloads, plus
    one rule-2 test per (pending budget, budget holding unprotected allocated work).
    """
    if standing.noms or standing.draining:
        return False
    st = standing.state
    # A non-leaving attempt on an unhealthy GPU: a fault stop is due.
    for name in standing.sick:
        hv = st.hosts[name]
        for aid in hv.attempts:
            av = st.attempts[aid]
            if not av.stopping and any(h == name and i not in hv.healthy for h, i in av.attempt.gpus):
                return False
    largest = st.largest
    agg = standing.agg
    most_free: dict[str, int] = {}
    whole_free: dict[str, int] = {}
    most_base: dict[str, int] = {}  # model -> most free + unallocated GPUs on one host
    vacatable_base: dict[str, int] = {}  # model -> whole hosts holding only free GPUs and unallocated work
    blocked: set[str] = set()  # hosts with leaving or protected work (never vacated whole now)
    for hv in st.hosts.values():
        if not hv.active:
            continue
        name = hv.name
        per = agg.get(name)
        if hv.stopping or (per is not None and any(c[1] for c in per.values())):
            blocked.add(name)
        f = len(hv.free)
        m = hv.model
        if f > most_free.get(m, 0):
            most_free[m] = f
        room = f + hv.unalloc
        if room > most_base.get(m, 0):
            most_base[m] = room
        if hv.all_healthy and hv.size == largest[m]:
            if f == hv.size:
                whole_free[m] = whole_free.get(m, 0) + 1
            if room == hv.size and name not in blocked:
                vacatable_base[m] = vacatable_base.get(m, 0) + 1
    # Smallest single-host request and smallest gang (in hosts) per (budget, model) of allocated work.
    want: dict[tuple[str, str], list[int]] = {}  # -> [min gpus (single), min hosts (gang), min commitment]
    for w in pending:
        if w.budget not in tree.budgets or tree.held(w.budget):
            continue
        big = largest.get(w.model, 0)
        if big == 0 or w.gpus < 1:
            continue  # unschedulable: the pass only gives it a reason
        capper = tree.capped_by(w.budget) if w.allocated else None
        if capper is not None and capper.on_cap == OnCap.HOLD:
            continue
        if w.gpus <= big:
            if most_free.get(w.model, 0) >= w.gpus:
                return False
            k = 0
        else:
            if w.gpus % big:
                continue  # unschedulable
            k = w.gpus // big
            if whole_free.get(w.model, 0) >= k:
                return False
        if not w.allocated or capper is not None:
            continue  # unallocated (or downgraded) work never preempts
        slot = want.setdefault((w.budget, w.model), [NONE, NONE, w.gpus * w.min_runtime])
        if k:
            slot[1] = min(slot[1], k)
        else:
            slot[0] = min(slot[0], w.gpus)
        slot[2] = min(slot[2], w.gpus * w.min_runtime)
    if not want:
        return True
    # Unallocated work is room for every allocated workload.
    for (_, model), (need, hosts_needed, _) in want.items():
        if most_base.get(model, 0) >= need or vacatable_base.get(model, 0) >= hosts_needed:
            return False
    victim_budgets = {v for v, where in standing.victim_hosts.items() if where and v in tree.budgets}
    if not victim_budgets:
        return True
    load = loads()
    for (p, model), (need, hosts_needed, commitment) in want.items():
        allowed = {v for v in victim_budgets if tree.rule2(load, p, commitment, v)}
        if not allowed:
            continue  # room is free GPUs and unallocated work only: checked above
        vacatable = vacatable_base.get(model, 0)
        hosts = set()
        for v in allowed:
            hosts.update(standing.victim_hosts[v])
        for name in sorted(hosts):
            hv = st.hosts[name]
            if hv.model != model or not hv.active:
                continue
            per = agg[name]
            extra = sum(c[0] for v, c in per.items() if v in allowed)
            if not extra:
                continue
            room = len(hv.free) + hv.unalloc + extra
            if room >= need:
                return False
            whole = hv.all_healthy and room == hv.size == largest[model]
            if hosts_needed != NONE and whole and name not in blocked:
                vacatable += 1
        if vacatable >= hosts_needed:
            return False
    return True
