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

from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import GpuHealth, HostState, OnCap, Snapshot
from scheduler.policy.usage import committed_usage, own_load, windowed_usage

NONE = 1 << 30  # "no such request" for the smallest size of a budget's pending work


def nothing_to_do(snap: Snapshot, tree: BudgetTree) -> bool:
    """True only when a pass over ``snap`` would start, stop and change nothing.

    ``tree`` is the snapshot's :class:`BudgetTree`. Cost: one walk over hosts, open
    attempts and pending workloads, plus one rule-2 test per (pending budget, budget
    holding unprotected allocated work).
    """
    if snap.nominations:
        return False
    now = snap.now
    largest: dict[str, int] = {}
    n_healthy: dict[str, int] = {}  # host -> healthy GPUs
    gpus_of: dict[str, dict[int, GpuHealth]] = {}
    sick: dict[str, set[int]] = {}  # host -> unhealthy GPU indices (hosts with any)
    active: dict[str, bool] = {}
    model_of: dict[str, str] = {}
    size_of: dict[str, int] = {}
    for h in snap.hosts:
        if h.state == HostState.DRAINING:
            return False
        largest[h.model] = max(largest.get(h.model, 0), h.size)
        if GpuHealth.UNHEALTHY in h.gpu_health.values():
            sick[h.name] = {i for i, g in h.gpu_health.items() if g == GpuHealth.UNHEALTHY}
        n_healthy[h.name] = len(h.gpu_health) - len(sick.get(h.name, ()))
        gpus_of[h.name] = h.gpu_health
        active[h.name] = h.state == HostState.ACTIVE
        model_of[h.name] = h.model
        size_of[h.name] = h.size
    held: dict[str, int] = {}  # host -> healthy GPUs held by open attempts
    base: dict[str, int] = {}  # host -> healthy GPUs held by unallocated work that is not leaving
    unprot: dict[str, dict[str, int]] = {}  # host -> budget -> healthy GPUs of unprotected allocated work
    blocked: set[str] = set()  # hosts with leaving or protected work (never vacated whole now)
    victim_budgets: set[str] = set()
    for a in snap.attempts:
        kind = 0 if a.stopping or a.protected_at(now) else 1 if not a.allocated else 2
        on: dict[str, int] = {}
        for h, i in a.gpus:
            known = gpus_of.get(h)
            if known is None or i not in known:
                continue  # not a GPU of this cluster: the pass ignores it too
            bad = sick.get(h)
            if bad is not None and i in bad:
                if not a.stopping:
                    return False  # a fault stop is due
                continue
            on[h] = on.get(h, 0) + 1
        for h, n in on.items():
            held[h] = held.get(h, 0) + n
            if kind == 0:
                blocked.add(h)
            elif kind == 1:
                base[h] = base.get(h, 0) + n
            else:
                per = unprot.setdefault(h, {})
                per[a.budget] = per.get(a.budget, 0) + n
                victim_budgets.add(a.budget)
    free: dict[str, int] = {}
    most_free: dict[str, int] = {}
    whole_free: dict[str, int] = {}
    most_base: dict[str, int] = {}  # model -> most free + unallocated GPUs on one host
    vacatable_base: dict[str, int] = {}  # model -> whole hosts holding only free GPUs and unallocated work
    for name, healthy in n_healthy.items():
        if not active[name]:
            continue
        f = healthy - held.get(name, 0)
        free[name] = f
        m = model_of[name]
        most_free[m] = max(most_free.get(m, 0), f)
        room = f + base.get(name, 0)
        most_base[m] = max(most_base.get(m, 0), room)
        whole = size_of[name] == largest[m] == healthy
        if whole and f == size_of[name]:
            whole_free[m] = whole_free.get(m, 0) + 1
        if whole and room == size_of[name] and name not in blocked:
            vacatable_base[m] = vacatable_base.get(m, 0) + 1
    # Smallest single-host request and smallest gang (in hosts) per (budget, model) of allocated work.
    want: dict[tuple[str, str], list[int]] = {}  # -> [min gpus (single), min hosts (gang), min commitment]
    for w in snap.pending:
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
    loads = _loads(snap, tree)
    for (p, model), (need, hosts_needed, commitment) in want.items():
        allowed = {v for v in victim_budgets if v in tree.budgets and tree.rule2(loads, p, commitment, v)}
        if not allowed:
            continue  # room is free GPUs and unallocated work only: checked above
        vacatable = vacatable_base.get(model, 0)
        for name, per in unprot.items():
            if model_of[name] != model or name not in free:
                continue
            extra = sum(n for v, n in per.items() if v in allowed)
            if not extra:
                continue
            room = free[name] + base.get(name, 0) + extra
            if room >= need:
                return False
            whole = room == size_of[name] == largest[model] == n_healthy[name]
            if hosts_needed != NONE and whole and name not in blocked:
                vacatable += 1
        if vacatable >= hosts_needed:
            return False
    return True


def _loads(snap: Snapshot, tree: BudgetTree) -> dict[str, int]:
    """``U + C`` per budget, rolled up the tree (as the pass computes it, no nominations)."""
    own_u = windowed_usage(snap.usage, snap.attempts, snap.now, snap.window)
    return tree.roll_up(own_load(own_u, committed_usage(snap.attempts, snap.now, {}, {})))
