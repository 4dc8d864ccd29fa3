"""The scenario runner's database backend (tests/scenarios/FORMAT.md: ``--backend db``).

Everything lives in the Django models and the real code runs on it: budgets,
clusters, hosts and GPUs are created through the services, pending workloads are
submitted through ``do_submit_workload``, every tick is the real
:func:`scheduler.tick.run_tick` at a simulated instant, and simulated agents
answer through the real lifecycle functions (``attempt_started`` at the instant a
start is placed, ``attempt_exited`` when a workload's ``duration`` is used up or
``grace`` seconds after a stop). ``restart`` drops every in-memory structure and
carries on from the database alone.

The timeline follows FORMAT.md "Time" exactly like :class:`scheduler.sim.engine.Engine`:
ticks on the grid ``t0 + k × tick_interval`` (start of a span excluded, end
included) and right after every event instant, all exits and releases of an
instant applied before that instant's tick, and ``tick`` repeating passes until
one decides nothing new. Unlike the engine, nothing about attempts is kept in
memory: the next events are derived from the open ``Attempt`` rows each time
(exit = confirmed start + what is left of the workload's ``duration``, stored as
``Workload.duration_hint_s``; release = ``stop_requested_at + grace``).

Scenario ids are workload names and budget paths are ``Budget.path`` (below a
root budget named ``(root)``), so both maps are rebuilt from the database. The
snapshots the policy sees name workloads by scenario id (``workload_key``), so a
tie the policy breaks by workload id goes as in memory whatever pks the rows get
(FORMAT.md).

``DbBackend()`` (what ``manage.py scenario --backend db`` uses) plays each file in
a scratch database of its own — an in-memory SQLite database, or a fresh
PostgreSQL database next to the configured one — and drops it in :meth:`close`,
so the configured database is never read or written. Tests that already run in
a test database pass ``scratch_db=False``. Scenario settings (window,
reservations, auto-drain, host-lost delay) are applied with ``override_settings``
from :meth:`setup` until :meth:`close`: always call ``close()``.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.test.utils import override_settings

from accounts.models import User
from budgets.models import Budget, UsageEntry
from budgets.services import BudgetError, do_archive_budget, do_create_budget, do_set_hold
from scheduler import lifecycle, tasks
from scheduler.accounting import SILENT_HOST
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, HostEvent, Workload, WorkloadEvent
from scheduler.policy.views import budget_usage, dispatch_order, ratio_order
from scheduler.scenarios.runner import ROOT, check_gpu_index, expand_budgets, host_from_spec, place_running
from scheduler.scenarios.spec import HostSpec, Scenario, WorkloadSpec
from scheduler.services import (
    CancelError,
    SubmissionError,
    do_cancel_workload,
    do_create_cluster,
    do_register_host,
    do_set_host_state,
    do_submit_workload,
)
from scheduler.sim.engine import StepLog
from scheduler.snapshot import epoch, load_snapshot
from scheduler.tick import TickResult, run_tick

PREEMPTION_REASONS = (Attempt.EndReason.PREEMPTED, Attempt.EndReason.DRAINED)
"""Stops that count as preemptions in the scenario checks (cancels, exits and faults do not)."""
MAX_PASSES = 50
"""Passes of one ``tick`` at most, as in the memory engine."""
OWNER = "scenario"


def _gpu_uuid(host: str, index: int) -> str:
    """A GPU's UUID, the same for a host name in every run: ``GPU-<host>-<i>`` passed the 64
    characters a UUID may have for host names longer than 50 (a host name may have 128)."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'fairway-scenario:{host}/{index}')}"


def _dt(t: int) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _agents_exit(attempt: Attempt, exit_code: int | None, now: datetime) -> None:
    """The simulated agents report ``attempt``'s exit, each host its own part, rank 0's first (a
    gang's part releases only its host's GPUs: ``lifecycle._release_gang_part``)."""
    hosts: dict[int, Host] = {}
    for link in AttemptGPU.objects.filter(attempt=attempt, open=True).select_related("gpu__host").order_by("rank"):
        hosts.setdefault(link.gpu.host_id, link.gpu.host)
    for host in hosts.values() or [attempt.host]:
        lifecycle.attempt_exited(host, attempt.pk, exit_code, now=now)


