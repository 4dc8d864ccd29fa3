"""Estimated start times (DESIGN.md §3.8): run the policy forward in simulated time, event to event.

From the current state, with no new arrivals and no running workload ending on its own, one
forward simulation per cluster gives every pending workload its estimate: the instant at which
the simulation starts it, an upper bound on its real start ("by 14:05 at the latest"). No start
within one window means no estimate.

The simulation never steps on a grid. Between two instants at which an attempt starts, stops or
is released, a pass can decide something new only when

- a protection ends (``started_at + M``) or a stop's grace ends (``release_at``), or
- the Fair Tree order of two siblings changes, or a rule-2 answer (§3.4) changes: usage slides
  with the window, so loads move although nothing starts or stops; or
- a budget's cap (§3.7) is reached or lifted: its usage in the cap's period moves the same way
  (:class:`scheduler.sim.caps.CapWatch`; every budget with a cap is marked by the rule at each
  instant, :meth:`Forward._follow_caps`).

Each budget's load ``U + C`` is linear in time between breakpoints (a record's or attempt's
start or end leaving the window, a protection ending: see :func:`_breakpoints`), so for two
siblings ``A``, ``B`` the instant at which ``load_B·s_A − (load_A + c)·s_B`` changes sign is
exact integer arithmetic (:func:`_first_sign_change`). The next instant simulated is the earliest
of all those (docs/estimates.md). The instants in between would repeat the same decisions. In a
quiet state (nothing decided, reserved or nominated) order changes are no events, nor rule-2
answers about sides with no preemptible work (:attr:`Forward.quiet`). The simulation stops once
every wanted workload that can start in it has started (:meth:`Forward.may_start`).
tests/sim/test_estimate_oracle.py compares all this with a fresh ``schedule()`` at every second.

What one instant costs beside the policy's passes is kept from instant to instant, each kept
structure with a plain reading beside it and a test comparing them on random states: the
releases', protection ends' and wall-time limits' instants and the loads' breakpoints in heaps
tied to attempt objects (:class:`_Instants`; the plain walk: ``tests.sim.estimate_oracle.
next_event_walk``), the attempts' loads in a :class:`LoadBook` taken forward by the attempts
changed (:meth:`Forward.book_at`), the usage records' windowed usage in a :class:`RecordBook`
(each pass reads one lump per budget: :meth:`Forward.pass_usage`), the sibling pairs' crossing
instants recomputed only for budgets whose load line or commitments changed
(:class:`OrderCrossings`), and each pass's pending workloads handed with their changes since the
previous pass (:class:`PendingView`), so the policy's pending index follows them instead of
comparing 20k workloads; the snapshots' lists are kept while unchanged (:class:`_Lists`), and
the usage a pass reads while no record changed (:attr:`Forward.usage_memo`). An instant whose
pass the screen answered with ready starts ends there, with no confirming pass
(:func:`_only_starts`).

Work the simulation preempts is requeued when its GPUs are released, with its original submission
time, as the live system does (DESIGN.md §4): for work already running at the snapshot the caller
passes those workloads (``running``; without them such work is not requeued), and names the
snapshot's attempts already stopping whose workloads run again once released (``requeued``:
preempted, drained, a GPU fault, a lost host; not a ``timeout`` or a cancel), requeued the same
way at their release (est48). A workload holding
a reservation is never estimated later than its reservation's start plus the grace: its room
counts from its victims' release (:func:`cap_by_reservations`).

No work ends on its own, but the system itself stops an attempt at its workload's wall-time limit
(``max_runtime``, DESIGN.md §4: a ``timeout`` stop, then the grace, and the workload ends failed):
the caller passes those limits (``limits``: workload id → seconds), and the simulation stops
every attempt that has run its limit (a snapshot attempt from its start, or from ``now`` while
still starting), as the tick's ``stop_timed_out`` does. Without them, pending work behind running
work it may not preempt (its own budget's, or work rule 2 protects) never starts in the simulation
and has no estimate (docs/estimates.md "Coverage"). An array group's ``%N`` cap is the policy's:
each pass gets ``group_limits`` counted from the simulation's own attempts
(:attr:`Forward.group_limits`), so a member waiting on the cap starts once a sibling's limit frees
a slot; an unmet ``after`` list never ends (:func:`startable`).
"""

from __future__ import annotations

import copy
import gc
import heapq
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import NamedTuple

from scheduler.policy import (
    Attempt,
    Decisions,
    GpuHealth,
    Host,
    HostState,
    IncrementalScheduler,
    OnCap,
    Snapshot,
    UsageRecord,
    Workload,
)
from scheduler.policy.attempt_log import AttemptLog, AttemptsView
from scheduler.policy.caps import with_capped
from scheduler.policy.pending import PendingChanges, PendingLog
from scheduler.policy.tree import BudgetTree
from scheduler.policy.usage import LoadBook, RecordBook, pass_loads
from scheduler.sim.caps import CapWatch

NEVER = float("inf")


