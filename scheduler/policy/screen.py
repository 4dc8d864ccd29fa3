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
- ready nominations (:func:`starts_only`, the same callers): a nomination whose GPUs are all
  usable and held by nothing (its victims released), of a nominee as above whose CPUs and memory
  fit there (``ClusterState.nomination_fits``; at most one such nomination per host with CPU or
  memory limits), is started on those GPUs at its nominee's turn (``Pass._handle_allocated``
  starts a nominee on its nomination before anything else). That start moves no load (the
  commitment counted from the nomination is the start's), frees no GPU (nominated GPUs are in no
  free list) and adds no room now (it is protected work): every other workload finds before and
  after it the free GPUs, the room now and the rule-2 answers the screen reads, so when the screen
  proves nothing else can happen, the pass decides exactly those starts and keeps the other
  nominations;
- nominees never preempt (the callers with ``nominees`` that also pass ``shape_count``, the
  number of pending workloads of each coarse shape, :data:`~scheduler.policy.pending.Coarse`):
  once every open nomination waits or is ready (above), ``Pass._handle_allocated`` starts a
  nominee on its nomination or on free GPUs, and otherwise returns at its nomination: it neither
  preempts nor reserves. A coarse shape whose every pending workload is a nominee is therefore
  left out of the preemption wants below (the nominee's own preemption, decided by the pass
  before, made it look as if its budget could preempt again); it still counts for placement on
  free GPUs;
- §3.3 placement: a pending workload (not held, not capped with ``on_cap=hold``) that
  fits the free GPUs of one active host, or for a gang enough whole free hosts, may
  start; reservations are ignored (they only forbid);
- §3.4 preemption: for every budget ``p`` with pending allocated work, the victim
  budgets rule 2 allows are taken with ``p``'s smallest commitment (rule 2 only gets
  stricter with a larger one); a host where free GPUs, unallocated work and unprotected
  work of those budgets together reach ``p``'s smallest single-host request, or enough
  whole hosts holding only such work for its smallest gang, means ``p`` may preempt.

The host walk (:class:`_Summary`, one entry per host) is kept by host version between the
passes of one kept standing (:class:`KeptSummary`; every change of a host's GPUs, work,
nominations or protections bumps its version): a pass pays for the hosts that changed.

The property tests (tests/policy/test_properties.py) check on every pass of random
clusters that a pass the screen calls idle decides nothing, and that the starts of
:func:`starts_only` are the pass's decisions; ``IncrementalScheduler(check=True)`` compares the
kept summary with a fresh walk and every screened pass with a full one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import scheduler.policy.contract as contract
import scheduler.policy.room_index as room_index
from scheduler.policy.contract import NEVER, NOW
from scheduler.policy.pending import Coarse, PendingIndex
from scheduler.policy.standing import Standing
from scheduler.policy.state import HostView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import GpuRef, OnCap, Snapshot, Start, Workload
from scheduler.policy.usage import pass_loads

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
        shape_count=_counts_of(pending.values()) if nominations else None,
    )


def _counts_of(pending: Iterable[Workload]) -> Callable[[Coarse], int]:
    """``shape_count`` of a bare list of pending workloads (tests, bare snapshots)."""
    counts = Counter(PendingIndex.coarse(w) for w in pending)
    return counts.__getitem__


def pending_shape_count(index: PendingIndex) -> Callable[[Coarse], int]:
    """``shape_count`` of a kept :class:`PendingIndex`: how many pending workloads have a
    coarse shape (its counts per shape and M, summed over the few Ms of that shape)."""
    counts, ms = index.counts, index.ms

    def count(c: Coarse) -> int:
        return sum(counts[c, m] for m in ms.get(c, ()))

    return count


def ready_starts(snap: Snapshot, tree: BudgetTree) -> list[Start] | None:
    """:func:`starts_only` for a bare snapshot, the pending workloads as nominees (tests)."""
    standing = Standing(snap)
    pending = {w.id: w for w in snap.pending}
    return starts_only(
        standing,
        pending.values(),
        tree,
        lambda: pass_loads(snap, tree, standing.noms, pending)[1],
        pending,
        shape_count=_counts_of(pending.values()),
    )