@dataclass(frozen=True, slots=True)
class _Event:
    """Something a simulated agent does at ``at``: an attempt exits, or an offline host's attempts are lost."""

    at: int
    kind: str  # "attempt" | "lost" | "timeout" (the server's wall-time limit: DESIGN.md §4)
    ident: int  # attempt pk | host pk | cluster pk
    exit_code: int | None = None


class _ScratchDatabase:
    """A fresh, migrated database replacing the configured one until :meth:`drop`."""

    def __init__(self) -> None:
        self.old_name = connection.settings_dict["NAME"]
        test = connection.settings_dict.setdefault("TEST", {})
        self.old_test_name = test.get("NAME")
        # SQLite: a shared-cache in-memory database; PostgreSQL: a database of this process.
        test["NAME"] = ":memory:" if connection.vendor == "sqlite" else f"fairway_scenario_{os.getpid()}"
        _close_pool()  # a connection pool is bound to the database it was opened on
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)

    def drop(self) -> None:
        connection.creation.destroy_test_db(self.old_name, verbosity=0)
        connection.settings_dict["TEST"]["NAME"] = self.old_test_name
        # Django ignores close() while the name is an in-memory database's, so the connection
        # would stay on the scratch database: close it now that the name is the configured one.
        connection.close()
        _close_pool()


def _close_pool() -> None:
    """Close the psycopg pool of the default connection, if any (``FAIRWAY_DB_POOL``)."""
    close_pool = getattr(connection, "close_pool", None)
    if close_pool is not None:
        close_pool()


