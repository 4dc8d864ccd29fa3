"""The cluster between passes: what a pass builds from a snapshot, kept and brought up to date.

A pass (:mod:`scheduler.policy.core`) needs GPU ownership, free lists with their best-fit
index, nominations, and per-host, per-budget GPU counts of allocated work. Built from
scratch that is O(GPUs + attempts) per pass, the largest single cost of a simulated trace
(docs/policy.md "How it stays fast"). :class:`Standing` holds those structures;
:meth:`Standing.sync` brings them from the previous pass's end state to a new snapshot by
difference: attempts that left or changed, nominations that changed, protections that
ended. The result is the same as a fresh build (``Standing(snapshot)``): same free lists,
owners, counts and per-host attempt order;
:func:`~scheduler.policy.standing_check.standing_differences` checks it, and the policy tests run
every pass both ways.

:class:`~scheduler.policy.incremental.IncrementalScheduler` is :func:`scheduler.policy.schedule` with a memory: a
callable ``Snapshot -> Decisions`` giving exactly the decisions of ``schedule`` on every
snapshot, whatever the sequence (a snapshot that does not follow from the last one only
costs a bigger difference; other hosts, another window or time going back cost a fresh
build; a malformed snapshot — one GPU held by two attempts, one attempt id twice, one GPU
nominated twice — is decided by a fresh build and nothing is kept). The simulator, the
scenario engine and estimated starts use it; the live tick, which loads one snapshot per
run, calls :func:`~scheduler.policy.schedule`.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from types import MappingProxyType

from scheduler.policy.admission import GpuShapes, gpu_shapes, infeasible_resources, infeasible_shape
from scheduler.policy.attempt_log import AttemptChanges, attempt_changes
from scheduler.policy.room_index import RoomBase, index_slot
from scheduler.policy.state import AttemptView, ClusterState, HostView
from scheduler.policy.types import Attempt, GpuRef, Host, HostState, Snapshot, Workload
from scheduler.policy.usage import LoadBook


def nominations_of(snap: Snapshot, pending: dict[str, Workload]) -> dict[str, tuple[GpuRef, ...]]:
    """The snapshot's nominations a pass honours: of pending workloads, non-empty, in id order."""
    return {wid: tuple(g) for wid, g in sorted(snap.nominations.items()) if wid in pending and g}