def idle(
    standing: Standing,
    pending: Iterable[Workload],
    tree: BudgetTree,
    loads: Callable[[], Mapping[str, int]],
    nominees: Mapping[str, Workload] | None = None,
    kept: KeptSummary | None = None,
    requests: Callable[[], Requests] | None = None,
    shape_count: Callable[[Coarse], int] | None = None,
) -> bool:
    """True only when a pass over the snapshot ``standing`` was built or synced from would
    start, stop and change nothing (and, with open nominations, keep them as they are).

    ``loads`` gives ``U + C`` per budget rolled up the tree, as the pass computes it (called
    at most once, only when needed). ``nominees``: the pending workloads by id; without them
    any open nomination answers False, with them only one that does not wait (module
    docstring). ``kept``: the host walk kept between passes of this standing; ``requests``: the
    :class:`Requests` of ``pending`` kept by the caller (:class:`KeptRequests`). Cost: one walk
    over hosts (those changed, with ``kept``) and pending shapes (none while they are the same,
    with ``requests``), plus one rule-2 test per (pending budget, budget holding unprotected
    allocated work). ``shape_count`` (with ``nominees``): how many pending workloads have a
    coarse shape (:func:`pending_shape_count`); shapes held only by nominees then want no
    preemption (module docstring).
    """
    return _screen(standing, pending, tree, loads, nominees, kept, requests, shape_count, ready=False) == []


def starts_only(
    standing: Standing,
    pending: Iterable[Workload],
    tree: BudgetTree,
    loads: Callable[[], Mapping[str, int]],
    nominees: Mapping[str, Workload],
    kept: KeptSummary | None = None,
    requests: Callable[[], Requests] | None = None,
    shape_count: Callable[[Coarse], int] | None = None,
) -> list[Start] | None:
    """:func:`idle` with ready nominations too (module docstring): None when the pass may decide
    anything beyond starting ready nominees on their nominations; else those starts, by nominee
    id (empty: the pass decides nothing), the pass keeping every other nomination as it is.
    Only for callers that read no reservations of such a pass (the screened pass may reserve)."""
    ready = _screen(standing, pending, tree, loads, nominees, kept, requests, shape_count, ready=True)
    if ready is None:
        return None
    return [Start(wid, tuple(sorted(standing.noms[wid])), allocated=True) for wid in ready]


def _screen(
    standing: Standing,
    pending: Iterable[Workload],
    tree: BudgetTree,
    loads: Callable[[], Mapping[str, int]],
    nominees: Mapping[str, Workload] | None,
    kept: KeptSummary | None,
    requests: Callable[[], Requests] | None,
    shape_count: Callable[[Coarse], int] | None,
    *,
    ready: bool,
) -> list[str] | None:
    """The ready nominees (sorted) when the pass decides nothing beyond starting them, else None."""
    starting: list[str] = []
    if standing.noms:
        if nominees is None:
            return None
        got = _nominations_wait(standing, nominees, tree, ready=ready)
        if got is None:
            return None
        starting = got
    if standing.draining or _fault_due(standing):
        return None
    summary = kept.of(standing) if kept is not None else summary_of(standing)
    req = requests_of(standing, pending, tree) if requests is None else requests()
    if req.fit(summary):
        return None  # some workload fits the free GPUs
    want = req.want
    if not want:
        return starting
    # A slot that looks as if it could act is read again without the shapes held only by
    # nominees (computed once, at the first such slot): the refined entry needs no fewer GPUs or
    # hosts and commits no less, so every test below only gets stricter, and slots that pass
    # without it pass with it (the same answer as testing the refined wants throughout).
    refine = bool(standing.noms) and shape_count is not None and nominees is not None
    refined: Want | None = None

    def again(key: tuple[str, str]) -> list[int] | None:
        nonlocal refined
        if refined is None:
            assert shape_count is not None and nominees is not None  # noqa: S101 (refine)
            refined = _want_without_nominees(req, standing, nominees, shape_count)
        return refined.get(key)

    def base(model: str, need: int, hosts_needed: int) -> bool:
        # Unallocated work is class NOW for every allocated workload (contract.victim_class).
        return summary.most_base.get(model, 0) >= need or summary.vacatable_base.get(model, 0) >= hosts_needed

    for key, (need, hosts_needed, _) in want.items():
        if base(key[1], need, hosts_needed):
            if refine:
                entry = again(key)
                if entry is None or not base(key[1], entry[0], entry[1]):
                    continue
            return None
    victim_budgets = {v for v, where in standing.victim_hosts.items() if where and v in tree.budgets}
    if not victim_budgets:
        return starting
    load = loads()
    for key, (need, hosts_needed, commitment) in want.items():
        p, model = key
        allowed = contract.allowed_budgets(tree, load, p, commitment, victim_budgets)
        if allowed and _may_preempt(standing, summary, model, allowed, need, hosts_needed):
            if refine:
                entry = again(key)
                if entry is None:
                    continue
                allowed = contract.allowed_budgets(tree, load, p, entry[2], victim_budgets)
                if not (allowed and _may_preempt(standing, summary, model, allowed, entry[0], entry[1])):
                    continue
            return None
    return starting