def _first_sign_change(h0: int, slope: int, now: int) -> int | None:
    """The first integer instant ``t > now`` at which ``h(t) = h0 + slope·(t − now)`` has another
    sign than ``h0`` (zero counts as a sign of its own), or None if never (on this linear piece)."""
    if slope == 0:
        return None
    if h0 == 0:
        return now + 1
    if (h0 > 0) == (slope > 0):
        return None
    return now + -(-abs(h0) // abs(slope))


def _breakpoints(snap: Snapshot) -> int | float:
    """The first instant after ``snap.now`` at which some budget's ``U`` or ``C`` changes slope
    (§3.1 pro-rata edges, §3.2 protection ends): loads are linear in time until then."""
    now, w = snap.now, snap.window
    best: int | float = NEVER
    for r in snap.usage:
        for t in (r.end + w,) if r.gpus is None else (r.start + w, r.end + w):
            if now < t < best:
                best = t
    for a in snap.attempts:
        if not a.allocated or a.started_at is None:
            continue
        for t in (a.started_at + w, a.started_at + a.min_runtime):
            if now < t < best:
                best = t
        if a.charged_until is not None:
            for t in (a.charged_until, a.charged_until + w):
                if now < t < best:
                    best = t
    return best


def pending_commitments(pending: Iterable[Workload]) -> dict[str, dict[int, int]]:
    """Budget → commitment ``gpus × M`` (0 for unallocated work) → how many pending workloads
    of that budget commit it: what :func:`next_order_change` reads of the pending workloads."""
    out: dict[str, dict[int, int]] = {}
    for w in pending:
        _bump(out, w, 1)
    return out


def _bump(counts: dict[str, dict[int, int]], w: Workload, delta: int) -> None:
    per = counts.setdefault(w.budget, {})
    c = w.gpus * w.min_runtime if w.min_runtime > 0 else 0
    left = per.get(c, 0) + delta
    if left:
        per[c] = left
    else:
        del per[c]
        if not per:
            del counts[w.budget]


def next_order_change(
    snap: Snapshot,
    tree: BudgetTree,
    *,
    order: bool = True,
    commitments: Mapping[str, Mapping[int, int]] | None = None,
    book: LoadBook | None = None,
    piece_end: int | float | None = None,
    kept: OrderCrossings | None = None,
    usage1: Sequence[UsageRecord] | None = None,
) -> int | float:
    """The earliest instant after ``snap.now`` at which, with no start, stop or release, the
    Fair Tree order of two siblings or a rule-2 answer for a pending workload may change.
    ``order=False`` (the caller knows the state is quiet, :attr:`Forward.quiet`): the order
    cannot matter, and only rule-2 answers about a side ``B`` holding unprotected allocated
    work (preemptible now) can: allowing a side whose work is all protected makes no room.

    Rule 2 for a commitment ``c`` holds while ``c < T(t)`` (:func:`contract.rule2_thresholds`);
    between breakpoints ``T`` moves one way, so only the nearest pending commitment on that side
    can change an answer first. Returns ``inf`` when nothing changes within the loads' linear
    piece's end and no piece ends (a piece end is itself returned as a candidate).
    ``commitments``: :func:`pending_commitments` of ``snap.pending``, when the caller keeps it
    (then ``snap.pending`` is read only for the nominated workloads).
    ``book``: a :class:`LoadBook` of ``snap.attempts`` at ``snap.now`` (:meth:`Forward.book_at`),
    for the loads without a walk over every attempt; it is left at ``now + 1``.
    ``piece_end``: :func:`_breakpoints` of ``snap``, when the caller keeps it (:class:`_Instants`).
    ``kept``: the pairs' crossing instants kept from the caller's previous calls
    (:class:`OrderCrossings`), recomputed only for pairs whose loads' line or commitments changed.
    ``usage1``: the usage records as read at ``now + 1`` when ``snap.usage`` holds them as read at
    ``now`` only (:meth:`Forward.pass_usage`); by default ``snap.usage``.
    """
    now = snap.now
    if commitments is None:
        commitments = pending_commitments(snap.pending)
    if snap.nominations:
        pending = {w.id: w for w in snap.pending if w.id in snap.nominations}
        noms = {k: v for k, v in snap.nominations.items() if k in pending}
    else:
        pending, noms = {}, {}
    _, load0 = pass_loads(snap, tree, noms, pending, book)
    if book is not None:
        book.advance(now + 1)
    snap1 = replace(snap, now=now + 1) if usage1 is None else replace(snap, now=now + 1, usage=usage1)
    _, load1 = pass_loads(snap1, tree, noms, pending, book)
    best: int | float = _breakpoints(snap) if piece_end is None else piece_end
    active: set[str] = set()
    commits: dict[str, set[int]] = {}
    for budget, per in commitments.items():
        positive = [c for c in per if c > 0]
        for a in tree.chain.get(budget, ()):
            active.add(a)
            if positive:
                commits.setdefault(a, set()).update(positive)
    sorted_commits = {k: sorted(v) for k, v in commits.items()}
    preemptible: set[str] | None = None
    if not order:
        preemptible = set()
        for at in snap.attempts:
            if at.allocated and not at.stopping and at.started_at is not None and at.started_at + at.min_runtime <= now:
                preemptible.update(tree.chain.get(at.budget, ()))
    if kept is not None:
        t = kept.first(now, load0, load1, sorted_commits, active, order, preemptible)
        return t if t < best else best
    budgets = tree.budgets
    for parent, kids in tree.children.items():
        if parent not in active or len(kids) < 2:
            continue
        for a in kids:
            if a not in active:
                continue
            sa = budgets[a].shares
            for b in kids:
                if b == a:
                    continue
                sb = budgets[b].shares
                f0 = load0[b] * sa - load0[a] * sb
                slope = (load1[b] * sa - load1[a] * sb) - f0
                t_order, t_rule2 = _pair_crossings(f0, slope, sb, sorted_commits.get(a), now)
                if order and b in active and a < b and t_order is not None and t_order < best:
                    best = t_order
                if t_rule2 is not None and (preemptible is None or b in preemptible) and t_rule2 < best:
                    best = t_rule2
    return best


def _pair_crossings(f0: int, slope: int, sb: int, cs: Sequence[int] | None, now: int) -> tuple[int | None, int | None]:
    """For siblings ``A``, ``B`` with ``f(t) = load_B·s_A − load_A·s_B = f0 + slope·(t − now)``:
    the first instant after ``now`` at which their order changes (``f`` changes sign), and the
    first at which a rule-2 answer for one of ``A``'s pending commitments ``cs`` (sorted,
    positive) about ``B`` changes; None for never (on this linear piece)."""
    t_order = _first_sign_change(f0, slope, now)
    if not cs or slope == 0:
        return t_order, None
    # Rule 2 for commitment c: h_c = f − c·s_B > 0. The answer that changes first is the nearest
    # commitment on the side T moves to.
    if sb == 0:
        side: int | None = 0
    else:
        i = bisect_left(cs, -(-f0 // sb))  # cs[:i] are allowed now: c < ceil(f / s_B)
        side = cs[i] if slope > 0 and i < len(cs) else (cs[i - 1] if slope < 0 and i > 0 else None)
    if side is None:
        return t_order, None
    return t_order, _first_sign_change(f0 - side * sb, slope, now)


class OrderCrossings:
    """:func:`next_order_change`'s pair loop, kept between the calls of one forward simulation.

    A pair's crossing instants (:func:`_pair_crossings`) depend only on the two loads' lines
    (value at an instant and slope), ``A``'s pending commitments and the shares. Between two
    calls most budgets' loads follow the line they had (nothing of theirs started, stopped or
    reached a breakpoint), so a pair is recomputed only when one of its budgets' line or ``A``'s
    commitments changed, or its kept instant has passed; for every other pair the instant kept
    is the one a fresh computation gives (the same sign change of the same linear function).
    Which pairs count (active budgets, ``order``, the preemptible sides) is decided per call, as
    in the plain loop. tests/sim/test_estimate_oracle.py compares it with the plain loop."""

    def __init__(self, tree: BudgetTree) -> None:
        self.lines: dict[str, tuple[int, int, int]] = {}  # budget -> (instant, load then, slope)
        self.commits: dict[str, list[int]] = {}  # budget -> its sorted commitments last seen
        pairs = []
        for parent, kids in tree.children.items():
            if len(kids) < 2:
                continue
            for a in kids:
                for b in kids:
                    if b != a:
                        pairs.append((parent, a, b, tree.budgets[a].shares, tree.budgets[b].shares, a < b))
        self.pairs = pairs
        self.times: list[tuple[int | float, int | float]] = [(0, 0)] * len(pairs)  # (order, rule 2); inf: never

    def copy(self) -> OrderCrossings:
        other = copy.copy(self)
        other.lines = dict(self.lines)
        other.commits = dict(self.commits)
        other.times = list(self.times)
        return other

    def first(
        self,
        now: int,
        load0: Mapping[str, int],
        load1: Mapping[str, int],
        sorted_commits: Mapping[str, list[int]],
        active: set[str],
        order: bool,
        preemptible: set[str] | None,
    ) -> int | float:
        lines = self.lines
        moved: set[str] = set()
        for b, v in load0.items():
            slope = load1[b] - v
            line = lines.get(b)
            if line is None or line[2] != slope or line[1] + slope * (now - line[0]) != v:
                lines[b] = (now, v, slope)
                moved.add(b)
        commits = self.commits
        for b in commits.keys() | sorted_commits.keys():
            cs = sorted_commits.get(b, [])
            if commits.get(b, []) != cs:
                moved.add(b)
                commits[b] = cs
        best: int | float = NEVER
        times = self.times
        for k, (parent, a, b, sa, sb, a_first) in enumerate(self.pairs):
            t_order, t_rule2 = times[k]
            stale = a in moved or b in moved or t_order <= now or t_rule2 <= now
            if parent not in active or a not in active:
                if stale:
                    times[k] = (0, 0)  # recomputed once the pair counts again
                continue
            if stale:
                f0 = load0[b] * sa - load0[a] * sb
                slope = (load1[b] * sa - load1[a] * sb) - f0
                o, r = _pair_crossings(f0, slope, sb, commits.get(a), now)
                t_order = NEVER if o is None else o
                t_rule2 = NEVER if r is None else r
                times[k] = (t_order, t_rule2)
            if order and a_first and t_order < best and b in active:
                best = t_order
            if t_rule2 < best and (preemptible is None or b in preemptible):
                best = t_rule2
        return best


def startable(snap: Snapshot) -> list[Workload]:
    """The pending workloads the simulation may start. No running workload ends on its own here,
    so an unmet ``after`` list stays unmet: those workloads get no estimate (docs/jobs.md). An
    array group's ``%N`` cap is the policy's (``Snapshot.group_limits``): every member stays, and
    a member starts once a sibling's wall-time limit (or a preemption) frees a slot
    (:attr:`Forward.group_limits`). A workload on a hold of its own stays held (no release comes
    in the simulation): no estimate either."""
    return [w for w in snap.pending if not w.waiting and not w.hold]


def group_holding(
    snap: Snapshot, members: Mapping[str, str], attempts: Iterable[Attempt]
) -> dict[str, tuple[int, int]]:
    """``snap.group_limits`` with each group's holding counted afresh from ``attempts`` (a
    simulated state after ``snap``): the members holding GPUs at ``snap`` whose attempts are
    unknown (``members``: workload id → capped group, of the workloads known) keep counting, plus
    every attempt of a known member, stopping ones too (they hold GPUs until released, as
    scheduler/snapshot.py counts them). The plain reading of :attr:`Forward.group_limits`."""
    if not snap.group_limits:
        return {}
    known0: dict[str, int] = {}
    for a in snap.attempts:
        g = members.get(a.workload)
        if g is not None:
            known0[g] = known0.get(g, 0) + 1
    now: dict[str, int] = {}
    for a in attempts:
        g = members.get(a.workload)
        if g is not None:
            now[g] = now.get(g, 0) + 1
    return {g: (limit, held - known0.get(g, 0) + now.get(g, 0)) for g, (limit, held) in snap.group_limits.items()}


class _Instants:
    """Instants in a heap, each tied to an attempt object (or to nothing: always counts), with
    lazy deletion: an entry counts while its attempt is still that object in the simulation
    (attempts are immutable values: a stop replaces the object). :meth:`first_after` drops the
    entries at or before ``now`` for good, so one heap serves one simulation moving forward
    (a :meth:`Forward.clone` builds its own: :meth:`Forward._reindex`)."""

    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, str | None, object]] = []
        self.seq = 0

    def push(self, t: int, aid: str | None = None, obj: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, aid, obj))

    def first_after(self, now: int, attempts: Mapping[str, Attempt]) -> int | float:
        heap = self.heap
        while heap:
            t, _, aid, obj = heap[0]
            if t > now and (aid is None or attempts.get(aid) is obj):
                return t
            heapq.heappop(heap)
        return NEVER


