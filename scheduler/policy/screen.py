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
- nominations: any nomination means a nominee may start; unless the caller passes the
  pending workloads (``nominees``) and every nomination **waits**: its nominee is allocated
  work of its size, in no array group, of a budget that is known, not held and not capped with
  ``on_cap=hold``, on a shape the cluster can hold, and its GPUs are usable and held, at least
  one of them, by attempts already stopping, by nothing else. Then the pass keeps it as it is
  (``_check_nominations`` drops none, the nominee cannot start on it; placed elsewhere it
  would fit the free GPUs, which the screen tests, and a nominee never preempts), and the screen
  reads the rest as without it: its GPUs are in no free list and no room, its commitment is in
  the loads (:func:`~scheduler.policy.usage.pass_loads`), and its shape is tested like every
  pending workload's (more cases where the answer is "not idle"). Such a pass decides nothing
  and keeps the nominations; it may still **reserve** (a reservation only forbids), which a
  screened pass does not report: only callers that read no reservations of a pass with open
  nominations pass ``nominees`` (the forward simulation of estimates, docs/estimates.md);
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
from dataclasses import dataclass, field
from typing import TypeVar

import scheduler.policy.contract as contract
import scheduler.policy.room_index as room_index
from scheduler.policy.contract import NEVER, NOW
from scheduler.policy.standing import Standing
from scheduler.policy.state import HostView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import OnCap, Snapshot, Workload
from scheduler.policy.usage import pass_loads

_K = TypeVar("_K")
NONE = 1 << 30  # "no such request" for the smallest size of a budget's pending work

Want = dict[tuple[str, str], list[int]]
"""(budget, model) -> [smallest single-host request, smallest gang in hosts, smallest commitment]."""


def nothing_to_do(snap: Snapshot, tree: BudgetTree, *, nominations: bool = False) -> bool:
    """:func:`idle` for a bare snapshot (builds its :class:`Standing` and loads); ``nominations``:
    with the pending workloads as ``nominees`` (nominations that wait do not answer False)."""
    standing = Standing(snap)
    pending = {w.id: w for w in snap.pending}
    return idle(
        standing,
        pending.values(),
        tree,
        lambda: pass_loads(snap, tree, standing.noms, pending)[1],
        pending if nominations else None,
    )


def idle(
    standing: Standing,
    pending: Iterable[Workload],
    tree: BudgetTree,
    loads: Callable[[], Mapping[str, int]],
    nominees: Mapping[str, Workload] | None = None,
) -> bool:
    """True only when a pass over the snapshot ``standing`` was built or synced from would
    start, stop and change nothing (and, with open nominations, keep them as they are).

    ``loads`` gives ``U + C`` per budget rolled up the tree, as the pass computes it (called
    at most once, only when needed). ``nominees``: the pending workloads by id; without them
    any open nomination answers False, with them only one that does not wait (module
    docstring). Cost: one walk over hosts and pending workloads, plus one rule-2 test per
    (pending budget, budget holding unprotected allocated work).
    """
    if standing.noms and (nominees is None or not _nominations_wait(standing, nominees, tree)):
        return False
    if standing.draining or _fault_due(standing):
        return False
    summary = _summary(standing)
    want = _smallest_requests(standing, pending, tree, summary)
    if want is None:
        return False  # some workload fits the free GPUs
    if not want:
        return True
    # Unallocated work is class NOW for every allocated workload (contract.victim_class).
    for (_, model), (need, hosts_needed, _) in want.items():
        if summary.most_base.get(model, 0) >= need or summary.vacatable_base.get(model, 0) >= hosts_needed:
            return False
    victim_budgets = {v for v, where in standing.victim_hosts.items() if where and v in tree.budgets}
    if not victim_budgets:
        return True
    load = loads()
    for (p, model), (need, hosts_needed, commitment) in want.items():
        allowed = contract.allowed_budgets(tree, load, p, commitment, victim_budgets)
        if allowed and _may_preempt(standing, summary, model, allowed, need, hosts_needed):
            return False
    return True