def _want_without_nominees(
    req: Requests, standing: Standing, nominees: Mapping[str, Workload], shape_count: Callable[[Coarse], int]
) -> Want:
    """``req.want`` without the coarse shapes every pending workload of which is an open
    nomination's nominee (each nomination waits or is ready: :func:`_nominations_wait` passed, so
    such a workload never preempts). Only the (budget, model) slots of those shapes are read again."""
    per: Counter[Coarse] = Counter(PendingIndex.coarse(nominees[wid]) for wid in standing.noms)
    gone = {c for c, k in per.items() if shape_count(c) <= k}
    if not gone:
        return req.want
    want = dict(req.want)
    for slot in {(c[0], c[1]) for c in gone}:
        if slot not in want:
            continue
        rest = [(k, c) for w, k, c in req.slots[slot] if PendingIndex.coarse(w) not in gone]
        if not rest:
            del want[slot]
            continue
        entry = [NONE, NONE, NONE]
        for k, c in rest:
            _fold(entry, k, c)
        want[slot] = entry
    return want


def _fold(slot: list[int], k: int, c: int) -> None:
    """One allocated workload into its :data:`Want` entry: ``k`` hosts for a gang (0: its GPUs
    on one host, already in ``slot[0]`` by the caller's choice), commitment ``c``."""
    if k < 0:
        slot[0] = min(slot[0], -k)
    else:
        slot[1] = min(slot[1], k)
    slot[2] = min(slot[2], c)


def _nominations_wait(
    standing: Standing, nominees: Mapping[str, Workload], tree: BudgetTree, *, ready: bool = False
) -> list[str] | None:
    """The nominees that start on their nominations now (``ready``: GPUs held by nothing, the
    nominee fits there), sorted, when every other open nomination waits (module docstring): the
    pass keeps it and its nominee neither starts on it nor preempts; None otherwise."""
    st = standing.state
    owner, attempts = st.owner, st.attempts
    starting: list[str] = []
    limited: set[str] = set()  # hosts with CPU or memory limits holding a ready nomination
    for wid, gpus in standing.noms.items():
        w = nominees.get(wid)
        if w is None or not w.allocated or w.group is not None or w.waiting or len(gpus) != w.gpus:
            return None
        if w.budget not in tree.budgets or tree.held(w.budget):
            return None
        capper = tree.capped_by(w.budget)
        if capper is not None or standing.unschedulable(w.model, w.gpus, w.cpus, w.memory):
            return None
        held = False
        for g in gpus:
            if not st.gpu_usable(g):
                return None
            aid = owner.get(g)
            if aid is not None:
                if not attempts[aid].stopping:
                    return None
                held = True
        if held:
            continue
        if not ready or not st.nomination_fits(w, gpus) or not _apart(st.hosts, gpus, limited):
            return None
        starting.append(wid)
    starting.sort()
    return starting


def _apart(hosts: Mapping[str, HostView], gpus: tuple[GpuRef, ...], limited: set[str]) -> bool:
    """False when a host of ``gpus`` with CPU or memory limits already holds a ready nomination
    (the first start there would count against the second's fit); records those hosts."""
    mine = {h for h, _ in gpus if hosts[h].host.cpus is not None or hosts[h].host.memory is not None}
    if mine & limited:
        return False
    limited |= mine
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


_Part = tuple[str, int, int, bool, bool, bool]
"""What one active host adds to a :class:`_Summary`: model, free GPUs, free + unallocated GPUs,
whole and free, whole and vacatable now, blocked (leaving or protected work)."""


def _part(standing: Standing, hv: HostView) -> _Part | None:
    """One host's entry of the summary (None: not active)."""
    if not hv.active:
        return None
    per = standing.agg.get(hv.name)
    blocked = bool(hv.stopping) or (per is not None and any(c[1] for c in per.values()))
    f = len(hv.free)
    room = f + hv.unalloc  # free GPUs and unallocated work: room now for any allocated workload
    whole = hv.all_healthy and hv.size == standing.state.largest[hv.model]
    return hv.model, f, room, whole and f == hv.size, whole and room == hv.size and not blocked, blocked


def summary_of(standing: Standing) -> _Summary:
    out = _Summary()
    for hv in standing.state.hosts.values():
        part = _part(standing, hv)
        if part is None:
            continue
        m, f, room, whole_free, vacatable, blocked = part
        if blocked:
            out.blocked.add(hv.name)
        if f > out.most_free.get(m, 0):
            out.most_free[m] = f
        if room > out.most_base.get(m, 0):
            out.most_base[m] = room
        if whole_free:
            out.whole_free[m] = out.whole_free.get(m, 0) + 1
        if vacatable:
            out.vacatable_base[m] = out.vacatable_base.get(m, 0) + 1
    return out


_UNSEEN: tuple[int, None] = (-1, None)