class _Lists:
    """:class:`Forward`'s lists of its hosts, attempts and pending workloads (in its dicts'
    order), each built when a snapshot first asks for it after a change and handed to every
    snapshot until the next change (a confirming pass after stops sees the same pending
    workloads; an instant's hosts rarely change): a list is never changed once built, only
    dropped (None), so snapshots that hold it keep what they were given. A pass's views
    (:class:`PendingView`, ``AttemptsView``) copy it at C speed (a plain list) instead of
    walking the dict. The hosts are a tuple: the policy's standing, built from it, keeps that
    very tuple and knows the next snapshot's hosts the same without a walk (``Standing.fits``)."""

    __slots__ = ("hosts", "attempts", "pending")

    def __init__(self) -> None:
        self.hosts: tuple[Host, ...] | None = None
        self.attempts: list[Attempt] | None = None
        self.pending: list[Workload] | None = None

    def of_hosts(self, hosts: Mapping[str, Host]) -> tuple[Host, ...]:
        got = self.hosts
        if got is None:
            got = self.hosts = tuple(hosts.values())
        return got

    def of_attempts(self, attempts: Mapping[str, Attempt]) -> list[Attempt]:
        got = self.attempts
        if got is None:
            got = self.attempts = list(attempts.values())
        return got

    def of_pending(self, pending: Mapping[str, Workload]) -> list[Workload]:
        got = self.pending
        if got is None:
            got = self.pending = list(pending.values())
        return got


class PendingView(list[Workload]):
    """A pass's pending workloads with what arrived and left since the previous pass's snapshot
    of the same :class:`Forward` (``changes``, scheduler/policy/pending.py): the policy's
    :class:`~scheduler.policy.pending.PendingIndex` follows them in O(changes) instead of
    comparing the whole list (16.5 ms of a 58 ms pass at 19k pending)."""

    def __init__(self, items: Iterable[Workload], changes: PendingChanges) -> None:
        super().__init__(items)
        self.changes = changes


def _only_starts(dec: Decisions) -> bool:
    """``dec``, a pass the idle screen answered (``screen.starts_only``: ready nominees start on
    their nominations, nothing else), leaves a state whose next pass the screen answers with
    nothing: so the forward simulation runs no confirming pass after it (docs/estimates.md,
    "Ready starts confirm themselves"). The starts move no load (a nomination commits what its
    start commits: ``gpus × M`` from now), free no GPU (nominated GPUs are in no free list) and
    add no room (the new attempts are protected); every other nomination still waits, and the
    pending shapes only lose the nominees, so every test of the screen reads what it read. Under
    ``IncrementalScheduler(check=True)`` the pass runs anyway and :meth:`Forward.tick` raises
    unless the screen answered it with nothing (tests/sim/test_estimate_oracle.py)."""
    return bool(dec.starts) and not dec.stops and not dec.host_states


