"""A quick screen for passes that cannot decide anything (used when reasons are not wanted).

Most passes of a backlogged cluster start and stop nothing: every GPU is held, and the
budgets with pending work are either more served than the holders of unprotected work
or find too few GPUs even with them. :func:`nothing_to_do` proves that cheaply from
aggregates, so :func:`scheduler.policy.schedule` can skip the full pass (DESIGN.md §3
is unchanged: the screen only ever answers "certainly nothing"; when in doubt it
answers False and the full pass runs).

The screen is conservative on every rule it reads:

- faults and drains: a draining host with an attempt the drain stops (a drain now, or work not
  protected now, not leaving already) or with none (it turns drained), or any open attempt on a
  GPU that is unhealthy, means the pass may stop something; a draining host whose every attempt
  is protected or leaving is, for the rest, a host that is not active, as a cordoned one;
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
- scheduled drains (est61): an active host whose drain is scheduled at ``T`` starts no allocated
  work whose protection would cross ``T`` (``PassState.drain_allows``), so its free GPUs,
  unallocated and preemptible work are room only for an M up to ``T - now``: the summary keeps
  such hosts apart, by ``T`` (``screen_summary.DrainTable``), and each test below reads the hosts
  allowed for the least M of the work it tests (unallocated or downgraded work: every host);
- §3.4 preemption: for every budget ``p`` with pending allocated work, the victim
  budgets rule 2 allows are taken with ``p``'s smallest commitment (rule 2 only gets
  stricter with a larger one); a host where free GPUs, unallocated work and unprotected
  work of those budgets together reach ``p``'s smallest single-host request, or enough
  whole hosts holding only such work for its smallest gang, means ``p`` may preempt.

The host walk (``screen_summary.Summary``, one entry per host) is kept by host version between the
passes of one kept standing (``screen_summary.KeptSummary``; every change of a host's GPUs, work,
nominations or protections bumps its version): a pass pays for the hosts that changed.

The property tests (tests/policy/test_properties.py) check on every pass of random
clusters that a pass the screen calls idle decides nothing, and that the starts of
:func:`starts_only` are the pass's decisions; ``IncrementalScheduler(check=True)`` compares the
kept summary with a fresh walk and every screened pass with a full one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import scheduler.policy.contract as contract
import scheduler.policy.screen_rooms as screen_rooms
from scheduler.policy.pending import Coarse
from scheduler.policy.screen_nominees import counts_of, nominations_wait, want_without_nominees
from scheduler.policy.screen_summary import (
    ANY,
    KeptSummary,
    Requests,
    Summary,
    Want,
    drain_acts,
    fault_due,
    requests_of,
    summary_of,
)
from scheduler.policy.standing import Standing
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Snapshot, Start, Workload
from scheduler.policy.usage import pass_loads


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
        shape_count=counts_of(pending.values()) if nominations else None,
    )


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
        shape_count=counts_of(pending.values()),
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
    allowed_in: AllowedIn | None = None,
    waits: bool | None = None,
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
    preemption (module docstring). ``allowed_in``: rule 2's answers as the caller keeps them
    (:data:`AllowedIn`, over the same ``loads``); else read from each budget's thresholds
    (:func:`contract.allowed_reader`). ``waits``: :func:`nominations_wait` of this state as the
    caller keeps it (True: every open nomination waits), else computed here.
    """
    got = _screen(
        standing,
        pending,
        tree,
        loads,
        nominees,
        kept,
        requests,
        shape_count,
        ready=False,
        allowed_in=allowed_in,
        waits=waits,
    )
    return got == []


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
    allowed_in: AllowedIn | None = None,
    waits: bool | None = None,
) -> list[str] | None:
    """The ready nominees (sorted) when the pass decides nothing beyond starting them, else None.
    ``waits`` (only without ``ready``): the caller's kept answer of :func:`nominations_wait`."""
    starting: list[str] = []
    if standing.noms:
        if nominees is None:
            return None
        if waits is not None and not ready:
            if not waits:
                return None
        else:
            got = nominations_wait(standing, nominees, tree, ready=ready)
            if got is None:
                return None
            starting = got
    if (standing.draining and drain_acts(standing)) or fault_due(standing):
        return None
    summary = kept.of(standing) if kept is not None else summary_of(standing)
    req = requests_of(standing, pending, tree) if requests is None else requests()
    if req.fit(summary, standing.now):
        return None  # some workload fits the free GPUs
    want = req.want
    if not want:
        return starting
    again = _refiner(req, standing, nominees, shape_count)
    lo = _lows(standing, req)
    if _base_acts(summary, want, again, lo) or _preempt_acts(
        standing, summary, tree, loads, want, again, allowed_in, lo
    ):
        return None
    return starting