def _nominations_wait(standing: Standing, nominees: Mapping[str, Workload], tree: BudgetTree) -> bool:
    """Every open nomination waits (module docstring): the pass keeps it and its nominee
    neither starts on it nor preempts."""
    st = standing.state
    owner, attempts = st.owner, st.attempts
    for wid, gpus in standing.noms.items():
        w = nominees.get(wid)
        if w is None or not w.allocated or w.group is not None or len(gpus) != w.gpus:
            return False
        if w.budget not in tree.budgets or tree.held(w.budget):
            return False
        capper = tree.capped_by(w.budget)
        if capper is not None or standing.unschedulable(w.model, w.gpus, w.cpus, w.memory):
            return False
        held = False
        for g in gpus:
            if not st.gpu_usable(g):
                return False
            aid = owner.get(g)
            if aid is not None:
                if not attempts[aid].stopping:
                    return False
                held = True
        if not held:
            return False
    return True


def _fault_due(standing: Standing) -> bool:
    """A non-leaving attempt on an unhealthy GPU: a fault stop is due."""
    st = standing.state
    for name in standing.sick:
        hv = st.hosts[name]
        for aid in hv.attempts:
            av = st.attempts[aid]
            if not av.stopping and any(h == name and i not in hv.healthy for h, i in av.attempt.gpus):
                return True
    return False


@dataclass(slots=True)
class _Summary:
    """Per model: the most free GPUs on one host, whole free hosts, the most free + unallocated
    GPUs on one host, whole hosts holding only those; hosts never vacated whole now."""

    most_free: dict[str, int] = field(default_factory=dict)
    whole_free: dict[str, int] = field(default_factory=dict)
    most_base: dict[str, int] = field(default_factory=dict)
    vacatable_base: dict[str, int] = field(default_factory=dict)
    blocked: set[str] = field(default_factory=set)  # hosts with leaving or protected work


_Row = tuple[str, int, int, bool, bool, bool]
"""One active host's part of the summary: (model, free GPUs, free + unallocated GPUs, whole and
free, whole and vacatable, blocked)."""


class _KeptSummary:
    """The summary's per-host rows, each with the host version it read, and per model the tallies
    they add up to, kept on the standing between passes (``Standing.screen_summary``). A host's
    version only grows, and every change of its GPUs, work, nominations or protections bumps it,
    so a row stands while its version does and only the hosts bumped since are read again
    (those in ``ClusterState.version`` with another version: a host never bumped keeps its
    first row). ``IncrementalScheduler(check=True)`` compares it with :func:`summary_of`."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[int, _Row | None]] = {}
        self.free: dict[str, dict[int, int]] = {}  # model -> free GPUs -> active hosts with that many
        self.base: dict[str, dict[int, int]] = {}  # model -> free + unallocated GPUs -> hosts
        self.out = _Summary()

    def current(self, standing: Standing) -> _Summary:
        """The summary of the standing's state now, its changed hosts' rows read again."""
        st = standing.state
        version, rows = st.version, self.rows
        # (a nomination of an unknown host's GPU bumps a version outside the cluster: not a row)
        changed = [h for h, v in version.items() if h in rows and rows[h][0] != v] if rows else list(st.hosts)
        for name in changed:
            old = rows.get(name)
            if old is not None and old[1] is not None:
                self._count(name, old[1], -1)
            row = _row(standing, st.hosts[name])
            rows[name] = (version.get(name, 0), row)
            if row is not None:
                self._count(name, row, 1)
        if changed:
            out = self.out
            out.most_free = {m: top for m, c in self.free.items() if c and (top := max(c))}
            out.most_base = {m: top for m, c in self.base.items() if c and (top := max(c))}
        return self.out

    def _count(self, name: str, row: _Row, sign: int) -> None:
        model, free, room, whole, vacatable, blocked = row
        _tally(self.free.setdefault(model, {}), free, sign)
        _tally(self.base.setdefault(model, {}), room, sign)
        out = self.out
        if whole:
            _tally(out.whole_free, model, sign)
        if vacatable:
            _tally(out.vacatable_base, model, sign)
        if blocked and sign > 0:
            out.blocked.add(name)
        elif blocked:
            out.blocked.discard(name)


def _tally(counts: dict[_K, int], key: _K, sign: int) -> None:
    left = counts.get(key, 0) + sign
    if left:
        counts[key] = left
    else:
        del counts[key]


def _summary(standing: Standing) -> _Summary:
    """:func:`summary_of`, read from the rows kept between passes (:class:`_KeptSummary`)."""
    kept = standing.screen_summary
    if not isinstance(kept, _KeptSummary):
        kept = standing.screen_summary = _KeptSummary()
    return kept.current(standing)


def kept_summary_differences(standing: Standing) -> list[str]:
    """The kept summary brought to the standing against a fresh one (tests)."""
    kept, fresh = _summary(standing), summary_of(standing)
    return [] if kept == fresh else [f"screen summary: {kept} != {fresh}"]


def _row(standing: Standing, hv: HostView) -> _Row | None:
    """The host's part of the summary; None for a host that is not active."""
    if not hv.active:
        return None
    per = standing.agg.get(hv.name)
    blocked = bool(hv.stopping) or (per is not None and any(c[1] for c in per.values()))
    free = len(hv.free)
    room = free + hv.unalloc  # free GPUs and unallocated work: room now for any allocated workload
    whole = hv.all_healthy and hv.size == standing.state.largest[hv.model]
    return (hv.model, free, room, whole and free == hv.size, whole and room == hv.size and not blocked, blocked)