class Forward:
    """The simulated cluster: attempts, pending workloads, usage and nominations, moved from
    event to event by the real policy (:class:`IncrementalScheduler`). Simulated agents confirm
    starts at once and release a stopped attempt's GPUs ``grace`` seconds after the stop."""

    def __init__(
        self,
        snap: Snapshot,
        grace: int,
        running: Mapping[str, Workload] | None = None,
        limits: Mapping[str, int] | None = None,
        end: int | None = None,
        requeued: Iterable[str] = (),
    ) -> None:
        self.base = replace(snap, with_reasons=False)
        self.merge_from = (snap.now + snap.window if end is None else end) - snap.window
        """Released attempts that started at or after this instant stay wholly inside the window
        until the simulation's end: their usage is kept as one lump per budget (:meth:`_charge`)."""
        self.lumps: dict[str, UsageRecord] = {}
        self.now = snap.now
        self.grace = grace
        self.hosts: dict[str, Host] = {h.name: h for h in snap.hosts}
        self.drain_ats: list[int] = sorted({h.drain_at for h in snap.hosts if h.drain_at is not None})
        """The instants of the hosts' scheduled drains still ahead, earliest first (replaced, never
        changed: shared by clones): the policy refuses allocated starts before one whose protection
        would cross it (``Host.drain_at``), and at it the host drains (:meth:`_drain_due`), as the
        tick's ``services.apply_due_drains`` before its snapshot (docs/deploy.md "Scheduled drains")."""
        self.attempts: dict[str, Attempt] = {}
        self.lists: _Lists = _Lists()
        """The hosts', attempts' and pending workloads' lists the snapshots hand, kept while each
        is unchanged (every change of :attr:`hosts`, :attr:`attempts` or :attr:`pending` drops
        its list: :meth:`_put`, :meth:`_drop`, :meth:`_enqueue`, :meth:`apply`)."""
        """Changed only by :meth:`_put` and :meth:`_drop`, which keep the instants and the book."""
        self.touched: set[str] = set()
        """Attempt ids put or dropped since :attr:`book` last took them (:meth:`book_at`)."""
        self.alog = AttemptLog()
        """The attempt ids put or dropped since the last pass's snapshot (:class:`AttemptsView`);
        each :meth:`clone` starts a log of its own."""
        self.events: _Instants | None = _Instants()
        """Per attempt, the instants :meth:`next_event` reads of it: its release when stopping,
        else its protection's end; its wall-time limit while it runs. None: rebuilt on use
        (:meth:`_reindex`; a :meth:`clone`)."""
        self.breaks: _Instants | None = _Instants()
        """:func:`_breakpoints` of the attempts and usage records (the lumps aside); None with
        :attr:`events`."""
        self.window = snap.window
        self.releasing: dict[str, int] = {}
        """Attempt id → its ``release_at``, for the attempts that have one (:meth:`release_due`
        walks the attempts only when one is due)."""
        for a in snap.attempts:
            if a.stopping and a.release_at is None:
                a = replace(a, release_at=snap.now + grace)
            self._put(a)
        self.pending: dict[str, Workload] = {w.id: w for w in startable(snap)}
        self.log = PendingLog()
        """Every arrival in and departure from :attr:`pending` since the last pass's snapshot: the
        policy takes its pending index forward by them instead of comparing 20k workloads per
        pass (:class:`PendingView`). Each :meth:`clone` starts a log of its own."""
        self.commitments = pending_commitments(self.pending.values())
        """:func:`pending_commitments` of ``pending``, kept as it changes."""
        self.usage: list[UsageRecord] = []
        """The usage records (the lumps aside), as read by :meth:`snapshot` and the oracle."""
        self.usage_version = 0
        """Counts the records and lumps changed (:meth:`_record`, :meth:`_charge`)."""
        self.usage_memo: tuple[int, int, list[UsageRecord]] | None = None
        """The last :meth:`pass_usage`: its instant, :attr:`usage_version` then, the list (a
        pass at ``now`` and :meth:`next_event` read the same; a clone keeps it, and its own
        version from there)."""
        self.rbook: RecordBook | None = RecordBook(snap.window)
        """:attr:`usage`'s windowed usage by difference: each pass and :meth:`next_event` read
        one lump per budget instead of every record (:meth:`pass_usage`). None: rebuilt on use
        (a :meth:`clone`)."""
        for r in snap.usage:
            self._record(r)
        self.nominations = dict(snap.nominations)
        self.tree = BudgetTree(snap.budgets)
        self.caps: CapWatch | None = CapWatch(snap) if snap.caps else None
        """The budgets' caps followed through time (DESIGN.md §3.7; scheduler/sim/caps.py): at each
        instant every budget with a cap is marked capped by the rule (:meth:`_follow_caps`), and
        each instant at which that may change is an event (:meth:`next_event`). None without caps."""
        self.capped: frozenset[str] | None = None
        """The budgets :attr:`caps` marked capped at the last instant (None: not asked yet)."""
        self.cap_moved: dict[str, int] = {}
        """Budget → the first instant after the start at which the simulation marked it capped or
        no longer capped (:meth:`reservation_stands`)."""
        self.scheduler = IncrementalScheduler(waiting_nominations=True)
        """Its idle screen skips passes whose open nominations all wait, and answers those that
        only start nominees whose victims were released (``screen.starts_only``; docs/estimates.md
        "Passes whose open nominations wait", "Ready nominations"): the simulation reads no
        reservations of a pass after its first (which runs with reasons, never screened) beyond
        :attr:`quiet`, which is False while nominations are open and set only by a pass that
        decided nothing. A quote's shared simulation, whose probe compares
        reservations, runs without (:func:`quote_starts`)."""
        self.started: dict[str, int] = {}
        """Workload id → the instant the simulation first started it."""
        self.started_unfunded: set[str] = set()
        """The workloads of :attr:`started` whose first start was unfunded: allocated work the pass
        started unallocated while its budget's cap with ``on_cap=downgrade`` was reached (the
        pass's ``Start.unfunded``, which the tick writes on the attempt; DESIGN.md §3.7)."""
        self.first: Decisions | None = None
        self.quiet = False
        """The last pass decided nothing, reserved nothing, and no nomination is open: see
        :meth:`next_event`."""
        self.ready_confirms = True
        """After a pass the screen answered with ready starts, no confirming pass (:func:`_only_starts`);
        False: the plain loop, every pass run until one decides nothing (tests compare)."""
        self.known: dict[str, Workload] = {**(running or {}), **self.pending}
        """Workload id → the workload, for requeueing what the simulation preempts."""
        self.members: dict[str, str] = {
            k: w.group for k, w in self.known.items() if w.group is not None and w.group in snap.group_limits
        }
        """Workload id → its array group, for the known members of groups with a ``%N`` cap (a
        fact: clones may share it)."""
        self.group_limits: Mapping[str, tuple[int, int]] = snap.group_limits
        """``Snapshot.group_limits`` of the simulated state, handed to every pass: each group's
        members holding GPUs, counted by the starts and releases of its known members'
        attempts (:meth:`_hold`; the plain count: :func:`group_holding`). Never changed, only
        replaced, so snapshots that hold it keep what they were given."""
        self.requeue: set[str] = {a.id for a in snap.attempts if a.stopping} & set(requeued)
        """Attempts whose workloads return to pending on release: those the simulation stopped, and
        the snapshot's stopping attempts named ``requeued`` (a stop after which the workload runs
        again, DESIGN.md §4: preempted, drained, ...; est48), with their workloads in ``running``."""
        self.limits: Mapping[str, int] = limits or {}
        self.ends: dict[str, int] = {}
        """Attempt id → the instant its wall-time limit stops it (timeout: not requeued)."""
        self.book: LoadBook | None = None
        """The attempts' part of the loads for :meth:`next_event` (:meth:`book_at`)."""
        self.crossings = OrderCrossings(self.tree)
        """The sibling pairs' crossing instants kept for :func:`next_order_change`."""
        for a in self.attempts.values():
            limit = self.limits.get(a.workload)
            if limit is not None and not a.stopping:
                self._end_at(a, (a.started_at if a.started_at is not None else snap.now) + limit)
        if self.caps is not None:
            self._follow_caps()  # the budgets the first pass and the callers' tree read, by the rule

    def may_start(self, wid: str) -> bool:
        """False for a pending workload nothing in the simulation can start: its budget is
        unknown or on hold, or it is allocated and its budget capped with ``on_cap=hold`` by a cap
        the simulation does not follow (holds never change in it; a followed cap may lift:
        :attr:`caps`; queues.py). The simulation stops once every other wanted workload has
        started."""
        return _may_ever_start(self.tree, self.pending[wid], self.caps)

    def _follow_caps(self) -> None:
        """Every budget with a cap marked capped at ``now`` or not, by the rule (DESIGN.md §3.7):
        the budgets the passes read, and the tree, replaced when that changed."""
        if self.caps is None:
            return
        capped = self.caps.at(self.now)
        if capped != self.capped:
            for key in capped ^ self.capped if self.capped is not None else ():
                self.cap_moved.setdefault(key, self.now)
            budgets = with_capped(self.base.budgets, self.caps.caps, capped)
            self.base = replace(self.base, budgets=budgets)
            self.tree = BudgetTree(budgets)
            self.capped = capped

    def reservation_stands(self, wid: str, reserved_start: int | float) -> bool:
        """Whether a reservation of ``wid`` (the first pass's, or one the last tick stored)
        starting at ``reserved_start`` caps its estimate (:func:`cap_by_reservations`): not when
        a cap of its budget or one above it is reached or lifted in the simulation by its latest
        start, since the passes then start its work unfunded or hold it (DESIGN.md §3.7) rather
        than on the reservation made before."""
        if not self.cap_moved:
            return True
        w = self.known.get(wid)
        chain = self.tree.chain.get(w.budget, ()) if w is not None else ()
        latest = reservation_latest(reserved_start, self.grace)
        return all(self.cap_moved.get(b, NEVER) > latest for b in chain)

    def _put(self, a: Attempt) -> None:
        """``a`` in :attr:`attempts` (new, or replacing the attempt of its id), its instants kept."""
        self.attempts[a.id] = a
        self.lists.attempts = None
        self.touched.add(a.id)
        self.alog.touch(a.id)
        if a.release_at is not None:
            self.releasing[a.id] = a.release_at
        else:
            self.releasing.pop(a.id, None)
        if self.events is not None and self.breaks is not None:
            self._index(a, self.events, self.breaks)

    def _index(self, a: Attempt, events: _Instants, breaks: _Instants) -> None:
        if a.release_at is not None and a.stopping:
            events.push(a.release_at, a.id, a)
        elif a.allocated and a.started_at is not None:
            events.push(a.started_at + a.min_runtime, a.id, a)
        if a.allocated and a.started_at is not None:
            w = self.window
            for t in (a.started_at + w, a.started_at + a.min_runtime):
                breaks.push(t, a.id, a)
            if a.charged_until is not None:
                for t in (a.charged_until, a.charged_until + w):
                    breaks.push(t, a.id, a)

    def _reindex(self) -> tuple[_Instants, _Instants]:
        """:attr:`events` and :attr:`breaks` built afresh from the attempts, the wall-time limits
        of those not stopping and the usage records (after a :meth:`clone`: copying the heaps at
        every instant of a quote would cost more than rebuilding them the few times a clone is
        used)."""
        events, breaks = _Instants(), _Instants()
        for a in self.attempts.values():
            self._index(a, events, breaks)
        for aid, t in self.ends.items():
            held = self.attempts.get(aid)
            if held is not None and not held.stopping:
                events.push(t, aid, held)
        for r in self.usage:
            self._index_record(r, breaks)
        self.events, self.breaks = events, breaks
        return events, breaks

    def _hold(self, wid: str, delta: int) -> None:
        """A known member of a capped group starts holding GPUs (+1) or releases them (−1)."""
        g = self.members.get(wid)
        if g is not None:
            limit, held = self.group_limits[g]
            self.group_limits = {**self.group_limits, g: (limit, held + delta)}

    def _drop(self, aid: str) -> None:
        self._hold(self.attempts.pop(aid).workload, -1)
        self.lists.attempts = None
        self.releasing.pop(aid, None)
        self.touched.add(aid)
        self.alog.touch(aid)

    def _end_at(self, a: Attempt, t: int) -> None:
        """``a``'s wall-time limit stops it at ``t`` (while it is that object: not stopping)."""
        self.ends[a.id] = t
        if self.events is not None:
            self.events.push(t, a.id, a)

    def _record(self, r: UsageRecord) -> None:
        """A usage record kept (not a lump: those are read afresh), its breakpoints too."""
        self.usage.append(r)
        self.usage_version += 1
        if self.breaks is not None:
            self._index_record(r, self.breaks)
        if self.rbook is not None:
            self.rbook.add(r)

    def pass_usage(self, t: int) -> list[UsageRecord]:
        """The usage records as a pass at ``t`` (``now`` or later, never earlier than the last
        call) reads them: per budget one lump dated ``t`` holding the records' windowed usage at
        ``t`` (:class:`RecordBook`), then the simulation's own lumps. The policy reads usage only
        as ``windowed_usage`` at its snapshot's ``now`` (``pass_loads``), so the pass decides
        exactly what it decides with every record, as the trace simulator's snapshots do
        (``scheduler/sim/simulate.py: WindowUsage``)."""
        memo = self.usage_memo
        if memo is not None and memo[0] == t and memo[1] == self.usage_version:
            return memo[2]  # no record or lump since: the same list (never changed once built)
        book = self.rbook
        if book is None or book.now > t:
            book = self.rbook = RecordBook(self.window, self.usage)
        out = [UsageRecord(b, t, t, None, v) for b, v in sorted(book.at(t).items())]
        out.extend(self.lumps.values())
        self.usage_memo = (t, self.usage_version, out)
        return out

    def _index_record(self, r: UsageRecord, breaks: _Instants) -> None:
        w = self.window
        for t in (r.end + w,) if r.gpus is None else (r.start + w, r.end + w):
            breaks.push(t)

    def snapshot(self, *, for_pass: bool = False) -> Snapshot:
        """The simulated cluster at ``now``. ``for_pass``: the snapshot of the policy's next pass,
        carrying the pending workloads' changes since the previous one (:attr:`log`); every other
        snapshot (events, probes) leaves the log alone."""
        lists = self.lists
        if for_pass:
            return replace(
                self.base,
                now=self.now,
                hosts=lists.of_hosts(self.hosts),
                attempts=AttemptsView(lists.of_attempts(self.attempts), self.alog.cut(self.attempts)),
                pending=PendingView(lists.of_pending(self.pending), self.log.cut()),
                usage=self.pass_usage(self.now),
                nominations=self.nominations,
                group_limits=self.group_limits,
            )
        return replace(
            self.base,
            now=self.now,
            hosts=list(self.hosts.values()),
            attempts=list(self.attempts.values()),
            pending=list(self.pending.values()),
            usage=[*self.usage, *self.lumps.values()],
            nominations=self.nominations,
            group_limits=self.group_limits,
        )

    def _charge(self, a: Attempt, start: int, end: int) -> None:
        """Record the usage of ``a``, started at ``start``, released at ``self.now`` and charged until ``end``.

        An attempt that started at or after ``merge_from`` counts wholly, ``gpus × (end −
        start)``, at every instant from its release to the simulation's end (its start never
        leaves the window before then): it is added to its budget's lump, dated at its charged end
        (a lump counts while ``now − window < its date ≤ now``, DESIGN.md §3.1), which holds
        every such attempt's GPU-seconds. The loads are those of one interval record each, and
        the records the policy sums per pass stay one per budget however long the simulation."""
        if start >= self.merge_from and end > self.merge_from:
            old = self.lumps.get(a.budget)
            total = len(a.gpus) * (end - start) + (old.gpu_seconds if old is not None else 0)
            self.lumps[a.budget] = UsageRecord(a.budget, end, end, None, total)
            self.usage_version += 1
        else:
            self._record(UsageRecord(a.budget, start, end, gpus=len(a.gpus)))

    def _enqueue(self, w: Workload) -> None:
        """``w`` pending (replacing a workload of its id), told to :attr:`log` and :attr:`commitments`."""
        old = self.pending.get(w.id)
        if old is not None:
            _bump(self.commitments, old, -1)
            self.log.remove(old)
        self.pending[w.id] = w
        self.lists.pending = None
        self.log.add(w)
        _bump(self.commitments, w, 1)

    def release_due(self) -> None:
        now = self.now
        if not any(t <= now for t in self.releasing.values()):
            return
        for a in [a for a in self.attempts.values() if a.release_at is not None and a.release_at <= self.now]:
            self._drop(a.id)
            end = self.now if a.charged_until is None else min(self.now, a.charged_until)
            if a.allocated and a.started_at is not None and end > a.started_at:
                self._charge(a, a.started_at, end)
            if self.caps is not None:
                self.caps.closed(a, end)
            if a.id in self.requeue and a.workload in self.known:
                self._enqueue(self.known[a.workload])  # same id, original submission

    def apply(self, dec: Decisions) -> None:
        for stop in dec.stops:
            a = self.attempts.get(stop.attempt)
            if a is not None and not a.stopping:
                self._put(replace(a, stopping=True, release_at=self.now + self.grace))
                self.requeue.add(a.id)
        self.nominations = {k: v for k, v in dec.nominations.items() if k in self.pending}
        for st in dec.starts:
            w = self.pending.pop(st.workload, None)
            if w is None:
                continue
            self.lists.pending = None
            self.log.remove(w)
            _bump(self.commitments, w, -1)
            self.nominations.pop(w.id, None)
            aid = f"forward:{w.id}:{self.now}"
            a = Attempt(
                aid, w.id, w.budget, st.gpus, st.allocated, w.min_runtime, self.now, cpus=w.cpus, memory=w.memory
            )
            self._put(a)
            self._hold(w.id, 1)
            if self.caps is not None:
                self.caps.opened(a)
            if w.id not in self.started:
                self.started[w.id] = self.now
                if st.unfunded:
                    self.started_unfunded.add(w.id)
            limit = self.limits.get(w.id)
            if limit is not None:
                self._end_at(a, self.now + limit)
        for name, state in dec.host_states.items():
            self.hosts[name] = replace(self.hosts[name], state=state, drain_now=False)
            self.lists.hosts = None
        if self.grace == 0:
            self.release_due()

    def time_out(self) -> None:
        """Stop every attempt whose wall-time limit has come (released a grace later, not requeued)."""
        for aid in [aid for aid, t in self.ends.items() if t <= self.now]:
            del self.ends[aid]
            a = self.attempts.get(aid)
            if a is not None and not a.stopping:
                self._put(replace(a, stopping=True, release_at=self.now + self.grace))
                self.requeue.discard(aid)

    def tick(self, max_passes: int = 50, probe: Callable[[Snapshot, Decisions], bool] | None = None) -> bool:
        """Passes at ``now`` until one decides nothing new. ``probe`` (quotes) sees each pass's
        snapshot and decisions before they are applied; when it answers True the instant is
        abandoned half done (the caller restarts it from a :meth:`clone`) and tick returns False."""
        if self.drain_ats and self.drain_ats[0] <= self.now:
            self._drain_due()
        if self.ends:
            self.time_out()
        self.release_due()
        if self.caps is not None:
            self._follow_caps()
        policy = self.scheduler
        check = getattr(policy, "check", False)
        after_ready = False  # the last pass was the screen's ready starts (under check: verify the next)
        for _ in range(max_passes):
            snap = self.snapshot(for_pass=True)
            if self.first is None:
                # The first pass in full (the idle screen would skip it): its reservations cap
                # the estimates (§3.8).
                snap = replace(snap, with_reasons=True)
            screened = getattr(policy, "screened", None)
            dec = policy(snap)
            if probe is not None and probe(snap, dec):
                return False
            if after_ready and (policy.screened == screened or dec.changed or dec.reservations):
                raise AssertionError(f"the pass after ready starts at {self.now} was not screened idle: {dec}")
            if self.first is None:
                self.first = dec
            self.apply(dec)
            if not dec.changed:
                self.quiet = not dec.reservations and not self.nominations
                return True
            if (
                self.ready_confirms
                and probe is None
                and screened is not None
                and policy.screened > screened
                and _only_starts(dec)
            ):
                # Ready starts answered by the screen: the next pass is screened idle (:func:`_only_starts`).
                if not check:
                    self.quiet = not self.nominations
                    return True
                after_ready = True
        self.quiet = False
        return True

    def _drain_due(self) -> None:
        """The hosts whose scheduled drain has come drain now (a drain: protections end; the
        estimates do not tell a scheduled drain now from it), their schedules cleared."""
        now = self.now
        for name, h in list(self.hosts.items()):
            if h.drain_at is not None and h.drain_at <= now:
                state = HostState.DRAINING if h.state in (HostState.ACTIVE, HostState.CORDONED) else h.state
                self.hosts[name] = replace(h, state=state, drain_at=None)
                self.lists.hosts = None
        self.drain_ats = [t for t in self.drain_ats if t > now]

    def book_at(self) -> LoadBook:
        """The open attempts' part of the loads (:class:`LoadBook`) at ``now``, synced by
        difference with :attr:`attempts` (an attempt replaced, e.g. stopping, is counted anew)."""
        book = self.book
        if book is None or book.now > self.now:
            book = self.book = LoadBook(self.base.window, self.now)
            touched: Iterable[str] = self.attempts
        else:
            book.advance(self.now)
            touched = self.touched
        counted = book.attempts
        for aid in touched:
            a = self.attempts.get(aid)
            rec = counted.get(aid)
            if rec is not None and rec[0] is not a:
                book.remove(aid)
                rec = None
            if rec is None and a is not None:
                book.add(a)
        self.touched = set()
        return book

    def clone(self) -> Forward:
        """A copy at the same instant that moves on alone (the policy's memory is shared: it is a
        cache, exact whatever sequence of snapshots it sees)."""
        other = copy.copy(self)
        other.lists = copy.copy(self.lists)  # the lists themselves are never changed, only dropped
        other.hosts = dict(self.hosts)
        other.attempts = dict(self.attempts)
        other.releasing = dict(self.releasing)
        other.pending = dict(self.pending)
        other.log = PendingLog()  # a source of its own: the policy's index compares once, then follows it
        other.alog = AttemptLog()  # the same for the policy's standing
        other.commitments = {k: dict(v) for k, v in self.commitments.items()}
        other.usage = list(self.usage)
        other.rbook = None  # rebuilt on use: a book is never moved back in time
        other.lumps = dict(self.lumps)
        other.nominations = dict(self.nominations)
        other.started = dict(self.started)
        other.started_unfunded = set(self.started_unfunded)
        other.known = dict(self.known)
        other.requeue = set(self.requeue)
        other.ends = dict(self.ends)
        other.book = None  # rebuilt on use: a book is never moved back in time
        other.touched = set()
        other.events = other.breaks = None  # rebuilt on use (_reindex)
        other.crossings = self.crossings.copy()
        other.cap_moved = dict(self.cap_moved)
        if self.caps is not None:
            other.caps = self.caps.copy()
        return other

    def next_event(self, end: int) -> int:
        """The next instant at which a pass may decide something new (at most ``end``)."""
        now, attempts = self.now, self.attempts
        # Releases, protection ends and wall-time limits: one heap (:attr:`events`), an entry per
        # attempt object. A limit's entry counts while its attempt is the object it was set for
        # (a stop replaces it): :func:`tests.sim.estimate_oracle.next_event_walk` walks them all.
        if self.events is None or self.breaks is None:
            events, breaks = self._reindex()
        else:
            events, breaks = self.events, self.breaks
        best = min(end, events.first_after(now, attempts))
        for t in self.drain_ats:  # a scheduled drain to come: the host takes no new work from then
            if t > now:
                best = min(best, t)
                break
        if self.caps is not None:
            # A cap reached or lifted at an instant of its own (usage entering or leaving its
            # period): the passes then start allocated, unfunded or held work differently.
            t_cap = self.caps.next_change(end)
            if t_cap < best:
                best = t_cap
        if self.commitments:  # pending work, or a quote's hypothetical workloads (quote_starts)
            piece_end = breaks.first_after(now, attempts)
            w = self.window
            for r in self.lumps.values():
                if now < r.end + w < piece_end:
                    piece_end = r.end + w
            t2 = next_order_change(
                self.event_snapshot(),
                self.tree,
                order=not self.quiet,
                commitments=self.commitments,
                book=self.book_at(),
                piece_end=piece_end,
                kept=self.crossings,
                usage1=self.pass_usage(now + 1),
            )
            if t2 < best:
                best = t2
        return int(best)

    def event_snapshot(self) -> Snapshot:
        """:meth:`snapshot` as :func:`next_order_change` reads it with kept commitments: of the
        pending workloads only the nominated ones, the usage as a pass at ``now`` reads it
        (:meth:`pass_usage`)."""
        pending, lists = self.pending, self.lists
        return replace(
            self.base,
            now=self.now,
            hosts=lists.of_hosts(self.hosts),
            attempts=lists.of_attempts(self.attempts),
            pending=[pending[k] for k in self.nominations if k in pending],
            usage=self.pass_usage(self.now),
            nominations=self.nominations,
            group_limits=self.group_limits,
        )