class DbBackend:
    """Plays a scenario on the database with the real tick, services and lifecycle (see the module doc)."""

    def __init__(self, *, scratch_db: bool = True) -> None:
        self.scratch_db = scratch_db
        self._scratch: _ScratchDatabase | None = None
        self._settings: override_settings | None = None
        self.sc: Scenario | None = None
        self.t = 0
        self.log = StepLog()
        # The simulated agents' own memory: when they were told to stop outside a tick (a
        # user's cancel stamps ``stop_requested_at`` with the server's real clock). Agents
        # are not the scheduler, so this survives ``restart``.
        self._agent_stop_at: dict[int, int] = {}
        self._forget()

    # ------------------------------------------------------------------ in-memory state
    def _forget(self) -> None:
        """Drop every in-memory structure of the scheduler side (``restart``)."""
        self._wid: dict[str, int] = {}  # scenario id → workload pk
        self._wname: dict[int, str] = {}
        self._budget: dict[str, int] = {}  # path → budget pk
        self._bpath: dict[int, str] = {}
        self._last: dict[int, TickResult] = {}  # cluster pk → the last pass's result
        self._cluster_pks: list[int] | None = None  # read once: clusters come only with hosts
        self._owner: User | None = None

    def _load_maps(self) -> None:
        """Rebuild the id maps from the database: workloads by name, budgets by path."""
        self._wid = dict(Workload.objects.order_by("pk").values_list("name", "pk"))
        self._wname = {pk: name for name, pk in self._wid.items()}
        tree = {b.pk: b for b in Budget.objects.order_by("pk")}
        for b in tree.values():
            if b.parent_id is not None:
                b.parent = tree[b.parent_id]
        self._budget = {}
        for b in tree.values():  # newest last: a live budget wins over an archived one of its name
            path = ROOT if b.parent_id is None else b.path
            if b.archived_at is None or path not in self._budget:
                self._budget[path] = b.pk
        self._bpath = {pk: path for path, pk in self._budget.items()}

    @property
    def owner(self) -> User:
        if self._owner is None:
            self._owner = User.objects.get(username=OWNER)
        return self._owner

    def _clusters(self) -> list[int]:
        """Cluster pks, the primary one ("default", else the first by name) first."""
        if self._cluster_pks is None:
            rows = list(Cluster.objects.order_by("name").values_list("pk", "name"))
            rows.sort(key=lambda r: r[1] != "default")
            self._cluster_pks = [pk for pk, _ in rows]
        return list(self._cluster_pks)

    def _w(self, wid: str) -> int:
        if wid not in self._wid:
            self._load_maps()
        if wid not in self._wid:
            raise ValueError(f"unknown workload {wid!r}")
        return self._wid[wid]

    def _budget_obj(self, path: str) -> Budget:
        if path not in self._budget:
            self._load_maps()
        if path not in self._budget:
            raise ValueError(f"unknown budget {path!r}")
        return Budget.objects.get(pk=self._budget[path])

    def _host(self, name: str) -> Host:
        host = Host.objects.filter(name=name, removed_at__isnull=True).first()
        if host is None:
            raise ValueError(f"unknown host {name!r}")
        return host

    # ------------------------------------------------------------------------- setup
    def setup(self, sc: Scenario) -> None:
        s = sc.settings
        self.sc = sc
        self.t = s.start
        if self.scratch_db and self._scratch is None:
            self._scratch = _ScratchDatabase()
        self._settings = override_settings(
            FAIRWAY={
                **settings.FAIRWAY,
                "LOOKBACK_WINDOW_S": s.lookback,
                "MAX_RESERVATIONS": s.max_reservations,
                "AUTO_DRAIN_ON_GPU_FAULT": s.auto_drain_on_gpu_fault,
                "HOST_LOST_AFTER_S": s.host_lost_after,
                "GRACE_PERIOD_S": s.grace,
            }
        )
        self._settings.enable()
        now = _dt(self.t)

        User.objects.create_user(username=OWNER, is_staff=True, is_superuser=True)
        root = do_create_budget(name=ROOT, parent=None)
        self._budget = {ROOT: root.pk}
        for path, parent, shares in expand_budgets([(b.path, b.shares) for b in sc.budgets]):
            b = do_create_budget(
                name=path.rsplit("/", 1)[-1], parent=Budget.objects.get(pk=self._budget[parent]), shares=shares
            )
            self._budget[path] = b.pk
        self._bpath = {pk: path for path, pk in self._budget.items()}

        for cname in dict.fromkeys([h.cluster for h in sc.hosts] or ["default"]):
            do_create_cluster(cname)
        for h in sc.hosts:
            self._register(h, now)
        primary = self._clusters()[0]

        for u in sc.usage:
            budget = self._budget_obj(u.budget)
            if u.gpu_hours is not None:
                at = _dt(s.start - u.ago)
                UsageEntry.objects.create(
                    budget=budget,
                    cluster_id=primary,
                    start=at,
                    end=at,
                    gpus=None,
                    gpu_seconds=round(u.gpu_hours * 3600),
                    note="scenario usage",
                )
            else:
                assert u.from_ago is not None and u.to_ago is not None  # noqa: S101 - validated by the loader
                UsageEntry.objects.create(
                    budget=budget,
                    cluster_id=primary,
                    start=_dt(s.start - u.from_ago),
                    end=_dt(s.start - u.to_ago),
                    gpus=u.gpus,
                    note="scenario usage",
                )

        # Running workloads first, then pending ones: pks (= seq) follow the file, as in memory.
        policy_hosts = {h.name: host_from_spec(h) for h in sc.hosts}
        taken: set[tuple[str, int]] = set()
        gpu_pk = {(h, i): pk for pk, h, i in GPU.objects.values_list("pk", "host__name", "index")}
        host_obj = {h.name: h for h in Host.objects.all()}
        for spec in sc.running:
            self._budget_obj(spec.budget)
            gpus = place_running(spec, policy_hosts, taken)
            first = host_obj[gpus[0][0]]
            submitted = s.start - (spec.submitted_ago if spec.submitted_ago is not None else spec.elapsed)
            w = self._create_workload(spec, first.cluster_id, submitted)
            started = _dt(s.start - spec.elapsed)
            attempt = Attempt.objects.create(
                workload=w,
                number=1,
                host=first,
                allocated=spec.min_runtime > 0,
                placed_at=started,
                started_at=started,
                protected_until=started + timedelta(seconds=spec.min_runtime) if spec.min_runtime > 0 else None,
            )
            ranks: dict[str, int] = {}
            AttemptGPU.objects.bulk_create(
                [
                    AttemptGPU(attempt=attempt, gpu_id=gpu_pk[g], rank=ranks.setdefault(g[0], len(ranks)), open=True)
                    for g in gpus
                ]
            )
            Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)
            WorkloadEvent.objects.create(
                workload=w, at=started, kind="started", message="running at t0 (scenario)", data={"attempt": attempt.pk}
            )
        for spec in sc.pending:
            self._budget_obj(spec.budget)
            self._create_workload(spec, self._cluster_for(spec.model), s.start - (spec.submitted_ago or 0))
        self._load_maps()

    def _register(self, h: HostSpec, now: datetime) -> Host:
        self._cluster_pks = None  # the host's cluster may be new
        cluster = do_create_cluster(h.cluster)
        host, _token = do_register_host(
            cluster, h.name, [(i, _gpu_uuid(h.name, i), h.model, 0) for i in range(h.gpus)], h.labels
        )
        Host.objects.filter(pk=host.pk).update(cpus=h.cpus, memory_bytes=h.memory)  # as its hello reports
        lifecycle.record_heartbeat(host, [], now=now)  # the simulated agent is connected
        return host

    def _cluster_for(self, model: str) -> int:
        """The cluster a submission goes to: the primary one, unless only another one has ``model``."""
        clusters = self._clusters()
        if len(clusters) > 1:
            having = set(
                GPU.objects.registered()
                .filter(model=model, host__removed_at__isnull=True)
                .values_list("host__cluster_id", flat=True)
            )
            for cid in clusters:
                if cid in having:
                    return cid
        return clusters[0]

    def _create_workload(self, spec: WorkloadSpec, cluster_id: int, submitted: int) -> Workload:
        """Submit through the service; setup data it would refuse (e.g. a long minimum runtime) goes in directly."""
        budget = self._budget_obj(spec.budget)
        try:
            return self._submit(spec, budget, cluster_id, submitted)
        except SubmissionError:
            w = Workload.objects.create(
                name=spec.id,
                owner=self.owner,
                budget=budget,
                cluster_id=cluster_id,
                gpu_model=spec.model,
                gpu_count=spec.gpus,
                command=["scenario", spec.id],
                min_runtime_s=spec.min_runtime,
                submitted_at=_dt(submitted),
                duration_hint_s=spec.duration,
                cpus=spec.cpus,
                memory_bytes=spec.memory,
                max_runtime_s=spec.max_runtime,
                state=Workload.State.PENDING,
            )
            Workload.objects.filter(pk=w.pk).update(seq=w.pk)
            return w

    def _submit(self, spec: WorkloadSpec, budget: Budget, cluster_id: int, submitted: int) -> Workload:
        return do_submit_workload(
            self.owner,
            name=spec.id,
            budget=budget,
            cluster=cluster_id,
            gpu_model=spec.model,
            gpu_count=spec.gpus,
            image="",
            command=["scenario", spec.id],
            env=None,
            min_runtime_s=spec.min_runtime,
            submitted_at=_dt(submitted),
            duration_hint_s=spec.duration,
            cpus=spec.cpus,
            memory_bytes=spec.memory,
            max_runtime_s=spec.max_runtime,
        )

    def close(self) -> None:
        """Undo the settings override and drop the scratch database (if any)."""
        if self.sc is not None:
            # Forget this run's "tick pending" markers (in Redis they would outlive the run).
            tasks.reset_debounce(list(Cluster.objects.values_list("pk", flat=True)))
            self.sc = None
        if self._settings is not None:
            self._settings.disable()
            self._settings = None
        if self._scratch is not None:
            self._scratch.drop()
            self._scratch = None

    # ------------------------------------------------------------------------- steps
    def begin_step(self) -> None:
        self.log = StepLog()

    def step_log(self) -> StepLog:
        return self.log

    def now(self) -> int:
        return self.t

    def tick(self) -> None:
        """Schedule at the current instant until a pass decides nothing new."""
        now = _dt(self.t)
        for cid in self._clusters():
            for _ in range(MAX_PASSES):
                result = run_tick(cid, now=now, workload_key=self._name)
                if result.status != "ran":
                    raise RuntimeError(f"tick of cluster {cid} did not run: {result.status}")
                self._last[cid] = result
                self.log.ticks += 1
                self._agents_react(result)
                if not (result.starts or result.stops or result.host_states):
                    break

    def _agents_react(self, result: TickResult) -> None:
        """Record the pass's decisions; the simulated agents confirm starts and (grace 0) release stops now."""
        assert self.sc is not None  # noqa: S101 - setup() runs first
        now = _dt(self.t)
        if result.stops:
            stopped = list(Attempt.objects.filter(pk__in=result.stops).select_related("host").order_by("pk"))
            for a in stopped:
                if a.stop_reason in PREEMPTION_REASONS:
                    self.log.preempted.append(self._name(a.workload_id))
            if self.sc.settings.grace == 0:
                for a in stopped:
                    _agents_exit(a, None, now)
        if result.starts:
            refs: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
            for aid, rank, hname, idx in AttemptGPU.objects.filter(attempt_id__in=result.starts).values_list(
                "attempt_id", "rank", "gpu__host__name", "gpu__index"
            ):
                refs[aid].append((rank, hname, idx))
            for a in Attempt.objects.filter(pk__in=result.starts).select_related("host").order_by("pk"):
                self.log.started[self._name(a.workload_id)] = tuple((h, i) for _r, h, i in sorted(refs[a.pk]))
                lifecycle.attempt_started(a.host, a.pk, now=now)

    def _name(self, workload_pk: int) -> str:
        if workload_pk not in self._wname:
            self._load_maps()
        return self._wname[workload_pk]

    def _events(self) -> list[_Event]:
        """What the simulated agents will do next, derived from the database alone."""
        assert self.sc is not None  # noqa: S101 - setup() runs first
        grace = self.sc.settings.grace
        # One read of the open attempts (their workloads' duration, limit and cluster joined),
        # one of the silent busy hosts, one of the closed attempts' run time when some workload
        # has a duration: every tick of a scenario reads these (trim48: six reads were ~a fifth
        # of a db scenario's round trips to the database).
        rows = []
        limits: dict[int, int] = {}
        clusters: dict[int, int] = {}
        for aid, wid, started, stop_at, duration, limit, cluster in Attempt.objects.filter(
            ended_at__isnull=True, started_at__isnull=False
        ).values_list(
            "pk",
            "workload_id",
            "started_at",
            "stop_requested_at",
            "workload__duration_hint_s",
            "workload__max_runtime_s",
            "workload__cluster_id",
        ):
            rows.append((aid, wid, started, stop_at, duration))
            if limit is not None:
                limits[aid], clusters[aid] = limit, cluster
        ran: dict[int, int] = defaultdict(int)  # workload pk → seconds run by its closed attempts
        with_duration = [wid for _a, wid, _s, _st, duration in rows if duration is not None]
        if with_duration:
            for wid, started, ended in Attempt.objects.filter(
                workload_id__in=with_duration, ended_at__isnull=False, started_at__isnull=False
            ).values_list("workload_id", "started_at", "ended_at"):
                ran[wid] += epoch(ended) - epoch(started)
        events: list[_Event] = []
        for aid, wid, started, stop_at, duration in rows:
            exit_at = epoch(started) + max(0, duration - ran[wid]) if duration is not None else None
            release_at = None
            if stop_at is not None:
                release_at = self._agent_stop_at.get(aid, epoch(stop_at)) + grace
            timeout_at = epoch(started) + limits[aid] if aid in limits and stop_at is None else None
            if timeout_at is not None and (exit_at is None or timeout_at < exit_at):
                events.append(_Event(timeout_at, "timeout", clusters[aid]))
            elif exit_at is not None and (release_at is None or exit_at < release_at):
                events.append(_Event(exit_at, "attempt", aid, 0))
            elif release_at is not None:
                events.append(_Event(release_at, "attempt", aid, None))
        lost_after = self.sc.settings.host_lost_after
        busy_hosts = AttemptGPU.objects.filter(open=True, attempt__ended_at__isnull=True).values("gpu__host_id")
        for hid, last in Host.objects.filter(SILENT_HOST, pk__in=busy_hosts).values_list("pk", "last_heartbeat"):
            events.append(_Event(epoch(last) + lost_after, "lost", hid))
        return events

    def _process(self, ev: _Event) -> None:
        now = _dt(self.t)
        if ev.kind == "attempt":
            attempt = Attempt.objects.select_related("host").filter(pk=ev.ident, ended_at__isnull=True).first()
            if attempt is not None:
                _agents_exit(attempt, ev.exit_code, now)
        elif ev.kind == "timeout":
            with transaction.atomic():  # what the tick does first (tick.run_tick)
                lifecycle.stop_timed_out(ev.ident, now)
        else:
            # The live agents keep heartbeating; the sweep then ends the silent host's attempts as lost.
            for host in Host.objects.filter(removed_at__isnull=True).exclude(state=Host.State.OFFLINE):
                lifecycle.record_heartbeat(host, [], now=now)
            # The sweep ends attempts of hosts silent for strictly more than HOST_LOST_AFTER_S;
            # FORMAT.md says "host_lost_after later": sweep 1 µs after the instant. (The lost
            # attempts are charged up to the last heartbeat, not to the sweep's time.)
            lifecycle.sweep_hosts(now=now + timedelta(microseconds=1))

    def advance_to(self, t: int) -> None:
        """Let time pass to ``t``: events at their instants, ticks on the grid and after every event instant."""
        assert self.sc is not None  # noqa: S101 - setup() runs first
        t0, interval = self.sc.settings.start, self.sc.settings.tick_interval
        done: set[_Event] = set()
        while True:
            next_tick = t0 + ((self.t - t0) // interval + 1) * interval
            events = [e for e in self._events() if e not in done]
            # An event already due (e.g. a duration used up before t0) happens now.
            next_event = min((max(e.at, self.t) for e in events), default=None)
            candidates = [x for x in (next_tick, next_event) if x is not None and x <= t]
            if not candidates:
                break
            self.t = min(candidates)
            for ev in sorted((e for e in events if e.at <= self.t), key=lambda e: (e.at, e.kind, e.ident)):
                self._process(ev)
                done.add(ev)  # an event whose effect did not show must not spin the loop
            self.tick()
        self.t = max(self.t, t)

    def submit(self, specs: list[WorkloadSpec]) -> dict[str, str]:
        rejected: dict[str, str] = {}
        for spec in specs:
            if spec.budget not in self._budget:
                self._load_maps()
            if spec.budget not in self._budget:
                rejected[spec.id] = "unknown_budget"
                continue
            if Workload.objects.filter(name=spec.id).exists():
                raise ValueError(f"submit: workload id {spec.id!r} already exists")
            budget = Budget.objects.get(pk=self._budget[spec.budget])
            try:
                w = self._submit(spec, budget, self._cluster_for(spec.model), self.t - (spec.submitted_ago or 0))
            except SubmissionError as exc:
                rejected[spec.id] = exc.code
                continue
            self._wid[spec.id] = w.pk
            self._wname[w.pk] = spec.id
        return rejected

    def _open_attempt(self, wid: str) -> Attempt | None:
        return (
            Attempt.objects.select_related("host")
            .filter(workload_id=self._w(wid), ended_at__isnull=True)
            .order_by("-pk")
            .first()
        )

    def finish(self, ids: list[str], code: int) -> None:
        for wid in ids:
            a = self._open_attempt(wid)
            if a is None:
                raise ValueError(f"workload {wid!r} has no running attempt to {'finish' if code == 0 else 'fail'}")
            _agents_exit(a, code, _dt(self.t))

    def cancel(self, ids: list[str]) -> None:
        assert self.sc is not None  # noqa: S101 - setup() runs first
        for wid in ids:
            w = Workload.objects.get(pk=self._w(wid))
            before = self._open_attempt(wid)
            try:
                do_cancel_workload(self.owner, w)
            except CancelError as exc:
                if exc.code != "already_final":
                    raise
                continue
            if before is None or before.stop_requested_at is not None:
                continue  # canceled while pending, or already stopping: its release time stands
            # The agent gets the stop now (simulated time); it releases the GPUs `grace` later.
            self._agent_stop_at[before.pk] = self.t
            if self.sc.settings.grace == 0:
                _agents_exit(before, None, _dt(self.t))

    def gpu(self, host: str, index: int, health: str, xid: int | None) -> None:
        row = self._host(host)
        check_gpu_index(host, index, GPU.objects.registered().filter(host=row).count())
        sample = lifecycle.GpuSample(index=index, health=health, xids=(xid,) if xid is not None else ())
        lifecycle.record_heartbeat(row, [sample], now=_dt(self.t))

    def host(self, name: str, state: str) -> None:
        host = self._host(name)
        now = _dt(self.t)
        if state == "offline":
            # The agent falls silent now and the server notices at once (``sweep_hosts`` would,
            # ``HOST_OFFLINE_AFTER_S`` later): same row changes and audit entry as the sweep.
            if host.state != Host.State.OFFLINE:
                HostEvent.objects.create(
                    host=host, at=now, kind="offline", message="agent silent (scenario)", data={"from": host.state}
                )
                Host.objects.filter(pk=host.pk).update(
                    state=Host.State.OFFLINE, state_before_offline=host.state, last_heartbeat=now
                )
            return
        if host.state == Host.State.OFFLINE:
            lifecycle.record_heartbeat(host, [], now=now)  # the agent is back: its earlier state returns
            host.refresh_from_db()
        if state == "drain_now":
            do_set_host_state(None, host, Host.State.DRAINING, "scenario", drain_now=True)
        else:
            do_set_host_state(None, host, state, "scenario")

    def add_host(self, spec: HostSpec) -> None:
        self._register(spec, _dt(self.t))

    def remove_host(self, name: str) -> None:
        host = self._host(name)
        now = _dt(self.t)
        # The host leaves: its agent reports nothing running, so its attempts end `lost` now.
        lifecycle.record_heartbeat(host, [], now=now)
        gpus = [
            lifecycle.GpuReport(index=i, uuid=u, model=m, memory_mb=mem)
            for i, u, m, mem in GPU.objects.filter(host=host).values_list("index", "uuid", "model", "memory_mb")
        ]
        lifecycle.host_hello(host, agent_version="scenario", gpus=gpus, running=[], now=now)
        GPU.objects.filter(host=host).update_in_id_order(nominated_for=None)
        Host.objects.filter(pk=host.pk).update(removed_at=now)
        HostEvent.objects.create(host=host, at=now, kind="removed", message="removed from the cluster (scenario)")

    def create_budget(self, path: str, shares: int) -> None:
        self._load_maps()
        for p, parent, s in expand_budgets([(path, shares)]):
            if p not in self._budget:
                try:
                    b = do_create_budget(
                        name=p.rsplit("/", 1)[-1], parent=Budget.objects.get(pk=self._budget[parent]), shares=s
                    )
                except BudgetError as exc:  # e.g. parent_has_work: the scenario's error, as the memory backend's
                    raise ValueError(exc.message) from None
                self._budget[p] = b.pk
                self._bpath[b.pk] = p

    def hold_budget(self, path: str, hold: bool) -> None:
        do_set_hold(self._budget_obj(path), hold)

    def archive_budget(self, path: str) -> None:
        try:
            do_archive_budget(self._budget_obj(path))
        except BudgetError as exc:  # budget_root: the scenario's error, as the memory backend's
            raise ValueError(exc.message) from None

    def restart(self) -> None:
        """Forget everything in memory; the scheduler continues from the database alone."""
        self._forget()
        tasks.reset_debounce()
        if not connection.in_atomic_block:
            connection.close()  # a fresh connection too (ignored by Django for in-memory SQLite)
        self._load_maps()

    # ------------------------------------------------------------------------- state
    def states(self) -> dict[str, str]:
        stopping = set(
            Attempt.objects.filter(ended_at__isnull=True, stop_requested_at__isnull=False).values_list(
                "workload_id", flat=True
            )
        )
        out: dict[str, str] = {}
        for pk, name, state in Workload.objects.values_list("pk", "name", "state"):
            if state in (Workload.State.STARTING, Workload.State.RUNNING) and pk in stopping:
                state = Workload.State.PREEMPTING  # a canceled attempt inside its grace period
            out[name] = str(state)
        return out

    def placement(self, wid: str) -> list[tuple[str, int]]:
        a = self._open_attempt(wid)
        if a is None:
            return []
        rows = AttemptGPU.objects.filter(attempt=a).values_list("rank", "gpu__host__name", "gpu__index")
        return [(h, i) for _r, h, i in sorted(rows)]

    def reasons(self) -> dict[str, str]:
        return dict(
            Workload.objects.filter(state=Workload.State.PENDING)
            .exclude(pending_reason="")
            .values_list("name", "pending_reason")
        )

    def _snapshots(self) -> list[Any]:
        now = _dt(self.t)
        return [load_snapshot(cid, now, workload_key=self._name)[0] for cid in self._clusters()]

    def usage_gpu_hours(self, path: str) -> float:
        key = str(self._budget_obj(path).pk)
        return sum(budget_usage(snap).get(key, 0) for snap in self._snapshots()) / 3600

    def ratio_order(self, paths: list[str]) -> list[str]:
        keys = [str(self._budget_obj(p).pk) for p in paths]
        path_of = dict(zip(keys, paths, strict=True))
        snap = load_snapshot(self._clusters()[0], _dt(self.t), workload_key=self._name)[0]
        return [path_of[k] for k in ratio_order(snap, keys)]

    def host_states(self) -> dict[str, str]:
        return {
            name: str(state)
            for name, state in Host.objects.filter(removed_at__isnull=True).values_list("name", "state")
        }

    def _preemption_events(self) -> Any:
        return WorkloadEvent.objects.filter(kind__in=[str(r) for r in PREEMPTION_REASONS])

    def preemptions(self, wid: str) -> int:
        return self._preemption_events().filter(workload_id=self._w(wid)).count()

    def total_preemptions(self) -> int:
        return self._preemption_events().count()

    def queue_order(self) -> list[str]:
        out: list[str] = []
        for snap in self._snapshots():
            out.extend(dispatch_order(snap))
        return out

    def reserved(self) -> dict[str, str]:
        return {host: self._name(wpk) for res in self._last.values() for host, wpk in res.reservations.items()}

    def estimated_starts(self) -> dict[str, int]:
        """Pending workload name → estimated start − now (seconds), as the live service stores it
        (``scheduler.estimates.store_estimates``: one forward simulation per cluster)."""
        from scheduler.estimates import store_estimates

        now = _dt(self.t)
        for cid in self._clusters():
            store_estimates(cid, now)
        rows = Workload.objects.filter(state=Workload.State.PENDING, estimated_start__isnull=False)
        return {self._name(pk): int(at.timestamp()) - self.t for pk, at in rows.values_list("pk", "estimated_start")}

    def describe_last(self) -> list[str]:
        rows = (
            Workload.objects.filter(state=Workload.State.PENDING)
            .exclude(pending_reason="")
            .values_list("name", "pending_reason", "pending_detail")
        )
        return [f"{name}: {reason} {detail}" for name, reason, detail in sorted(rows)]
