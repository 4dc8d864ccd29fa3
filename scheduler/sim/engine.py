"""Discrete-event engine with a simulated clock, driving the real policy.

Used by the scenario runner (``--backend memory``) and extended by the trace
simulator. Simulated agents confirm starts at once and release a stopped
attempt's GPUs ``grace`` seconds after the stop. Times are integer seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from agent.protocol import FATAL_XIDS
from scheduler.policy import (
    Attempt,
    Budget,
    Decisions,
    GpuHealth,
    Host,
    HostState,
    IncrementalScheduler,
    Snapshot,
    StopReason,
    UsageRecord,
    Workload,
)
from scheduler.policy.usage import UsageLedger
from scheduler.sim.kept import PendingViews, WorkloadBook
from scheduler.stop_rules import cancel_replaces, runs_again

_WORKLOAD_VIEW_FIELDS = frozenset(
    ("id", "budget", "gpus", "model", "min_runtime", "submitted_at", "seq", "cpus", "memory", "view")
)
"""The fields of a :class:`SimWorkload` its policy view reads (and the view itself)."""
_WORKLOAD_WATCHED = _WORKLOAD_VIEW_FIELDS | {"state"}


@dataclass
class SimWorkload:
    """A workload in the simulation. ``remaining`` is the run time left (None: until stopped)."""

    id: str
    budget: str
    gpus: int
    model: str
    min_runtime: int
    submitted_at: int
    seq: int
    remaining: int | None = None
    max_runtime: int | None = None
    """Wall-time limit per attempt (DESIGN.md §4): stopped ``timeout`` then, and it ends failed."""
    state: str = "pending"  # pending | running | preempting | succeeded | failed | canceled
    preemptions: int = 0
    attempts: int = 0
    first_start: int | None = None
    finished_at: int | None = None
    cpus: int | None = None  # CPUs and memory (bytes) per host; None: the host's per-GPU share
    memory: int | None = None
    view: Workload | None = field(default=None, repr=False, compare=False)
    """The policy's view last handed out: :meth:`as_pending` gives the same object while it is equal."""

    def __setattr__(self, name: str, value: object) -> None:
        """Set a field; one of the policy's view marks the view stale, and the state or a field
        of the view is told to the engine's :class:`~scheduler.sim.kept.WorkloadBook` holding it."""
        if name in _WORKLOAD_WATCHED:
            d = self.__dict__
            if name != "state":
                d["_view_stale"] = True
            book = d.get("_book")
            if book is not None:
                book.touch(self, name)
        object.__setattr__(self, name, value)

    def as_pending(self) -> Workload:
        """The policy's view of this workload; the same object as last time while its fields are
        unchanged: the policy's pending index follows views by identity (``PendingIndex.sync``),
        and a fresh object every snapshot made it drop and re-add every pending workload on every
        pass (the history import of the demo: 60 % of its time). A fresh view is built and
        compared only after a field of it was set (:meth:`__setattr__` marks it): building one
        per pending workload per snapshot was 20 % of the history import."""
        kept = self.view
        if kept is None or self.__dict__.get("_view_stale", True):
            view = self.plain_pending()
            if kept is None or kept != view:
                kept = self.view = view
            object.__setattr__(self, "_view_stale", False)
        return kept

    def plain_pending(self) -> Workload:
        """A fresh view of this workload (what :meth:`as_pending` returns equal to)."""
        return Workload(
            self.id,
            self.budget,
            self.gpus,
            self.model,
            self.min_runtime,
            self.submitted_at,
            self.seq,
            self.cpus,
            self.memory,
        )


@dataclass
class SimAttempt:
    """An open attempt."""

    id: str
    workload: str
    budget: str
    gpus: tuple[tuple[str, int], ...]
    allocated: bool
    min_runtime: int
    started_at: int
    run_budget: int | None  # seconds it runs before exiting by itself (None: forever)
    stop_reason: str | None = None
    stop_at: int | None = None
    release_at: int | None = None
    charged_until: int | None = None
    for_workload: str | None = None
    cpus: int | None = None
    memory: int | None = None

    def as_policy(self) -> Attempt:
        return Attempt(
            self.id,
            self.workload,
            self.budget,
            self.gpus,
            self.allocated,
            self.min_runtime,
            self.started_at,
            stopping=self.stop_reason is not None,
            charged_until=self.charged_until,
            release_at=self.release_at,
            cpus=self.cpus,
            memory=self.memory,
        )


@dataclass
class StepLog:
    """What happened during one step: decisions of every tick in it."""

    started: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    ticks: int = 0