def reservation_latest(reserved_start: int | float, grace: int) -> int:
    """The latest instant a workload holding a reservation starting at ``reserved_start`` starts:
    its room is made at that instant and counts from the release, a grace later (§3.5)."""
    return int(reserved_start) + grace


def cap_by_reservations(found: dict[str, int], reserved: Mapping[str, int | float], grace: int = 0) -> dict[str, int]:
    """``found`` with every workload holding a reservation estimated no later than its
    reservation's start plus ``grace`` (§3.8). A reservation's start is the instant its room is
    made (§3.5: its victims' protection ends, or an attempt already stopping is released); room
    made by a stop counts from the release, a grace later (§3.5), so the workload starts up to a
    grace after it (docs/estimates.md). The simulation's own start is exact: the cap only bites
    where the simulation starts the workload later than that."""
    out = dict(found)
    for wid, t in reserved.items():
        at = reservation_latest(t, grace)
        if wid not in out or at < out[wid]:
            out[wid] = at
    return out


YOUNG_COLLECTIONS_AFTER = 20_000
"""The collector's first threshold while :func:`forward` runs (Python's default is 700): at the
bench state 505 young collections, 0.5–0.8 s of ≈ 13 s, walking what each pass builds; at this
threshold 11, 0.1 s (docs/benchmarks/estimates-rounds.md, "Eleventh pass"). Reference counting
still frees what dies; only cycles wait longer."""