Lows = Callable[[tuple[str, str]], int]
"""Per :data:`Want` key, the earliest scheduled drain that allows its work on a host: ``now`` + the
least M of its work (``PassState.drain_allows``: an allocated start whose protection would cross
a host's drain is refused there, so that host is no room for it; est61)."""


def _lows(standing: Standing, req: Requests) -> Lows:
    now, want_m = standing.now, req.want_m
    return lambda key: now + want_m.get(key, ANY)


AllowedIn = Callable[[str, int, set[str]], frozenset[str]]
"""``(budget, commitment, budgets) ->`` :func:`contract.allowed_budgets` of ``budgets`` (the budgets
holding unprotected allocated work) at the screen's loads."""

Again = Callable[[tuple[str, str]], list[int] | None]
"""A :data:`Want` slot read again without the shapes held only by nominees (None: no such slot)."""


def _refiner(
    req: Requests,
    standing: Standing,
    nominees: Mapping[str, Workload] | None,
    shape_count: Callable[[Coarse], int] | None,
) -> Again | None:
    """With open nominations and ``shape_count``: a slot that looks as if it could act is read
    again without the shapes held only by nominees (computed once, at the first such slot): the
    refined entry needs no fewer GPUs or hosts and commits no less, so every test only gets
    stricter, and slots that pass without it pass with it (the same answer as testing the refined
    wants throughout). None: no refinement."""
    if not standing.noms or shape_count is None or nominees is None:
        return None
    refined: list[Want] = []

    def again(key: tuple[str, str]) -> list[int] | None:
        if not refined:
            refined.append(want_without_nominees(req, standing, nominees, shape_count))
        return refined[0].get(key)

    return again


def _base(summary: Summary, model: str, need: int, hosts_needed: int, lo: int) -> bool:
    """Free GPUs and unallocated work reach ``need`` on one host, or ``hosts_needed`` whole hosts,
    among the hosts no drain before ``lo`` refuses (:meth:`Summary.open`).
    (Unallocated work is class NOW for every allocated workload: contract.victim_class.)"""
    _, _, most, vacatable = summary.open(model, lo)
    return most >= need or vacatable >= hosts_needed


def _base_acts(summary: Summary, want: Want, again: Again | None, lo: Lows) -> bool:
    """Some budget's allocated work may start by taking free GPUs and unallocated work."""
    for key, (need, hosts_needed, _) in want.items():
        if not _base(summary, key[1], need, hosts_needed, lo(key)):
            continue
        if again is not None:
            entry = again(key)
            if entry is None or not _base(summary, key[1], entry[0], entry[1], lo(key)):
                continue
        return True
    return False


def _preempt_acts(
    standing: Standing,
    summary: Summary,
    tree: BudgetTree,
    loads: Callable[[], Mapping[str, int]],
    want: Want,
    again: Again | None,
    allowed_in: AllowedIn | None = None,
    lo: Lows | None = None,
) -> bool:
    """Some budget's allocated work may preempt unprotected work rule 2 allows it (§3.4), on a
    host no scheduled drain refuses it (``lo``; None: every host)."""
    victim_budgets = {v for v, where in standing.victim_hosts.items() if where and v in tree.budgets}
    if not victim_budgets:
        return False
    rule2_in: AllowedIn = allowed_in if allowed_in is not None else _reader(tree, loads(), victim_budgets)

    def acts(p: str, model: str, need: int, hosts_needed: int, commitment: int) -> bool:
        allowed = rule2_in(p, commitment, victim_budgets)
        at = ANY if lo is None else lo((p, model))
        return bool(allowed) and screen_rooms.may_preempt(standing, summary, model, allowed, need, hosts_needed, at)

    for key, (need, hosts_needed, commitment) in want.items():
        if not acts(*key, need, hosts_needed, commitment):
            continue
        if again is not None:
            entry = again(key)
            if entry is None or not acts(*key, entry[0], entry[1], entry[2]):
                continue
        return True
    return False


def _reader(tree: BudgetTree, load: Mapping[str, int], budgets: set[str]) -> AllowedIn:
    """:data:`AllowedIn` for one call's ``budgets`` (:func:`contract.allowed_reader`)."""
    reader = contract.allowed_reader(tree, load, budgets)
    return lambda p, c, _: reader(p, c)