class KeptSummary:
    """:func:`summary_of` kept between the passes of one kept standing: each host's :func:`_part`
    by host version, folded into counts per model (how many hosts have each number of free GPUs,
    of free + unallocated GPUs; whole free and vacatable hosts; blocked hosts). A standing built
    afresh (another :class:`ClusterState`) starts it over. ``IncrementalScheduler(check=True)``
    compares it with :func:`summary_of` at every pass."""

    def __init__(self) -> None:
        self._state: object = None
        self._reset()

    def _reset(self) -> None:
        self._seen: dict[str, tuple[int, _Part | None]] = {}
        self._free: dict[str, Counter[int]] = {}
        self._room: dict[str, Counter[int]] = {}
        self._whole: Counter[str] = Counter()
        self._vacatable: Counter[str] = Counter()
        self._blocked: set[str] = set()

    def of(self, standing: Standing) -> _Summary:
        st = standing.state
        if self._state is not st:
            self._reset()  # a new standing: every host anew
            self._state = st
        seen, hosts = self._seen, st.hosts
        if not seen:
            changed: Iterable[str] = hosts
        else:  # a host never bumped (absent from ``version``) is as it was built
            changed = [name for name, v in st.version.items() if seen.get(name, _UNSEEN)[0] != v]
        for name in changed:
            hv = hosts.get(name)
            if hv is None:
                continue  # a nominated GPU of a host not in the snapshot: no part of the summary
            old = seen.get(name)
            if old is not None and old[1] is not None:
                self._count(name, old[1], -1)
            part = _part(standing, hv)
            seen[name] = (st.version.get(name, 0), part)
            if part is not None:
                self._count(name, part, 1)
        return _Summary(
            most_free={m: k for m, c in self._free.items() if (k := max((k for k, n in c.items() if n), default=0))},
            whole_free={m: n for m, n in self._whole.items() if n},
            most_base={m: k for m, c in self._room.items() if (k := max((k for k, n in c.items() if n), default=0))},
            vacatable_base={m: n for m, n in self._vacatable.items() if n},
            blocked=set(self._blocked),
        )

    def _count(self, name: str, part: _Part, sign: int) -> None:
        m, f, room, whole_free, vacatable, blocked = part
        self._free.setdefault(m, Counter())[f] += sign
        self._room.setdefault(m, Counter())[room] += sign
        self._whole[m] += sign * whole_free
        self._vacatable[m] += sign * vacatable
        if blocked:
            if sign > 0:
                self._blocked.add(name)
            else:
                self._blocked.discard(name)


@dataclass(slots=True)
class Requests:
    """What the screen reads of the pending shapes: :data:`Want` per (budget, model) of allocated
    work that may preempt, and per model the smallest single-host request and the smallest gang
    (in hosts) of any workload that may start (unallocated and downgraded work included)."""

    want: Want
    single: dict[str, int]
    gang: dict[str, int]
    slots: dict[tuple[str, str], list[tuple[Workload, int, int]]] = field(default_factory=dict, compare=False)
    """Per :data:`Want` key, the shapes read into it: (workload, ``-gpus`` for one host or the
    gang's hosts, commitment); :func:`_want_without_nominees` folds them again without some."""

    def fit(self, summary: _Summary) -> bool:
        """Some pending workload fits the free GPUs now (one host, or whole free hosts)."""
        return any(summary.most_free.get(m, 0) >= n for m, n in self.single.items()) or any(
            summary.whole_free.get(m, 0) >= k for m, k in self.gang.items()
        )


def requests_of(standing: Standing, pending: Iterable[Workload], tree: BudgetTree) -> Requests:
    """:class:`Requests` of ``pending``: a pure function of their shapes, the tree and the hosts."""
    largest = standing.state.largest
    out = Requests({}, {}, {})
    want, single, gang, slots = out.want, out.single, out.gang, out.slots
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
            single[w.model] = min(single.get(w.model, NONE), w.gpus)
            k = 0
        else:
            k = w.gpus // big
            gang[w.model] = min(gang.get(w.model, NONE), k)
        if not w.allocated or capper is not None:
            continue  # unallocated (or downgraded) work never preempts (rule 4)
        c = contract.commitment(w)
        size = k if k else -w.gpus
        _fold(want.setdefault((w.budget, w.model), [NONE, NONE, c]), size, c)
        slots.setdefault((w.budget, w.model), []).append((w, size, c))
    return out


class KeptRequests:
    """:func:`requests_of` kept while the pending shapes (a key the caller gives: the least M per
    coarse shape, ``PendingIndex.least``), the tree and the standing's hosts are the same."""

    def __init__(self) -> None:
        self._key: tuple[object, object, object] | None = None
        self._value: Requests | None = None

    def of(self, key: object, standing: Standing, pending: Iterable[Workload], tree: BudgetTree) -> Requests:
        last = self._key
        if (
            self._value is None
            or last is None
            or last[1] is not tree
            or last[2] is not standing.state
            or last[0] != key
        ):
            self._value = requests_of(standing, pending, tree)
            self._key = (key, tree, standing.state)
        return self._value


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