@contextmanager
def fewer_young_collections() -> Iterator[None]:
    """The collector's first threshold raised to :data:`YOUNG_COLLECTIONS_AFTER` for the block,
    where it is lower. Process-wide: a thread entering while another raised it leaves it to that
    one, which puts back what it found unless the threshold was changed meanwhile, so it is never
    left raised by this."""
    found = gc.get_threshold()
    mine = found[0] < YOUNG_COLLECTIONS_AFTER
    if mine:
        gc.set_threshold(YOUNG_COLLECTIONS_AFTER, *found[1:])
    try:
        yield
    finally:
        if mine and gc.get_threshold()[0] == YOUNG_COLLECTIONS_AFTER:
            gc.set_threshold(*found)


def estimate_starts(
    snap: Snapshot,
    *,
    grace: int = 30,
    horizon: int | None = None,
    budget_s: float = 20.0,
    only: Iterable[str] | None = None,
    running: Mapping[str, Workload] | None = None,
    limits: Mapping[str, int] | None = None,
    requeued: Iterable[str] = (),
) -> dict[str, int]:
    """Pending workload id → estimated start (epoch seconds) for those that start within ``horizon``.

    One forward simulation of ``snap`` (pure: reads only ``snap``). ``grace`` is the
    stop-to-release time of simulated stops (seconds); ``horizon`` defaults to the window.
    ``budget_s`` bounds the CPU time spent (this thread's): workloads not started when it runs
    out get no estimate. ``only`` stops the simulation once these workloads have started (quotes).
    Workloads holding a reservation in the first pass are capped by its start plus ``grace``. ``running``: the
    workloads of the snapshot's attempts (id → workload), requeued when the simulation preempts them.
    ``limits``: wall-time limits (workload id → seconds) at which the simulation stops attempts.
    ``requeued``: the snapshot's stopping attempts whose workloads run again on their release
    (requeued there with their original submission, as the live system does; their workloads in
    ``running``).
    """
    return forward(
        snap,
        grace=grace,
        horizon=horizon,
        budget_s=budget_s,
        only=only,
        running=running,
        limits=limits,
        requeued=requeued,
    )[0]


def forward(
    snap: Snapshot,
    *,
    grace: int = 30,
    horizon: int | None = None,
    budget_s: float = 20.0,
    only: Iterable[str] | None = None,
    running: Mapping[str, Workload] | None = None,
    limits: Mapping[str, int] | None = None,
    stored: Mapping[str, int | float] | None = None,
    requeued: Iterable[str] = (),
) -> tuple[dict[str, int], int]:
    """:func:`estimate_starts` and the simulated instant it reached: the horizon's end when the
    search was complete, earlier when ``budget_s`` ran out (a workload not found may then still
    start before the horizon). ``stored``: the reservations the last tick stored (workload id →
    reserved start), which cap the estimates as the first pass's do (:func:`cap_by_reservations`;
    neither where a cap moves first: :meth:`Forward.reservation_stands`)."""
    found = forward_found(
        snap,
        grace=grace,
        horizon=horizon,
        budget_s=budget_s,
        only=only,
        running=running,
        limits=limits,
        stored=stored,
        requeued=requeued,
    )
    return found.starts, found.reached


class Found(NamedTuple):
    """:func:`forward_found`'s answer."""

    starts: dict[str, int]
    """Pending workload id → estimated start (as :func:`estimate_starts`)."""
    reached: int
    """The simulated instant the search reached (the horizon's end when complete)."""
    unfunded: frozenset[str]
    """Those of ``starts`` whose start is the simulation's first start of them and was unfunded
    (:attr:`Forward.started_unfunded`, as :attr:`QuoteStart.unfunded`): one a reservation brings
    earlier is funded."""


def forward_found(
    snap: Snapshot,
    *,
    grace: int = 30,
    horizon: int | None = None,
    budget_s: float = 20.0,
    only: Iterable[str] | None = None,
    running: Mapping[str, Workload] | None = None,
    limits: Mapping[str, int] | None = None,
    stored: Mapping[str, int | float] | None = None,
    requeued: Iterable[str] = (),
) -> Found:
    """:func:`forward`, with which of its starts are unfunded (:class:`Found`)."""
    with fewer_young_collections():
        return _forward(snap, grace, horizon, budget_s, only, running, limits, stored, requeued)


def _forward(
    snap: Snapshot,
    grace: int,
    horizon: int | None,
    budget_s: float,
    only: Iterable[str] | None,
    running: Mapping[str, Workload] | None,
    limits: Mapping[str, int] | None,
    stored: Mapping[str, int | float] | None,
    requeued: Iterable[str] = (),
) -> Found:
    horizon = snap.window if horizon is None else horizon
    end = snap.now + horizon
    fw = Forward(snap, grace, running, limits, end, requeued)
    wanted = {w for w in (fw.pending if only is None else set(only) & set(fw.pending)) if fw.may_start(w)}
    # CPU seconds of this thread, not wall-clock: on a loaded machine (or beside the ticks of the
    # embedded mode) a wall-clock budget would cut the simulation short at random.
    deadline = time.thread_time() + budget_s
    fw.tick()
    while not wanted <= fw.started.keys() and fw.now < end and time.thread_time() < deadline:
        fw.now = fw.next_event(end)
        fw.tick()
    found = {wid: t for wid, t in fw.started.items() if wid in wanted and t <= end}
    reserved = fw.first.reserved_start if fw.first is not None else {}
    reached = end if wanted <= fw.started.keys() else fw.now
    found = cap_by_reservations(found, {k: v for k, v in (stored or {}).items() if fw.reservation_stands(k, v)}, grace)
    kept = {k: v for k, v in reserved.items() if k in wanted and fw.reservation_stands(k, v)}
    starts = cap_by_reservations(found, kept, grace)
    unfunded = frozenset(k for k, t in starts.items() if k in fw.started_unfunded and t == fw.started.get(k))
    return Found(starts, reached, unfunded)