class Engine:
    """Simulation state plus the event loop.

    ``tick_interval``, ``grace``, ``window`` and ``host_lost_after`` are seconds.
    ``on_decisions`` (optional) sees every non-empty :class:`Decisions`.
    """

    def __init__(
        self,
        *,
        start: int,
        window: int = 7 * 86400,
        tick_interval: int = 10,
        grace: int = 0,
        max_reservations: int = 8,
        auto_drain_on_gpu_fault: bool = True,
        host_lost_after: int = 300,
        with_reasons: bool = True,
    ) -> None:
        self.t0 = start
        self.now = start
        self.window = window
        self.tick_interval = tick_interval
        self.grace = grace
        self.max_reservations = max_reservations
        self.auto_drain = auto_drain_on_gpu_fault
        self.host_lost_after = host_lost_after
        self.with_reasons = with_reasons
        self.hosts: dict[str, Host] = {}
        self.budgets: dict[str, Budget] = {}
        self.workloads: dict[str, SimWorkload] = WorkloadBook()
        self._pending_views = PendingViews()
        self.attempts: dict[str, SimAttempt] = {}
        self.usage: list[UsageRecord] = UsageLedger(window)
        """Closed usage: a list whose windowed usage the policy reads kept by difference."""
        self.nominations: dict[str, tuple[tuple[str, int], ...]] = {}
        self.offline_since: dict[str, int] = {}
        self.drain_now_at: dict[str, bool] = {}  # host -> its scheduled drain is a drain now
        self.last: Decisions = Decisions()
        self.log = StepLog()
        self.seq = 0
        self.attempt_seq = 0
        self.total_preemptions = 0
        self.on_decisions: Callable[[Decisions], None] | None = None
        self.on_release: Callable[[SimAttempt, str, int], None] | None = None
        self._events: list[tuple[int, int, str, str]] = []  # (time, order, kind, id)
        self._event_seq = 0
        self.scheduler = IncrementalScheduler()
        """The policy: :func:`scheduler.policy.schedule`'s decisions, kept state between passes."""

    # ---------------------------------------------------------------- setup
    def add_budget(self, budget: Budget) -> None:
        self.budgets[budget.key] = budget

    def add_host(self, host: Host) -> None:
        self.hosts[host.name] = host

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def submit(self, w: SimWorkload) -> None:
        self.workloads[w.id] = w

    def add_running(self, w: SimWorkload, gpus: tuple[tuple[str, int], ...], started_at: int) -> SimAttempt:
        """Put an already-running attempt in place (scenario setup)."""
        self.workloads[w.id] = w
        return self._open_attempt(w, gpus, allocated=w.min_runtime > 0, started_at=started_at)

    def requeued(self) -> set[str]:
        """The open attempts stopping for a reason after which their workloads run again
        (:func:`scheduler.stop_rules.runs_again`: preempted, drained, ...): what the forward
        simulation requeues at their release (``estimate.forward``'s ``requeued``, est48)."""
        return {a.id for a in self.attempts.values() if a.stop_reason is not None and runs_again(a.stop_reason)}

    # ------------------------------------------------------------- snapshot
    def snapshot(self) -> Snapshot:
        """What the policy sees now: the pending workloads' views kept while unchanged (``as_pending``)
        and kept between snapshots with their changes (scheduler/sim/kept.py), the
        usage ledger. :meth:`plain_snapshot` is
        the oracle (tests/sim/test_engine_views.py compares them on every pass)."""
        return Snapshot(
            now=self.now,
            hosts=list(self.hosts.values()),
            budgets=list(self.budgets.values()),
            attempts=[a.as_policy() for a in self.attempts.values()],
            pending=self._pending_views.of(self.workloads),
            usage=self.usage,
            nominations=self.nominations,
            window=self.window,
            max_reservations=self.max_reservations,
            with_reasons=self.with_reasons,
        )

    def plain_snapshot(self) -> Snapshot:
        """:meth:`snapshot` the plain way (the oracle): fresh views of every pending workload found
        by a walk over all workloads, the usage records as a plain list."""
        return Snapshot(
            now=self.now,
            hosts=list(self.hosts.values()),
            budgets=list(self.budgets.values()),
            attempts=[a.as_policy() for a in self.attempts.values()],
            pending=[w.plain_pending() for w in self.workloads.values() if w.state == "pending"],
            usage=list(self.usage),
            nominations=self.nominations,
            window=self.window,
            max_reservations=self.max_reservations,
            with_reasons=self.with_reasons,
        )

    # ---------------------------------------------------------------- events
    def _push(self, t: int, kind: str, ident: str) -> None:
        self._event_seq += 1
        heapq.heappush(self._events, (t, self._event_seq, kind, ident))

    def _open_attempt(
        self, w: SimWorkload, gpus: tuple[tuple[str, int], ...], *, allocated: bool, started_at: int
    ) -> SimAttempt:
        self.attempt_seq += 1
        aid = f"a{self.attempt_seq}"
        run_budget = None
        if w.remaining is not None:
            run_budget = max(0, w.remaining)
        a = SimAttempt(aid, w.id, w.budget, gpus, allocated, w.min_runtime, started_at, run_budget)
        a.cpus, a.memory = w.cpus, w.memory
        self.attempts[aid] = a
        w.state = "running"
        w.attempts += 1
        if w.first_start is None:
            w.first_start = started_at
        if run_budget is not None:
            # A running workload whose duration is already used up (scenario setup) exits now.
            self._push(max(started_at + run_budget, self.now), "exit", aid)
        if w.max_runtime is not None:
            self._push(max(started_at + w.max_runtime, self.now), "timeout", aid)
        return a

    def _release(self, a: SimAttempt, end_reason: str, at: int) -> None:
        """Close an attempt at ``at``: charge it, requeue or finish its workload."""
        if a.id not in self.attempts:
            return
        del self.attempts[a.id]
        charge_end = at if a.charged_until is None else min(at, a.charged_until)
        if a.allocated and charge_end > a.started_at:
            self.usage.append(UsageRecord(a.budget, a.started_at, charge_end, gpus=len(a.gpus)))
        w = self.workloads[a.workload]
        if w.remaining is not None:
            w.remaining = max(0, w.remaining - (at - a.started_at))
        if end_reason in ("succeeded", "failed", "canceled", "timeout"):
            w.state = "failed" if end_reason == "timeout" else end_reason
            w.finished_at = at
            self.nominations.pop(w.id, None)
        else:
            w.state = "pending"
        if self.on_release is not None:
            self.on_release(a, end_reason, at)

    def stop_attempt(self, a: SimAttempt, reason: str) -> None:
        """Issue a stop: the GPUs are released ``grace`` seconds later."""
        if a.stop_reason is not None:
            return
        a.stop_reason = reason
        a.stop_at = self.now
        a.release_at = self.now + self.grace
        self.workloads[a.workload].state = "preempting"
        if self.grace == 0:
            self._release(a, reason, self.now)
        else:
            self._push(a.release_at, "release", a.id)

    def exit_attempt(self, a: SimAttempt, code: int) -> None:
        """The attempt's process exits now with ``code``."""
        reason = a.stop_reason or ("succeeded" if code == 0 else "failed")
        self._release(a, reason, self.now)

    def _process_event(self, kind: str, ident: str) -> None:
        if kind == "exit":
            a = self.attempts.get(ident)
            if a is not None and (a.release_at is None or a.release_at > self.now):
                self.exit_attempt(a, 0)
        elif kind == "timeout":
            a = self.attempts.get(ident)
            if a is not None and a.stop_reason is None:
                self.stop_attempt(a, "timeout")
        elif kind == "release":
            a = self.attempts.get(ident)
            if a is not None and a.release_at == self.now:
                self._release(a, a.stop_reason or "preempted", self.now)
        elif kind == "drain":
            self._apply_scheduled_drain(ident)
        elif kind == "lost":
            host = ident
            since = self.offline_since.get(host)
            if since is not None and self.now >= since + self.host_lost_after:
                for a in sorted(self.attempts.values(), key=lambda a: a.id):
                    if any(g[0] == host for g in a.gpus):
                        self._release(a, self._lost_reason(a), self.now)

    # ------------------------------------------------------------------ tick
    def apply(self, dec: Decisions) -> None:
        """Apply one pass's decisions (simulated agents confirm starts at once)."""
        self.last = dec
        if self.on_decisions is not None and dec.changed:
            self.on_decisions(dec)
        for stop in dec.stops:
            a = self.attempts.get(stop.attempt)
            if a is None:
                continue
            if stop.reason in (StopReason.PREEMPTED, StopReason.DRAINED):
                self.workloads[a.workload].preemptions += 1
                self.total_preemptions += 1
                self.log.preempted.append(a.workload)
            a.for_workload = stop.for_workload
            self.stop_attempt(a, str(stop.reason))
        self.nominations = {k: v for k, v in dec.nominations.items() if self.workloads[k].state == "pending"}
        for start in dec.starts:
            w = self.workloads[start.workload]
            if w.state != "pending":
                continue
            self._open_attempt(w, start.gpus, allocated=start.allocated, started_at=self.now)
            self.nominations.pop(w.id, None)
            self.log.started[w.id] = start.gpus
        for host, state in dec.host_states.items():
            self.hosts[host] = replace(self.hosts[host], state=state, drain_now=False)

    def tick(self, max_passes: int = 50) -> None:
        """Schedule at the current instant, repeatedly, until a pass decides nothing new."""
        for _ in range(max_passes):
            dec = self.scheduler(self.snapshot())
            self.log.ticks += 1
            self.apply(dec)
            if not dec.changed:
                return

    def advance_to(self, t: int) -> None:
        """Let time pass to ``t``: events at their instants, ticks on the grid and after events."""
        while True:
            next_tick = self._next_tick_after(self.now)
            next_event = self._events[0][0] if self._events else None
            candidates = [x for x in (next_tick, next_event) if x is not None and x <= t]
            if not candidates:
                break
            at = min(candidates)
            self.now = at
            while self._events and self._events[0][0] == at:
                _, _, kind, ident = heapq.heappop(self._events)
                self._process_event(kind, ident)
            self.tick()
        self.now = max(self.now, t)

    def _next_tick_after(self, t: int) -> int:
        k = (t - self.t0) // self.tick_interval + 1
        return self.t0 + k * self.tick_interval

    # ------------------------------------------------------------ host/GPU
    def set_gpu_health(self, host: str, index: int, health: GpuHealth, xid: int | None = None) -> None:
        h = self.hosts[host]
        gh = dict(h.gpu_health)
        gh[index] = health
        state = h.state
        if (
            health == GpuHealth.UNHEALTHY
            and self.auto_drain
            and xid in FATAL_XIDS
            and state
            in (
                HostState.ACTIVE,
                HostState.CORDONED,
            )
        ):
            state = HostState.DRAINING
        self.hosts[host] = replace(h, gpu_health=gh, state=state)

    def schedule_drain(self, host: str, at: int, *, now: bool = False) -> None:
        """A drain (``now``: a drain now) scheduled for ``at`` (docs/deploy.md "Scheduled drains"):
        the host carries the instant (``Host.drain_at``: before it the policy starts no allocated
        work there whose protection would end after it) and is drained at it, before that
        instant's pass (as the tick's ``services.apply_due_drains`` runs before its snapshot).
        A second one replaces the first."""
        self.hosts[host] = replace(self.hosts[host], drain_at=at)
        self.drain_now_at[host] = now
        self._push(at, "drain", host)

    def _apply_scheduled_drain(self, host: str) -> None:
        h = self.hosts.get(host)
        if h is None or h.drain_at != self.now:
            return  # cancelled, replaced or the host removed
        now = self.drain_now_at.pop(host, False)
        h = replace(h, drain_at=None)
        if h.state in (HostState.ACTIVE, HostState.CORDONED) or (h.state == HostState.DRAINING and now):
            h = replace(h, state=HostState.DRAINING, drain_now=now or h.drain_now)
        self.hosts[host] = h

    def set_host_state(self, host: str, state: str) -> None:
        h = self.hosts[host]
        if state == "drain_now":
            self.hosts[host] = replace(h, state=HostState.DRAINING, drain_now=True)
            return
        if state == "offline":
            self.offline_since[host] = self.now
            for a in self.attempts.values():
                if any(g[0] == host for g in a.gpus) and a.charged_until is None:
                    a.charged_until = self.now
            self._push(self.now + self.host_lost_after, "lost", host)
        else:
            self.offline_since.pop(host, None)
        # a resume cancels a scheduled drain (docs/deploy.md "Scheduled drains")
        drain_at = None if state == "active" else h.drain_at
        self.hosts[host] = replace(h, state=HostState(state), drain_now=False, drain_at=drain_at)

    @staticmethod
    def _lost_reason(a: SimAttempt) -> str:
        """How an attempt whose host is gone ends: ``lost``, unless the server had already issued
        a stop, whose reason then stands (DESIGN.md §4), so a workload canceled inside its grace
        period stays canceled and is not requeued."""
        return a.stop_reason or "lost"

    def remove_host(self, host: str) -> None:
        for a in sorted(self.attempts.values(), key=lambda a: a.id):
            if any(g[0] == host for g in a.gpus):
                self._release(a, self._lost_reason(a), self.now)
        for wid, gpus in list(self.nominations.items()):
            if any(g[0] == host for g in gpus):
                del self.nominations[wid]
        del self.hosts[host]

    def cancel(self, wid: str) -> None:
        w = self.workloads[wid]
        if w.state == "pending":
            w.state = "canceled"
            w.finished_at = self.now
            self.nominations.pop(wid, None)
            return
        for a in list(self.attempts.values()):
            if a.workload == wid:
                if a.stop_reason is None:
                    a.stop_reason = "canceled"
                    a.stop_at = self.now
                    a.release_at = self.now + self.grace
                    w.state = "preempting"
                    if self.grace == 0:
                        self._release(a, "canceled", self.now)
                    else:
                        self._push(a.release_at, "release", a.id)
                elif cancel_replaces(a.stop_reason):  # DESIGN.md §4: a stop that ends the work stands
                    a.stop_reason = "canceled"

    def attempt_of(self, wid: str) -> SimAttempt | None:
        for a in self.attempts.values():
            if a.workload == wid:
                return a
        return None