class Standing:
    """Cluster state plus the aggregates of allocated work a pass reads, kept between passes.

    Aggregates (healthy GPUs of allocated attempts that are not leaving):

    - ``agg``: host → budget → ``[unprotected, protected]`` GPU counts (no zero entries);
    - ``agg_held``: host → GPUs of all such work there;
    - ``agg_budgets``: budgets that have held such work;
    - ``victim_hosts``: budget → host → number of its unprotected attempts there (the only
      allocated victims there can be, §3.4 rule 1).

    The pass mutates all of it (starts, stops, nominations) through :class:`ClusterState`
    and :meth:`track`; :meth:`sync` then takes it to the next snapshot.
    """

    drains: Mapping[str, int] = MappingProxyType({})
    """(set in ``__init__``; empty in a standing pickled before scheduled drains were read)"""

    preempt_rooms: dict[tuple[str, frozenset[str]], tuple[int, dict[str, int], int, set[str]]] | None = None
    """(:meth:`_caches`; None in a standing pickled before it was kept: ``screen_rooms.preempt_rooms``
    starts it.)"""
    total_gpus: int | None = None
    """The hosts' GPUs (``__init__``; None in a standing pickled before: ``PassState`` sums them)."""
    draining_hosts: tuple[str, ...] | None = None
    """The draining hosts' names (set in ``__init__``; None in a standing pickled before it was
    kept: ``screen_summary.drain_acts`` then walks every host)."""
    open_rooms: dict[tuple[str, frozenset[str]], tuple[dict[str, int], int]] | None = None
    """(model, allowed budgets) -> (``preempt_rooms``' rooms of that entry, the most room over the
    hosts without a scheduled drain): ``screen_rooms.open_rooms``, started there; dropped when those
    rooms are read again."""

    def __init__(self, snap: Snapshot, pending: dict[str, Workload] | None = None, *, kept: bool = False) -> None:
        if pending is None:
            pending = {w.id: w for w in snap.pending}
        self.now = snap.now
        self.hosts: tuple[Host, ...] = tuple(snap.hosts)
        self.total_gpus = sum(h.size for h in self.hosts)  # fixed while the hosts are (fits)
        self.noms: dict[str, tuple[GpuRef, ...]] = nominations_of(snap, pending)
        self.state = ClusterState(list(snap.hosts), list(snap.attempts), self.noms, snap.now)
        self.hosts_by_model: dict[str, list[HostView]] = {}
        for hv in self.state.hosts.values():
            self.hosts_by_model.setdefault(hv.model, []).append(hv)
        self._shapes: GpuShapes | None = None
        self._infeasible: dict[tuple[str, int, int | None, int | None], bool] = {}  # shape -> unschedulable
        self.draining_hosts = tuple(h.name for h in self.hosts if h.state == HostState.DRAINING)
        self.draining = bool(self.draining_hosts)
        # host -> its scheduled drain's instant, active hosts only (PassState.host_allowed); empty
        # while none is scheduled, the usual case, so the rule then costs one test of a dict
        self.drains = {h.name: h.drain_at for h in self.hosts if h.drain_at is not None and h.state == HostState.ACTIVE}
        self.sick = [hv.name for hv in self.state.hosts.values() if len(hv.healthy) < len(hv.host.gpu_health)]
        self.agg: dict[str, dict[str, list[int]]] = {}
        self.agg_budgets: set[str] = set()
        self.agg_held: dict[str, int] = {}  # host -> sum of its agg counts
        self.victim_hosts: dict[str, dict[str, int]] = {}
        # Reservations' bound (reserve.py): budget -> host -> GPUs of its allocated work there
        # (agg's counts summed), and per model the hosts whose healthy GPUs exceed the allocated
        # work held there, with that excess; the rank of each host in hosts_by_model.
        self.budget_hosts: dict[str, dict[str, int]] = {}
        self.slack: dict[str, dict[str, int]] = {m: {} for m in self.hosts_by_model}
        self.rank: dict[str, int] = {}
        for hosts in self.hosts_by_model.values():
            for i, hv in enumerate(hosts):
                self.rank[hv.name] = i
                if hv.healthy:
                    self.slack[hv.model][hv.name] = len(hv.healthy)
        self._caches()
        for av in self.state.attempts.values():
            self.track(av, 1)
        self.window = snap.window
        changes = attempt_changes(snap)
        self.source: tuple[object, int] | None = None if changes is None else (changes.source, changes.serial)
        """The producer's changes this standing's attempts are at (:class:`AttemptChanges`)."""
        self.followed = 0  # syncs that read the producer's changes (tests)
        self.book: LoadBook | None = None
        if kept:
            self._keep(snap)

    def _caches(self) -> None:
        """The indexes kept between passes while the hosts' versions stand (empty at first)."""
        # host -> (host version, the instant it read or None, its victim rows): victims.py's, kept
        # while the host's version stands (protections ending bump it, _end_protections)
        self.victim_rows: dict[str, tuple[int, int | None, object]] = {}
        # (model, allowed budgets) -> (ClusterState.mark, host -> its victim room, the most):
        # victims._most_room, the single-host search's bound read again only where hosts moved
        self.most_room: dict[tuple[str, frozenset[str]], tuple[int, dict[str, int], int]] = {}
        self.candidates: dict[tuple[str, frozenset[str]], object] = {}  # victim_index.CandidateIndex (est46)
        # (end of protection, attempt id, tie-breaker, view): protections still to end
        self._ends: list[tuple[int, str, int, AttemptView]] = []
        self._seq = 0
        # Reservations' indexes, kept between passes: host -> (host version, room_index.room_base)
        # (valid while the version is; a protection's end bumps it), and the hosts a gang of
        # (model, host size, CPUs, memory) could ever have whole (the hosts never change).
        self.rooms: dict[str, tuple[int, RoomBase]] = {}
        # host -> (host version, (allowed budgets, GPUs, CPUs, memory) -> the instant from which a
        # single-host workload of that shape could start there, before ``now`` is applied, or
        # None: never): reserve.host_start's answers, kept while the version stands
        self.starts: dict[str, tuple[int, dict[tuple[object, ...], tuple[int, int] | None]]] = {}
        self.gang_hosts: dict[tuple[str, int, int | None, int | None], list[HostView]] = {}
        # (model, allowed budgets, GPUs, CPUs, memory) -> (ClusterState.mark, host -> host_start's
        # kept instant before ``now`` is applied, None: never): reserve._single_starts
        self.single_starts: dict[tuple[object, ...], tuple[int, dict[str, int | None]]] = {}
        # (model, allowed budgets) -> (ClusterState.mark, host -> reserve.ruled_out's room)
        self.bound_rooms: dict[tuple[str, frozenset[str]], tuple[int, dict[str, int]]] = {}
        # (model, allowed budgets) -> (ClusterState.mark, host -> the screen's preemption room there,
        # the most, the hosts that room vacates whole): screen_rooms.preempt_rooms
        self.preempt_rooms = {}
        self.open_rooms = None
        # (model, size, CPUs, memory, allowed budgets) -> (ClusterState.mark, host -> instant a
        # gang could have it whole from, before ``now`` is applied): reserve._gang_starts
        self.gang_starts: dict[tuple[object, ...], tuple[int, dict[str, int | None]]] = {}
        # A gang's victim search (gang_victims.gang_options): per (model, host size) the whole
        # healthy hosts' names, and per (model, size, allowed budgets) each whole host's level
        # and the hosts it could vacate now, with the log mark of the reading (ClusterState.mark:
        # the hosts bumped since are read again)
        self.whole_hosts: dict[tuple[str, int], list[str]] = {}
        self.gang_options: dict[tuple[object, ...], tuple[int, dict[str, int | None], list[str]]] = {}
        # and each host's level for a gang (gang_victims.vacate_level) per allowed budgets, with
        # the host version it read: host -> (version, allowed -> level)
        self.levels: dict[str, tuple[int | None, dict[frozenset[str], int | None]]] = {}

    def _keep(self, snap: Snapshot) -> None:
        """What only a standing kept between passes needs: protection ends to watch and the open
        attempts' U and C (a single pass sums those from the snapshot)."""
        for av in self.state.attempts.values():
            self._watch(av)
        self.book = LoadBook(snap.window, snap.now)
        for a in snap.attempts:
            if a.id not in self.book.attempts:
                self.book.add(a)

    def unschedulable(self, model: str, gpus: int, cpus: int | None = None, memory: int | None = None) -> bool:
        """True when no host set of the cluster could ever hold ``gpus`` GPUs of ``model`` (with
        these CPU and memory requests per host): the submission rule
        (:func:`admission.infeasible_shape`, :func:`admission.infeasible_resources`, DESIGN.md §3.3)
        on the registered hosts, in any state. Kept per shape: a standing's hosts never change."""
        key = (model, gpus, cpus, memory)
        bad = self._infeasible.get(key)
        if bad is None:
            if self._shapes is None:
                self._shapes = gpu_shapes((h.model, h.size) for h in self.hosts)
            why = infeasible_shape(self._shapes, model, gpus)
            if why is None and (cpus is not None or memory is not None):
                caps = [(h.size, h.cpus, h.memory) for h in self.hosts if h.model == model]
                why = infeasible_resources(caps, self._shapes[model][0], gpus, cpus, memory)
            bad = self._infeasible[key] = why is not None
        return bad

    # ------------------------------------------------------------ aggregates
    def track(self, av: AttemptView, sign: int) -> None:
        """Add (``sign`` 1) or remove (-1) an attempt's GPUs to or from the aggregates.

        The aggregates index the room profiles of :mod:`scheduler.policy.contract`: the attempt's
        slot is :func:`room_index.index_slot` (no-op for unallocated or leaving attempts). Call it
        before changing the view's flags.
        """
        slot = index_slot(av)
        if slot is None:
            return
        unprotected = slot == 0
        budget = av.attempt.budget
        self.agg_budgets.add(budget)
        agg = self.agg
        held = self.agg_held
        for h, n in av.on_host.items():
            per = agg.get(h)
            if per is None:
                per = agg[h] = {}
            counts = per.get(budget)
            if counts is None:
                counts = per[budget] = [0, 0]
            counts[slot] += sign * n
            if not (counts[0] or counts[1]):
                del per[budget]
            held[h] = left = held.get(h, 0) + sign * n
            on = self.budget_hosts.setdefault(budget, {})
            if on.get(h, 0) + sign * n:
                on[h] = on.get(h, 0) + sign * n
            else:
                del on[h]
            hv = self.state.hosts.get(h)
            if hv is not None:
                slack = self.slack[hv.model]
                if len(hv.healthy) > left:
                    slack[h] = len(hv.healthy) - left
                else:
                    slack.pop(h, None)
        if unprotected:
            where = self.victim_hosts.setdefault(budget, {})
            for h in av.on_host:
                left = where.get(h, 0) + sign
                if left:
                    where[h] = left
                else:
                    del where[h]

    def _watch(self, av: AttemptView) -> None:
        a = av.attempt
        if av.protected and a.allocated and a.started_at is not None:
            self._seq += 1
            heapq.heappush(self._ends, (a.started_at + a.min_runtime, a.id, self._seq, av))

    # ------------------------------------------------------------------ sync
    def fits(self, snap: Snapshot) -> bool:
        """True when :meth:`sync` can take this standing to ``snap`` (same hosts, time not going back;
        the very tuple it was built from, e.g. the forward simulation's, without a walk)."""
        hosts = snap.hosts
        if snap.now < self.now or len(hosts) != len(self.hosts) or snap.window != self.window:
            return False
        return hosts is self.hosts or all(a is b for a, b in zip(hosts, self.hosts, strict=True))

    def sync(self, snap: Snapshot, pending: dict[str, Workload]) -> None:
        """Bring the standing to ``snap`` (see the module docstring); requires :meth:`fits`.

        Raises ``Rebuild`` when the standing was built for a single pass.
        """
        st = self.state
        self.now = st.now = snap.now
        changes = attempt_changes(snap)
        if self.follows(changes):
            assert changes is not None  # noqa: S101 (follows says so)
            if self.book is None:
                raise Rebuild  # built for a single pass
            dirty = self._follow_attempts(changes.changed)
            self._follow_book(changes.changed)
            self.followed += 1
        else:
            current = {a.id: a for a in snap.attempts}
            dirty = self._sync_attempts(current)
            if self.book is None:
                raise Rebuild  # built for a single pass
            self._sync_book(current)
        st.pass_changed.clear()
        self.source = None if changes is None else (changes.source, changes.serial)
        self._end_protections()
        dirty |= self._sync_nominations(nominations_of(snap, pending))
        for h in sorted(dirty):
            if h in st.hosts:
                st.refresh_free(h)

    def follows(self, changes: AttemptChanges | None) -> bool:
        """True when ``changes`` continue the ones this standing is at (same source, next serial)."""
        last = self.source
        return changes is not None and last is not None and last[0] is changes.source and last[1] + 1 == changes.serial

    def _follow_attempts(self, changed: dict[str, Attempt | None]) -> set[str]:
        """:meth:`_sync_attempts` from the producer's changes: only the attempts it put or dropped
        and those the last pass changed (:attr:`ClusterState.pass_changed`: one it started is in
        no snapshot unless the producer put it; one it marked leaving is the attempt it was
        unless the producer replaced it) can differ from the snapshot; every other view is the
        previous snapshot's attempt, unchanged."""
        st = self.state
        views = st.attempts
        dirty: set[str] = set()
        pass_changed = st.pass_changed
        put: list[Attempt] = []
        for aid in changed.keys() | pass_changed.keys():  # every removal before any insertion
            seen = views.get(aid)
            if aid in changed:
                a = changed[aid]
            elif pass_changed[aid] or seen is None:
                a = None  # started by the pass: not the producer's
            else:
                a = seen.attempt  # marked leaving by the pass, not by the producer: as it was
            if seen is not None:
                if a is not None and (seen.attempt is a or seen.attempt == a) and seen.stopping == a.stopping:
                    continue
                self.track(seen, -1)
                st.remove_attempt(aid)
                dirty.update(seen.hosts)
            if a is not None:
                put.append(a)
        for a in put:
            av = st.insert_attempt(a)
            self.track(av, 1)
            self._watch(av)
            dirty.update(av.hosts)
        return dirty

    def _follow_book(self, changed: dict[str, Attempt | None]) -> None:
        """:meth:`_sync_book` from the producer's changes (a pass never changes the book)."""
        book = self.book
        assert book is not None  # noqa: S101 (sync raised Rebuild otherwise)
        book.advance(self.now)
        counted = book.attempts
        for aid, a in changed.items():
            rec = counted.get(aid)
            if rec is not None and (a is None or (rec[0] is not a and rec[0] != a)):
                book.remove(aid)
                rec = None
            if rec is None and a is not None:
                book.add(a)

    def _sync_attempts(self, current: dict[str, Attempt]) -> set[str]:
        """Attempts gone, changed or new; returns the hosts whose free lists may have changed."""
        st = self.state
        views = st.attempts
        dirty: set[str] = set()
        gone = [
            aid for aid, av in views.items() if current.get(aid) is not av.attempt and current.get(aid) != av.attempt
        ]
        for aid in gone:
            av = views[aid]
            self.track(av, -1)
            st.remove_attempt(aid)
            dirty.update(av.hosts)
        for aid, a in current.items():
            seen = views.get(aid)
            if seen is not None:
                if seen.stopping == a.stopping:
                    continue
                # The same attempt object, but the pass that saw it marked it leaving and the
                # caller did not apply that: back to what the snapshot says.
                self.track(seen, -1)
                st.remove_attempt(aid)
                dirty.update(seen.hosts)
            av = st.insert_attempt(a)
            self.track(av, 1)
            self._watch(av)
            dirty.update(av.hosts)
        return dirty

    def _sync_book(self, current: dict[str, Attempt]) -> None:
        book = self.book
        assert book is not None  # noqa: S101 (sync raised Rebuild otherwise)
        book.advance(self.now)
        counted = book.attempts
        for aid in [aid for aid in counted if aid not in current]:
            book.remove(aid)
        for aid, a in current.items():
            rec = counted.get(aid)
            if rec is None:
                book.add(a)
            elif rec[0] is not a and rec[0] != a:
                book.remove(aid)
                book.add(a)

    def _end_protections(self) -> None:
        """Protections that ended by now: the attempts move to the unprotected slot of the index."""
        ends = self._ends
        views = self.state.attempts
        while ends and ends[0][0] <= self.now:
            _, aid, _, av = heapq.heappop(ends)
            if views.get(aid) is av and av.protected:
                self.track(av, -1)
                av.protected = False
                self.track(av, 1)
                for h in av.hosts:  # its hosts' room profiles and victim rows changed (LATER work is NOW now)
                    self.state.bump(h)

    def _sync_nominations(self, noms: dict[str, tuple[GpuRef, ...]]) -> set[str]:
        """Nominations changed; returns the hosts whose free lists may have changed."""
        dirty: set[str] = set()
        if noms == self.noms:
            return dirty
        st = self.state
        for wid, gpus in self.noms.items():
            if noms.get(wid) != gpus:
                for g in gpus:
                    if st.nominated.get(g) == wid:
                        st.unnominate(g)
                        dirty.add(g[0])
        for wid, gpus in noms.items():
            if self.noms.get(wid) != gpus:
                for g in gpus:
                    st.nominate_one(g, wid)
                    dirty.add(g[0])
        self.noms.clear()
        self.noms.update(noms)
        return dirty

    # ----------------------------------------------------------------- check


class Rebuild(Exception):
    """The difference is one :meth:`Standing.sync` does not take; build afresh."""


__all__ = ["Rebuild", "Standing", "nominations_of"]