QUOTE_BUDGET_S = 0.25
"""CPU seconds one quote (all its minimum runtimes, from :func:`quote`'s call) may take, its
last pass aside (docs/estimates.md "Quotes": the target is 300 ms): a variant not started by
then says how far its search got (``Quote.searched_until``)."""

QUOTE_ID = "quote"
"""The id of the hypothetical workload a quote adds (never a real workload's id: those are digits)."""


@dataclass(frozen=True)
class Quote:
    """One line of a quote (§3.8): for minimum runtime ``min_runtime`` (seconds), the estimated
    start (epoch seconds; None: none within one window), the GPU-seconds its protected part
    would charge (``gpus × M``) and the budget's ratio ``r = (U + C) / E`` once it is admitted
    (its commitment added). Started ``unfunded`` (at a downgrade cap, DESIGN.md §3.7) it is
    unallocated work: it charges 0 and adds no commitment."""

    min_runtime: int
    start: int | None
    charge_gpu_seconds: int
    ratio_after: float
    searched_until: int
    """The simulated instant the search reached: with no ``start``, none before it; before the
    window's end only when the time budget ran out."""
    unfunded: bool = False
    """The simulation starts it unfunded at ``start`` (:attr:`QuoteStart.unfunded`)."""


class QuoteStart(NamedTuple):
    """One variant's answer of :func:`quote_starts`."""

    start: int | None
    """Its estimate (None: no start found)."""
    reached: int
    """The simulated instant the search reached (the horizon's end when complete)."""
    unfunded: bool = False
    """The simulation's first start of it, which ``start`` is, was unfunded (:attr:`Forward.started_unfunded`).
    A start its first pass's reservation brings earlier is funded: a reservation is made for work of the
    allocated pass, and stands only where no cap of its budget moves by then (:meth:`Forward.reservation_stands`)."""


def protected_charge(w: Workload, unfunded: bool) -> int:
    """The GPU-seconds ``w``'s protected part would charge its budget (DESIGN.md §3.8: ``gpus × M``);
    0 where it starts unfunded at its budget's downgrade cap (§3.7: unfunded work is unallocated
    work). A quote line's charge and commitment (:func:`quote`), and each member's of an array
    (:func:`scheduler.array_quote.array_quote`)."""
    return 0 if unfunded else w.gpus * w.min_runtime


def quote(
    snap: Snapshot,
    workload: Workload,
    minimum_runtimes: Iterable[int],
    *,
    grace: int = 30,
    budget_s: float = QUOTE_BUDGET_S,
    running: Mapping[str, Workload] | None = None,
    limits: Mapping[str, int] | None = None,
    horizon: int | None = None,
    waits: bool = False,
    requeued: Iterable[str] = (),
) -> list[Quote]:
    """Quotes for ``workload`` (not submitted: its ``id``, ``submitted_at`` and ``seq`` are
    replaced) under each of ``minimum_runtimes``: the start the forward simulation of ``snap`` with
    the workload added gives it (:func:`quote_starts`: the variants share the simulation until
    each can first act), searched for at most ``budget_s`` CPU seconds in all (then
    ``searched_until`` says how far each got). ``waits``: the workload waits on ``after`` work
    not ended, so no line has a start, and none is known to be unfunded: each is priced funded
    (what it charges if it starts funded; docs/estimates.md "Quotes"), and no simulation runs
    (``searched_until``: the horizon's end). Pure: nothing is written."""
    from scheduler.policy.pass_state import PassState

    deadline = time.thread_time() + budget_s
    seq = max((w.seq for w in snap.pending), default=0) + 1
    standing = PassState(snap)
    variants = [
        replace(workload, id=QUOTE_ID, min_runtime=m, submitted_at=snap.now, seq=seq)
        for m in dict.fromkeys(minimum_runtimes)
    ]
    if waits:  # no start to search for: no simulation (cli46b: one ran, its starts thrown away), none unfunded
        end = snap.now + (snap.window if horizon is None else horizon)
        starts = [QuoteStart(None, end)] * len(variants)
    else:
        left = deadline - time.thread_time()
        starts = quote_starts(
            snap,
            variants,
            grace=grace,
            horizon=horizon,
            budget_s=left,
            running=running,
            limits=limits,
            requeued=requeued,
        )
    out = []
    for w, found in zip(variants, starts, strict=True):
        commit = protected_charge(w, found.unfunded)
        ratio = standing.display_ratio(w.budget, commit) if w.budget in standing.tree.budgets else 0.0
        out.append(Quote(w.min_runtime, found.start, commit, ratio, found.reached, found.unfunded))
    return out


def quote_starts(
    snap: Snapshot,
    variants: Sequence[Workload],
    *,
    grace: int = 30,
    horizon: int | None = None,
    budget_s: float = QUOTE_BUDGET_S,
    running: Mapping[str, Workload] | None = None,
    limits: Mapping[str, int] | None = None,
    requeued: Iterable[str] = (),
) -> list[QuoteStart]:
    """For each of ``variants`` (workloads not in ``snap``, all of one id, differing in ``M``):
    its estimate in the forward simulation of ``snap`` with it added (as :func:`forward` with
    ``only``: the start, capped by its first pass's reservation), the instant the search
    reached (the horizon's end when complete), and whether it starts unfunded (:class:`QuoteStart`).
    ``budget_s``: CPU seconds for all of them.

    Exact, and shared: until a variant acts in a pass (is placed, preempts or reserves), that
    pass decides with it what it decides without it, so one simulation without the variants
    serves all of them. At each pass a variant that :func:`may_act` (a cheap necessary
    condition on the pass's snapshot and decisions) is tried (:class:`_Probe`); the first instant
    at which one acts is replayed from its start with that variant added, which then goes on
    alone (:func:`_finish`). Their commitments count in the shared simulation's events (rule-2
    answers about them change at instants of their own). tests/sim/test_estimate_oracle.py
    compares each line with the every-second oracle and with the plain :func:`forward`.
    """
    horizon = snap.window if horizon is None else horizon
    end = snap.now + horizon
    deadline = time.thread_time() + budget_s
    shared = Forward(snap, grace, running, limits, end, requeued)
    shared.scheduler = IncrementalScheduler()  # every field of each pass: the probe compares reservations
    tree = shared.tree
    out: dict[int, QuoteStart] = {}
    waiting: list[int] = []
    for i, w in enumerate(variants):
        if not _may_ever_start(tree, w, shared.caps):
            out[i] = QuoteStart(None, end)
        elif tree.capped_by(w.budget) is not None:  # a capped budget's work may run unallocated:
            out[i] = _finish(_fork(shared, w), w, end, deadline)  # no sharing, the plain search
        else:
            waiting.append(i)
            _bump(shared.commitments, w, 1)
    probe = _Probe(tree, variants)
    probe.waiting = waiting
    while waiting:
        saved = shared.clone()
        if shared.tick(probe=probe):
            if shared.now >= end or time.thread_time() >= deadline:
                break
            shared.now = shared.next_event(end)
            continue
        for i in probe.acting:
            waiting.remove(i)
            _bump(saved.commitments, variants[i], -1)
            out[i] = _finish(_fork(saved, variants[i]), variants[i], end, deadline)
        shared = saved  # the same instant again, for the variants still waiting
    reached = end if shared.now >= end else shared.now
    for i in waiting:
        out[i] = QuoteStart(None, reached)
    return [out[i] for i in range(len(variants))]


class _Probe:
    """:meth:`Forward.tick`'s probe for :func:`quote_starts`: the variants that act in a pass.

    A variant that :func:`may_act` (the cheap necessary condition) is tried: the same pass with
    it added (its own :class:`IncrementalScheduler`); it acts unless that pass decides exactly
    what the shared one did (:func:`same_decisions`)."""

    def __init__(self, tree: BudgetTree, variants: Sequence[Workload]) -> None:
        self.tree = tree
        self.variants = variants
        self.trials = [IncrementalScheduler() for _ in variants]
        self.waiting: list[int] = list(range(len(variants)))
        self.acting: list[int] = []
        self.tried = 0

    def __call__(self, snap: Snapshot, dec: Decisions) -> bool:
        self.acting = [i for i in self.waiting if self._acts(i, snap, dec)]
        return bool(self.acting)

    def _acts(self, i: int, snap: Snapshot, dec: Decisions) -> bool:
        w = self.variants[i]
        if not may_act(snap, dec, self.tree, w):
            return False
        self.tried += 1
        return not same_decisions(self.trials[i](replace(snap, pending=[*snap.pending, w])), dec)