def summary_of(standing: Standing) -> _Summary:
    """Per model, over the active hosts: the figures of :class:`_Summary` (one walk; the plain
    statement the kept summary is compared with)."""
    out = _Summary()
    for hv in standing.state.hosts.values():
        row = _row(standing, hv)
        if row is None:
            continue
        model, free, room, whole_free, vacatable, blocked = row
        if blocked:
            out.blocked.add(hv.name)
        if free > out.most_free.get(model, 0):
            out.most_free[model] = free
        if room > out.most_base.get(model, 0):
            out.most_base[model] = room
        if whole_free:
            out.whole_free[model] = out.whole_free.get(model, 0) + 1
        if vacatable:
            out.vacatable_base[model] = out.vacatable_base.get(model, 0) + 1
    return out


def _smallest_requests(
    standing: Standing, pending: Iterable[Workload], tree: BudgetTree, summary: _Summary
) -> Want | None:
    """Smallest single-host request and smallest gang (in hosts) per (budget, model) of allocated
    work that may preempt; None when some pending workload fits the free GPUs now."""
    largest = standing.state.largest
    want: Want = {}
    for w in pending:
        if w.budget not in tree.budgets or tree.held(w.budget):
            continue
        if standing.unschedulable(w.model, w.gpus, w.cpus, w.memory):
            continue  # the pass only gives it a reason
        big = largest[w.model]
        capper = tree.capped_by(w.budget) if w.allocated else None
        if capper is not None and capper.on_cap == OnCap.HOLD:
            continue
        if w.gpus <= big:
            if summary.most_free.get(w.model, 0) >= w.gpus:
                return None
            k = 0
        else:
            k = w.gpus // big
            if summary.whole_free.get(w.model, 0) >= k:
                return None
        if not w.allocated or capper is not None:
            continue  # unallocated (or downgraded) work never preempts (rule 4)
        c = contract.commitment(w)
        slot = want.setdefault((w.budget, w.model), [NONE, NONE, c])
        if k:
            slot[1] = min(slot[1], k)
        else:
            slot[0] = min(slot[0], w.gpus)
        slot[2] = min(slot[2], c)
    return want


def _may_preempt(
    standing: Standing, summary: _Summary, model: str, allowed: frozenset[str], need: int, hosts_needed: int
) -> bool:
    """True when some host's room profile, read from the index with the budgets rule 2 allows at
    the smallest commitment as class NOW, reaches ``need`` GPUs, or enough whole hosts are."""
    st = standing.state
    largest = st.largest[model]
    classes = {v: NOW if v in allowed else NEVER for v in standing.agg_budgets}
    vacatable = summary.vacatable_base.get(model, 0)
    hosts: set[str] = set()
    for v in allowed:
        hosts.update(standing.victim_hosts[v])
    for name in sorted(hosts):
        hv = st.hosts[name]
        if hv.model != model or not hv.active:
            continue
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