def same_decisions(a: Decisions, b: Decisions) -> bool:
    """The two passes decide the same (starts, stops, nominations, reservations, host states;
    reasons aside): applied, they leave the same state."""
    return (
        a.starts == b.starts
        and a.stops == b.stops
        and a.nominations == b.nominations
        and a.reservations == b.reservations
        and a.reserved_start == b.reserved_start
        and a.host_states == b.host_states
    )


def _may_ever_start(tree: BudgetTree, w: Workload, caps: CapWatch | None) -> bool:
    """:meth:`Forward.may_start` for ``w``, pending or not: False when its budget is unknown or
    held, or it is allocated and capped with ``on_cap=hold`` and no budget above it (itself
    included) has a cap the simulation follows (``caps``) that may lift (a cap of 0 never does)."""
    if w.budget not in tree.budgets or tree.held(w.budget):
        return False
    capper = tree.capped_by(w.budget) if w.min_runtime > 0 else None
    if capper is None or capper.on_cap != OnCap.HOLD:
        return True
    return caps is not None and caps.may_lift(w.budget)


def _fork(fw: Forward, w: Workload) -> Forward:
    """A copy of ``fw`` with ``w`` pending (and requeued as itself when preempted)."""
    other = fw.clone()
    other.scheduler = IncrementalScheduler(waiting_nominations=True)  # alone: no probe reads its reservations
    other.pending[w.id] = w
    other.lists = _Lists()
    other.log.add(w)
    other.known[w.id] = w
    if w.group is not None and w.group in other.group_limits:
        other.members = {**other.members, w.id: w.group}
    other.commitments = pending_commitments(other.pending.values())
    return other


def _finish(fw: Forward, w: Workload, end: int, deadline: float) -> QuoteStart:
    """Move ``fw`` on from its instant (not yet simulated) until ``w`` starts, the horizon's
    ``end`` or the CPU ``deadline``: ``w``'s start capped by its first pass's reservation, and
    the instant reached (as :func:`forward`), and whether the simulation started it unfunded then."""
    fw.tick()
    while w.id not in fw.started and fw.now < end and time.thread_time() < deadline:
        fw.now = fw.next_event(end)
        fw.tick()
    start = fw.started.get(w.id)
    found = {w.id: start} if start is not None and start <= end else {}
    reserved = fw.first.reserved_start if fw.first is not None else {}
    kept = {k: v for k, v in reserved.items() if k == w.id and fw.reservation_stands(k, v)}
    found = cap_by_reservations(found, kept, fw.grace)
    at = found.get(w.id)
    unfunded = at is not None and at == start and w.id in fw.started_unfunded
    return QuoteStart(at, end if w.id in fw.started else fw.now, unfunded)


def may_act(snap: Snapshot, dec: Decisions, tree: BudgetTree, w: Workload) -> bool:
    """False only when ``w``, added to ``snap``'s pending workloads, provably changes nothing in
    the pass on ``snap`` (whose decisions without it are ``dec``): it is neither placed, nor
    preempts, nor reserves. A necessary condition for any of these (DESIGN.md §3.3–3.6; within a
    pass GPUs are only taken, never freed, and a nomination is given up only when its workload
    starts elsewhere, on free GPUs, or no longer fits its GPUs):

    - placed: some active host of its model has ``gpus`` free GPUs nominated for nobody (a gang:
      that many in all), or free nominated GPUs that could return to everyone (other free GPUs
      exist, or the nomination is of a workload that left, that waits or is an array member (its
      nomination is dropped when it waits: its ``after`` list or its group's ``%N`` cap), of
      another size, or on a host with a drain scheduled);
    - (allocated ``w`` only) preempts or reserves: on an active host of its model, an unallocated
      attempt; a stopping attempt with GPUs nominated for nobody (or, as above, that may return);
      an attempt the pass stops (``dec``) whose GPUs it does not all nominate; or allocated work of
      another budget that rule 2 may allow ``w`` at its turn (:func:`_rule2_may_allow`).
    """
    hosts = {h.name: h for h in snap.hosts if h.model == w.model and h.state == HostState.ACTIVE}
    if not hosts:
        return False
    pending = {p.id: p for p in snap.pending}
    kept: set[tuple[str, int]] = set()  # GPUs nominated for a pending workload of that size
    loose = False  # a nomination the pass may give up at once
    # a nomination on a host with a drain scheduled may be given up when its victims have left
    # (the drain refuses its nominee then: docs/deploy.md "Scheduled drains")
    scheduled = {h.name for h in snap.hosts if h.drain_at is not None}
    for wid, gpus in snap.nominations.items():
        nominee = pending.get(wid)
        # A nominee that waits (its ``after`` list, its own hold, or its array group at its %N cap) loses its
        # nomination at its turn (core._waits): its GPUs may return to everyone in this pass. Since
        # est31 capped members stay pending in the simulation (try32: seed 802386895).
        if (
            nominee is not None
            and len(gpus) == nominee.gpus
            and not nominee.waiting
            and not nominee.hold
            and nominee.group is None
            and not (scheduled and any(g[0] in scheduled for g in gpus))
        ):
            kept.update(gpus)
        elif gpus:
            loose = True
    free = {n: {i for i, health in h.gpu_health.items() if health != GpuHealth.UNHEALTHY} for n, h in hosts.items()}
    on_model = []
    for a in snap.attempts:
        mine = False
        for host, index in a.gpus:
            if host in free:
                free[host].discard(index)
                mine = True
        if mine:
            on_model.append(a)
    nominated_free = False
    for host, idle in free.items():
        held = {i for i in idle if (host, i) in kept}
        if held:
            nominated_free = True
            idle -= held
    counts = [len(v) for v in free.values()]
    returning = loose or (nominated_free and any(counts))
    largest = max(len(h.gpu_health) for h in hosts.values())
    if returning or (max(counts) if w.gpus <= largest else sum(counts)) >= w.gpus:
        return True
    if not w.allocated:
        return False
    any_free = any(counts)
    stopped = {st.attempt for st in dec.stops}
    nominated_now = {g for gpus in dec.nominations.values() for g in gpus}
    others: set[str] = set()
    for a in on_model:
        if a.stopping:
            if any_free or not all(g in kept for g in a.gpus):
                return True
        elif not a.allocated or (a.id in stopped and not all(g in nominated_now for g in a.gpus)):
            return True
        elif a.budget != w.budget:
            others.add(a.budget)
    return bool(others) and _rule2_may_allow(snap, dec, tree, w, others)


def _rule2_may_allow(snap: Snapshot, dec: Decisions, tree: BudgetTree, w: Workload, others: set[str]) -> bool:
    """Rule 2 (§3.4) may allow ``w`` some budget of ``others`` at its turn in the pass on ``snap``
    (:func:`may_act`): ``(load_A − fall_A + c)·s_B < (load_B + rise_B)·s_A``. Until ``w``'s turn
    the pass decides what the pass without it decided (``dec``), and within a pass a load only
    rises by what it admits (its starts and new nominations commit ``gpus × M``) and only falls
    by what it stops (their commitment left) or un-nominates."""
    pending = {p.id: p for p in snap.pending}
    noms = {k: v for k, v in snap.nominations.items() if k in pending and v}
    _, load = pass_loads(snap, tree, noms, pending)
    rise: dict[str, int] = {}
    fall: dict[str, int] = {}

    def add(into: dict[str, int], budget: str, amount: int) -> None:
        if amount:
            for b in tree.chain.get(budget, ()):
                into[b] = into.get(b, 0) + amount

    for st in dec.starts:
        p = pending.get(st.workload)
        if p is not None and st.allocated:
            add(rise, p.budget, p.gpus * p.min_runtime)
    for wid in dec.nominations.keys() - noms.keys():
        p = pending.get(wid)
        if p is not None and p.allocated:
            add(rise, p.budget, p.gpus * p.min_runtime)
    for wid in noms.keys() - dec.nominations.keys():
        p = pending[wid]
        if p.allocated:
            add(fall, p.budget, p.gpus * p.min_runtime)
    if dec.stops:
        attempts = {a.id: a for a in snap.attempts}
        for stop in dec.stops:
            a = attempts.get(stop.attempt)
            if a is not None and a.allocated and not a.stopping:
                began = snap.now if a.started_at is None else a.started_at
                add(fall, a.budget, len(a.gpus) * max(0, began + a.min_runtime - snap.now))
    c = w.gpus * w.min_runtime
    for v in others:
        split = tree.split(w.budget, v) if v in tree.budgets else None
        if split is None:
            continue
        a_side, b_side = split
        sa, sb = tree.budgets[a_side].shares, tree.budgets[b_side].shares
        low_a = load.get(a_side, 0) - fall.get(a_side, 0)
        high_b = load.get(b_side, 0) + rise.get(b_side, 0)
        if (low_a + c) * sb < high_b * sa:
            return True
    return False
