"""The scheduling tick: lock → snapshot → policy → apply, in one transaction (DESIGN.md §2), after
the wall-time limits' stops and the unmet dependencies' cancels, each in a transaction of its own
under the same lock (docs/locking.md).

Exactly one tick per cluster runs at a time. On PostgreSQL the lock is
``pg_try_advisory_xact_lock(TICK_LOCK_CLASS, cluster_id)``, held until the
transaction ends, so ticks of different clusters run in parallel on separate
workers and a second tick of the same cluster returns ``skipped`` at once. On
SQLite (the embedded mode: one process) a non-blocking ``threading.Lock`` per
cluster does the same job.

Decisions are applied with conditional updates: a workload is started only if
it is still pending with the request the snapshot read (its ``spec_version``: an
update, a hold or a release committed meanwhile, ``services.do_update_workload``,
``do_hold_workload``, ``do_release_workload``, is judged by the next tick instead)
and an attempt is stopped only if it is still open and not already stopping, so a
cancel, an update, a hold or an exit that commits between the snapshot and
the apply is never overwritten; the ``one_open_attempt_per_gpu`` constraint is
the last line of defence against double-booking.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import Case, Exists, Max, Value, When
from django.utils import timezone

from scheduler import lifecycle, notify, services, tick_figures
from scheduler.models import (
    GPU,
    Attempt,
    AttemptGPU,
    Cluster,
    Host,
    HostEvent,
    Workload,
    WorkloadEvent,
    cluster_label,
    new_wire_id,
)
from scheduler.policy import schedule
from scheduler.policy import types as p
from scheduler.prepared import Prepared
from scheduler.snapshot import SnapshotIndex, collector_paused, load_snapshot

logger = logging.getLogger(__name__)

TICK_LOCK_CLASS = 0x46574159
"""First key of the tick's advisory lock ("FWAY"); the second key is the cluster id."""

_thread_locks: dict[int, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@dataclass(slots=True)
class TickResult:
    """What one tick did. ``status``: ``ran``, ``skipped`` (another tick holds the lock) or ``no_cluster``."""

    cluster_id: int
    status: str
    starts: list[int] = field(default_factory=list)
    """pks of the attempts created"""
    stops: list[int] = field(default_factory=list)
    """pks of the attempts asked to stop"""
    host_states: dict[str, str] = field(default_factory=dict)
    dropped: int = 0
    """decisions not applied because the row changed since the snapshot"""
    reservations: dict[str, int] = field(default_factory=dict)
    """host name → pk of the workload holding a reservation on it (§3.5); recomputed by every
    tick and not stored (the scenario runner's ``reserved`` check and displays read it here)"""
    seconds: float = 0.0
    arrivals: int = 0
    """pending workloads this tick gave their first reason (new or requeued since the last tick)"""


def wait_for_tick(cluster_id: int) -> None:
    """Inside a transaction: take cluster ``cluster_id``'s tick lock, waiting for a tick in
    flight to commit, and hold it until the transaction ends (no tick of the cluster starts
    meanwhile: it is skipped, and the caller asks for one on commit). An operator's host change
    (cordon, drain, resume, removal) takes it first, so a tick whose snapshot read the host before
    the change never applies after it: it placed new work on a host cordoned or removed while its
    policy ran (brk38, docs/locking.md). PostgreSQL only: on SQLite the tick's ``BEGIN IMMEDIATE``
    holds the one write lock from its snapshot to its commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [TICK_LOCK_CLASS, cluster_id])


@contextmanager
def _locked_transaction(cluster_id: int) -> Iterator[bool]:
    """Open the tick's transaction holding the cluster's lock; yield False (no transaction work) if held.

    PostgreSQL: the advisory lock is taken inside the transaction and released with it.
    SQLite: the thread lock is taken *before* the transaction, because a second
    ``BEGIN IMMEDIATE`` would wait for the first tick's write lock instead of
    returning ``skipped``.
    """
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cur:
                # (JIT is off for every connection: config/settings.py.)
                cur.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [TICK_LOCK_CLASS, cluster_id])
                (acquired,) = cur.fetchone()
            yield bool(acquired)
        return
    with _thread_locks_guard:
        lock = _thread_locks.setdefault(cluster_id, threading.Lock())
    if not lock.acquire(blocking=False):
        yield False
        return
    try:
        with transaction.atomic():
            yield True
    finally:
        lock.release()


def run_tick(cluster_id: int, now: datetime | None = None, *, workload_key: Callable[[int], str] = str) -> TickResult:
    """Run one scheduling pass of cluster ``cluster_id`` at ``now`` (default: the server clock).

    ``workload_key``: the policy's id of a workload pk (:func:`scheduler.snapshot.load_snapshot`;
    only the scenario runner passes one).

    Returns a :class:`TickResult`; never raises for a missing cluster or a held lock.
    Agents hear about starts and stops after the commit (``gateway.push_desired_state``).
    """
    began = time.monotonic()
    now = now or timezone.now()
    # An unlocked read first (:func:`_steps_due`): a step's locked transaction only when it has
    # something to do (most ticks: none), which it then reads again under the lock. Each its own
    # transaction (docs/locking.md: several workloads in one statement, id order; a scheduled
    # drain is applied and cleared in one, at most once: docs/deploy.md): in the decisions'
    # transaction, its rows locked before the decisions' own took workloads out of id order, and
    # deadlocked with an ordered locker of both (brk52).
    drains, limited, unmet = _steps_due(cluster_id, now)
    if drains and not _locked_step(cluster_id, now, services.apply_due_drains):
        return TickResult(cluster_id=cluster_id, status="skipped")
    timeouts = limited and lifecycle.timeouts_due(cluster_id, now)
    if timeouts and not _locked_step(cluster_id, now, lifecycle.stop_timed_out):
        return TickResult(cluster_id=cluster_id, status="skipped")
    if drains or timeouts:  # read again after a step that ran (neither ends a workload: belt and braces)
        unmet = lifecycle.dependencies_due(cluster_id, now)
    if unmet and not _locked_step(cluster_id, now, lifecycle.settle_dependencies):
        return TickResult(cluster_id=cluster_id, status="skipped")
    stamps = [("timeouts", time.monotonic())]
    with _locked_transaction(cluster_id) as acquired:
        if not acquired:
            return TickResult(cluster_id=cluster_id, status="skipped")
        if not _CLUSTER_EXISTS(cluster_id):
            return TickResult(cluster_id=cluster_id, status="no_cluster")
        stamps.append(("lock", time.monotonic()))
        transaction.on_commit(lambda: stamps.append(("commit", time.monotonic())))
        with collector_paused():  # snapshot, policy and apply: no full collection walks the snapshot
            snapshot, index = load_snapshot(cluster_id, now, workload_key=workload_key, with_cap_records=False)
            stamps.append(("snapshot", time.monotonic()))
            decisions = schedule(snapshot)
            stamps.append(("policy", time.monotonic()))
            pk_of = index.pk_of()
            result = TickResult(
                cluster_id=cluster_id,
                status="ran",
                reservations={host: pk_of(wid) for host, wid in decisions.reservations.items()},
            )
            touched_hosts = _apply(decisions, snapshot, index, now, result, stamps)
        notify.push_hosts_on_commit(touched_hosts)
        tick_figures.remember_on_commit(cluster_id, snapshot, decisions, now)
    stamps.append(("hooks", time.monotonic()))
    result.seconds = time.monotonic() - began
    if result.starts or result.stops or result.host_states:
        logger.info(
            "tick cluster %s: %d started, %d stopped, host states %s, %d dropped (%.3fs; %s)",
            cluster_label(cluster_id),
            len(result.starts),
            len(result.stops),
            result.host_states or "-",
            result.dropped,
            result.seconds,
            _phases(began, stamps),
        )
    return result


def _locked_step(cluster_id: int, now: datetime, step: Callable[[int, datetime], object]) -> bool:
    """Run ``step`` in a transaction of its own under the cluster's tick lock; False if it is held."""
    with _locked_transaction(cluster_id) as acquired:
        if acquired:
            step(cluster_id, now)
        return acquired


def _steps_due(cluster_id: int, now: datetime) -> tuple[bool, bool, bool]:
    """Whether the tick's steps before its decisions may have something to do at ``now``: a
    scheduled drain due (``services.due_drains``), a live workload with a wall-time limit
    (``lifecycle.live_with_limits``: then ``timeouts_due`` reads its attempts) and a dependency
    no longer met (``lifecycle.unmet_dependencies``), in one unlocked read (trim48: a read and
    for two of them a transaction each, on every tick). A missing cluster: none."""
    rows = _STEPS_DUE(cluster_id, now)
    return (bool(rows[0][0]), bool(rows[0][1]), bool(rows[0][2])) if rows else (False, False, False)


# The tick's two fixed-shape reads before its snapshot, compiled once per connection
# (scheduler.prepared, dbtick49); ``.plain`` is each one built and run as usual.
_STEPS_DUE = Prepared(
    "tick_steps_due",
    (int, datetime),
    lambda cluster_id, now: (
        Cluster.objects.filter(pk=cluster_id)
        .annotate(
            drains=Exists(services.due_drains(cluster_id, now)),
            limited=Exists(lifecycle.live_with_limits(cluster_id)),
            unmet=Exists(lifecycle.unmet_dependencies(cluster_id)),
        )
        .values_list("drains", "limited", "unmet")
        .order_by("pk")[:1]
    ),  # as ``.first()``
)
_CLUSTER_EXISTS = Prepared(
    "tick_cluster_exists", (int,), lambda cluster_id: Cluster.objects.filter(pk=cluster_id).values_list("pk")[:1]
)


def _phases(began: float, stamps: list[tuple[str, float]]) -> str:
    """The tick's phases for its log line: ``name=ms`` each, from the previous stamp ("timeouts",
    the limits' and dependencies' transactions, from the tick's beginning, which is its placements'
    ``placed_at``; "lock" the decisions' lock after them); "commit" is the transaction's
    end, "hooks" its ``on_commit`` callbacks after it (the push, notifications, figures)."""
    parts, last = [], began
    for name, at in stamps:
        parts.append(f"{name}={(at - last) * 1000:.0f}")
        last = at
    return " ".join(parts)


def _apply(
    decisions: p.Decisions,
    snapshot: p.Snapshot,
    index: SnapshotIndex,
    now: datetime,
    result: TickResult,
    stamps: list[tuple[str, float]] | None = None,
) -> set[int]:
    """Write ``decisions`` (inside the tick's transaction); return the pks of hosts to push.

    Rows are locked in the one order of docs/locking.md — workloads, then attempts, then
    hosts, then GPUs — like a cancel, an exit report, a heartbeat and the sweeps: every
    workload the tick will change (started ones, the victims of its stops, those whose pending
    reason it writes) is locked first, in one statement in id order (left50: the reasons' rows,
    locked later by their own ``UPDATE`` in an order PostgreSQL chose, deadlocked with an ordered
    locker of both), pending reasons are written before any attempt is locked, host states
    before GPU nominations.
    """
    touched: set[int] = set()
    events: list[WorkloadEvent] = []
    stamp = stamps.append if stamps is not None else (lambda _item: None)
    reasons = _changed_reasons(decisions.pending, index)
    gone = _lock_workloads(decisions, index, [r.pk for r in reasons])
    if gone:
        decisions = _without_preemptors(decisions, gone, result)
    started_workloads = _apply_starts(decisions.starts, index, now, result, touched, events)
    stamp(("starts", time.monotonic()))
    result.arrivals = _apply_pending(reasons, started_workloads)
    stamp(("reasons", time.monotonic()))
    nominations = _apply_stops(decisions, index, now, result, touched, events)
    _apply_host_states(decisions.host_states, index, now, result)
    _apply_nominations(nominations, started_workloads, index, {index.pk_of()(w) for w in gone})
    if events:
        if connection.vendor == "postgresql":
            _insert_events_pg(events)
        else:
            WorkloadEvent.objects.bulk_create(events)
        notify.events_on_commit(events)
    stamp(("rest", time.monotonic()))
    return touched


def _lock_workloads(decisions: p.Decisions, index: SnapshotIndex, reasons: Iterable[int] = ()) -> set[str]:
    """Row-lock (id order, one statement) the workloads the tick starts, those whose attempts it
    stops, those its stops and nominations free GPUs for and ``reasons`` (those whose pending
    reason it writes: :func:`_changed_reasons`); return the preemptors that are no longer pending (a
    cancel committed since the snapshot) or no longer ask what the snapshot read (an update
    committed since: its victims were chosen for the old size, model or minimum runtime), as the
    policy names them."""
    pk_of = index.pk_of()
    ids = {pk_of(s.workload) for s in decisions.starts}
    for stop in decisions.stops:
        info = index.attempts.get(int(stop.attempt))
        if info is not None:
            ids.add(int(info.workload_id))
    preemptors = {s.for_workload for s in decisions.stops if s.for_workload} | set(decisions.nominations)
    wanted = {pk_of(w): w for w in preemptors}
    ids |= set(wanted)
    ids.update(reasons)
    if not ids:
        return set()
    if connection.vendor == "postgresql":
        rows = _lock_workloads_pg(ids)
    else:
        rows = list(
            Workload.objects.select_for_update()
            .filter(pk__in=ids)
            .order_by("pk")
            .values_list("pk", "state", "spec_version")
        )
    as_read = {pk: (state, version) for pk, state, version in rows}
    pending = Workload.State.PENDING
    return {w for pk, w in wanted.items() if as_read.get(pk) != (pending, index.pending_version.get(pk))}


def _lock_workloads_pg(ids: set[int]) -> list[tuple[int, str, int]]:
    """:func:`_lock_workloads`'s statement on PostgreSQL: the ids as one array parameter (``= ANY``),
    not one placeholder each: with every changed reason among them (12,257 at the first size) the
    ORM's ``IN`` list cost ~0.1 s of building and passing, the row locks themselves ~0.01 s."""
    table = Workload._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT id, state, spec_version FROM {table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE",  # noqa: S608 - table name from the model, values are parameters
            [sorted(ids)],
        )
        return [(int(pk), str(state), int(version)) for pk, state, version in cur.fetchall()]


def _without_preemptors(decisions: p.Decisions, gone: set[str], result: TickResult) -> p.Decisions:
    """``decisions`` less the stops and nominations for the workloads of ``gone`` (no longer
    pending or now held: DESIGN.md §3.4 preempts only for a workload that starts once its victims
    leave, and a canceled or held one does not). Its dropped stops count in ``result.dropped``."""
    stops = [s for s in decisions.stops if s.for_workload not in gone]
    result.dropped += len(decisions.stops) - len(stops)
    return dataclasses.replace(
        decisions,
        stops=stops,
        nominations={w: refs for w, refs in decisions.nominations.items() if w not in gone},
    )


def _apply_starts(
    starts: list[p.Start],
    index: SnapshotIndex,
    now: datetime,
    result: TickResult,
    touched: set[int],
    events: list[WorkloadEvent],
) -> set[int]:
    if not starts:
        return set()
    pk_of = index.pk_of()
    wanted = {pk_of(s.workload): s for s in starts}
    # Claim the workloads: only those still pending start (a cancel may have committed since), and
    # only with the request the policy placed (an update may have committed since: it asks another
    # size, model or minimum runtime, and the next tick decides again).
    still_pending = {
        pk
        for pk, version in Workload.objects.select_for_update()
        .filter(pk__in=wanted, state=Workload.State.PENDING)
        .order_by("pk")
        .values_list("pk", "spec_version")
        if version == index.pending_version.get(pk)
    }
    result.dropped += len(wanted) - len(still_pending)
    if not still_pending:
        return set()
    updated = Workload.objects.filter(pk__in=still_pending, state=Workload.State.PENDING, hold="").update(
        state=Workload.State.STARTING,
        pending_reason="",
        pending_detail={},
        estimated_start=None,
        no_start_found=False,
        estimate_unfunded=False,
        estimate_told=None,  # requeued, it is judged afresh from its first estimate then
    )
    if updated != len(still_pending):  # the rows are locked: this cannot happen short of a bug
        raise RuntimeError(f"tick: claimed {len(still_pending)} pending workloads, updated {updated}")
    last_number = dict(
        Attempt.objects.filter(workload_id__in=still_pending)
        .values("workload_id")
        .annotate(n=Max("number"))
        .values_list("workload_id", "n")
    )
    # Per attempt, in workload pk order: (workload pk, number, first host pk, allocated, unfunded)
    # and its GPUs as (gpu pk, rank).
    planned: list[tuple[int, int, int, bool, bool]] = []
    gpu_plan: list[list[tuple[int, int]]] = []
    for wid in sorted(still_pending):
        start = wanted[wid]
        ranks: dict[str, int] = {}
        plan: list[tuple[int, int]] = []
        for host_name, gpu_index in start.gpus:
            rank = ranks.setdefault(host_name, len(ranks))
            plan.append((index.gpu_id_by_ref[(host_name, gpu_index)], rank))
        first_host = index.host_id_by_name[start.gpus[0][0]]
        planned.append((wid, (last_number.get(wid) or 0) + 1, first_host, start.allocated, start.unfunded))
        gpu_plan.append(plan)
    if connection.vendor == "postgresql":
        attempt_ids = _insert_attempts_pg(planned, gpu_plan, now)
    else:
        created = Attempt.objects.bulk_create(
            Attempt(workload_id=wid, number=number, host_id=host, allocated=alloc, unfunded=unfunded, placed_at=now)
            for wid, number, host, alloc, unfunded in planned
        )
        attempt_ids = [a.pk for a in created]
        AttemptGPU.objects.bulk_create(
            AttemptGPU(attempt_id=aid, gpu_id=gpu_id, rank=rank, open=True)
            for aid, plan in zip(attempt_ids, gpu_plan, strict=True)
            for gpu_id, rank in plan
        )
    for aid, (wid, number, _host, allocated, unfunded), plan in zip(attempt_ids, planned, gpu_plan, strict=True):
        result.starts.append(aid)
        for gpu_id, _rank in plan:
            touched.add(index.gpu_host_id[gpu_id])
        events.append(
            WorkloadEvent(
                workload_id=wid,
                at=now,
                kind="placed",
                message=f"attempt {number} placed on {_describe(wanted[wid].gpus)}"
                + ("" if allocated else " (unfunded)" if unfunded else " (unallocated)"),
                data={
                    "attempt": aid,
                    "number": number,
                    "gpus": [list(ref) for ref in wanted[wid].gpus],
                    "allocated": allocated,
                    "unfunded": unfunded,
                },
            )
        )
    return still_pending


def _insert_attempts_pg(
    planned: list[tuple[int, int, int, bool, bool]], gpu_plan: list[list[tuple[int, int]]], now: datetime
) -> list[int]:
    """Insert the new attempts and their GPU links with one ``INSERT … SELECT FROM unnest(…)``
    each (the columns as arrays); return the attempts' pks in ``planned``'s order.

    The same rows ``bulk_create`` writes (every column a new :class:`Attempt` and
    :class:`AttemptGPU` get, their defaults included: a random ``wire_id``, empty stop and end
    reasons, no charge), inserted in the same order (attempts by workload pk, then their GPU
    links), without building a model object per row (1,952 starts, ~8,000 links: 0.4–0.5 s as
    objects).
    """
    attempts, links = Attempt._meta.db_table, AttemptGPU._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {attempts} (workload_id, wire_id, number, host_id, allocated, unfunded, placed_at, "  # noqa: S608 - table names from the models, values are parameters
            "stop_reason, end_reason, charged_gpu_seconds) "
            "SELECT w, x, n, h, a, u, %s, '', '', 0 FROM unnest(%s::bigint[], %s::bigint[], %s::integer[], "
            "%s::bigint[], %s::boolean[], %s::boolean[]) WITH ORDINALITY AS t(w, x, n, h, a, u, i) ORDER BY i "
            "RETURNING id, workload_id",
            [
                now,
                [r[0] for r in planned],
                [new_wire_id() for _ in planned],
                [r[1] for r in planned],
                [r[2] for r in planned],
                [r[3] for r in planned],
                [r[4] for r in planned],
            ],
        )
        id_of = {wid: aid for aid, wid in cur.fetchall()}  # one new attempt per workload
        attempt_ids = [id_of[r[0]] for r in planned]
        link_rows = [(aid, g, rank) for aid, plan in zip(attempt_ids, gpu_plan, strict=True) for g, rank in plan]
        cur.execute(
            f"INSERT INTO {links} (attempt_id, gpu_id, rank, open) "  # noqa: S608 - table name from the model, values are parameters
            "SELECT a, g, r, TRUE FROM unnest(%s::bigint[], %s::bigint[], %s::integer[]) "
            "WITH ORDINALITY AS t(a, g, r, i) ORDER BY i",
            [[r[0] for r in link_rows], [r[1] for r in link_rows], [r[2] for r in link_rows]],
        )
    return attempt_ids


def _insert_events_pg(events: list[WorkloadEvent]) -> None:
    """Insert the tick's workload events with one ``INSERT … SELECT FROM unnest(…)`` (the data as
    one JSON array, as :func:`_write_reasons_pg` passes details) and give each object its pk, as
    ``bulk_create`` does (the notifications name events by pk): the same rows without Django's
    per-object preparation (1,952 ``placed`` events a tick after an hour without one). The rows
    come back in insertion order (as ``bulk_create`` relies on); a mismatch raises rather than
    mis-number an event."""
    table = WorkloadEvent._meta.db_table
    rows_sql, params = _rows_with_json(
        [
            ("at", "timestamptz", [e.at for e in events]),
            ("kind", "text", [e.kind for e in events]),
            ("message", "text", [e.message for e in events]),
            ("actor", "bigint", [e.actor_id for e in events]),
            ("w", "bigint", [e.workload_id for e in events]),
        ],
        "data",
        [e.data for e in events],
    )
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} (at, kind, message, data, actor_id, workload_id) "  # noqa: S608 - table name from the model, values are parameters
            f"SELECT r.at, r.kind, r.message, d.data, r.actor, r.w FROM {rows_sql} ORDER BY n "
            "RETURNING id, workload_id, kind",
            params,
        )
        rows = cur.fetchall()
    if [(w, k) for _pk, w, k in rows] != [(e.workload_id, e.kind) for e in events]:
        raise RuntimeError("tick: the inserted events came back in another order")
    for event, (pk, _w, _k) in zip(events, rows, strict=True):
        event.pk = pk
        event._state.adding = False
        event._state.db = connection.alias


def _apply_stops(
    decisions: p.Decisions,
    index: SnapshotIndex,
    now: datetime,
    result: TickResult,
    touched: set[int],
    events: list[WorkloadEvent],
) -> dict[int, int]:
    """Issue the stops; return the wanted nominations as GPU pk → workload pk."""
    nominations: dict[int, int] = {}
    pk_of = index.pk_of()
    for wid, refs in decisions.nominations.items():
        for ref in refs:
            gid = index.gpu_id_by_ref.get(tuple(ref))  # type: ignore[arg-type]  # refs may arrive as lists
            if gid is not None:
                nominations[gid] = pk_of(wid)
    if not decisions.stops:
        return nominations
    by_reason: dict[str, list[int]] = defaultdict(list)
    stop_of: dict[int, p.Stop] = {}
    for stop in decisions.stops:
        aid = int(stop.attempt)
        if aid in index.attempts:
            by_reason[str(stop.reason)].append(aid)
            stop_of[aid] = stop
    claimed = set(
        Attempt.objects.select_for_update()
        .filter(pk__in=stop_of, ended_at__isnull=True, stop_requested_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    result.dropped += len(decisions.stops) - len(claimed)
    for reason, ids in sorted(by_reason.items()):
        ids = [a for a in ids if a in claimed]
        if ids:
            Attempt.objects.filter(pk__in=ids, ended_at__isnull=True, stop_requested_at__isnull=True).update(
                stop_requested_at=now, stop_reason=reason
            )
    workload_ids = [index.attempts[a].workload_id for a in claimed]
    Workload.objects.filter(pk__in=workload_ids, state__in=[Workload.State.STARTING, Workload.State.RUNNING]).update(
        state=Workload.State.PREEMPTING
    )
    # Events name attempts by their number within the workload (as every other event does), not pk.
    numbers = dict(Attempt.objects.filter(pk__in=claimed).values_list("pk", "number")) if claimed else {}
    for aid in sorted(claimed):
        info = index.attempts[aid]
        stop = stop_of[aid]
        result.stops.append(aid)
        touched.update(info.host_ids)
        # Nominations are exactly ``decisions.nominations`` (the n GPUs the preemptor will
        # take), never every GPU of its victims: the policy starts a nominated workload on
        # its nominated GPUs, so extra ones would start it on more GPUs than it asked for.
        events.append(
            WorkloadEvent(
                workload_id=info.workload_id,
                at=now,
                kind=str(stop.reason),
                message=f"attempt {numbers.get(aid, '?')} stopping: {stop.reason}"
                + (f" for workload #{stop.for_workload}" if stop.for_workload else ""),
                data={
                    "attempt": aid,
                    "attempt_number": numbers.get(aid),
                    "reason": str(stop.reason),
                    "for_workload": stop.for_workload,
                },
            )
        )
    return nominations


def _apply_nominations(wanted: dict[int, int], started: set[int], index: SnapshotIndex, gone: set[int]) -> None:
    """Make GPU.nominated_for equal ``wanted`` (GPU pk → workload pk); started workloads lose theirs.
    The GPUs the snapshot read nominated for a workload of ``gone`` (canceled or updated since, which
    dealt with its nominations: :func:`_lock_workloads`) are left as they are now (brk46: a rename
    committed meanwhile kept them, and this tick cleared them)."""
    wanted = {gid: wid for gid, wid in wanted.items() if wid not in started}
    changed = {gid for gid in set(index.nominated) | set(wanted) if index.nominated.get(gid) != wanted.get(gid)}
    changed |= {gid for gid, wid in index.nominated.items() if wid in started}
    changed -= {gid for gid, wid in index.nominated.items() if wid in gone}
    if not changed:
        return
    # docs/locking.md: every GPU row both UPDATEs write, in id order, in one statement first (gpu53:
    # the clear then the set took them out of id order and deadlocked with the heartbeat's samples).
    GPU.objects.filter(pk__in=changed).lock_in_id_order()
    to_clear = [gid for gid in changed if gid not in wanted]
    if to_clear:
        GPU.objects.filter(pk__in=to_clear).update(nominated_for=None)
    to_set = {gid: wanted[gid] for gid in changed if gid in wanted}
    if to_set:
        GPU.objects.filter(pk__in=to_set).update(
            nominated_for=Case(*(When(pk=gid, then=Value(wid)) for gid, wid in to_set.items()))
        )


def _apply_host_states(
    host_states: dict[str, p.HostState], index: SnapshotIndex, now: datetime, result: TickResult
) -> None:
    # In host id order (docs/locking.md), like every statement that locks several hosts.
    for name, state in sorted(host_states.items(), key=lambda item: (index.host_id_by_name.get(item[0], 0), item[0])):
        hid = index.host_id_by_name.get(name)
        before = index.host_state_by_name.get(name)
        if hid is None or before is None or before == str(state):
            continue
        # Conditional: an admin's resume or the agent going offline may have committed meanwhile.
        if Host.objects.filter(pk=hid, state=before).update(state=str(state)):
            HostEvent.objects.create(
                host_id=hid,
                at=now,
                kind=str(state),
                message=f"{before} → {state} (scheduler)",
                data={"from": before, "to": str(state)},
            )
            result.host_states[name] = str(state)


class ReasonRow(NamedTuple):
    """A pending workload's reason to store: its pk, reason code and detail, and the
    ``spec_version`` it was judged on (written only where the version is still that: a hold or a
    release raises it, so a reason judged before one is not written over it)."""

    pk: int
    reason: str
    detail: dict[str, object]
    version: int = 0
    """the workload's ``spec_version`` the reason was judged on: an updated one keeps its cleared reason"""
    arrival: bool = False
    """it had no reason yet (new or requeued since the last tick)"""
    wait_moved: bool = False
    """it moved into or out of a wait no forward simulation ends (held, unschedulable, an ``after``
    list: not :func:`~scheduler.estimates.estimable`): the estimates of other work counted it as
    starting or not, and its own is cleared or due (est48: a budget's release asked for none)"""


def _changed_reasons(pending: dict[str, p.PendingInfo], index: SnapshotIndex) -> list[ReasonRow]:
    """The reasons of ``pending`` that differ from those the snapshot read, by pk: the rows
    :func:`_apply_pending` writes, which :func:`_lock_workloads` locks with the tick's others."""
    from scheduler.estimates import estimable

    changed: list[ReasonRow] = []
    pk_of = index.pk_of()
    for wid_s, info in pending.items():
        wid = pk_of(wid_s)
        if wid not in index.pending_reason:
            continue
        reason, detail = str(info.reason), dict(info.detail)
        before = index.pending_reason[wid]
        if before != (reason, detail):
            moved = bool(before[0]) and estimable(*before) != estimable(reason, detail)
            changed.append(ReasonRow(wid, reason, detail, index.pending_version.get(wid, 0), not before[0], moved))
    changed.sort(key=lambda r: r.pk)  # rows are taken in one order, as everywhere else
    return changed


def _apply_pending(changed: list[ReasonRow], started: set[int]) -> int:
    """Store each changed reason (:func:`_changed_reasons`; its rows locked by
    :func:`_lock_workloads`) but those of the workloads started, and only while still pending
    with the request the snapshot read (a cancel or an update committed since the snapshot keeps
    its cleared reason).
    Returns how many of them had no reason yet (new or requeued since the last tick) or moved into
    or out of a wait no estimate ends (``ReasonRow.wait_moved``): each asks for estimates."""
    changed = [r for r in changed if r.pk not in started]
    arrivals = sum(r.arrival or r.wait_moved for r in changed)
    if not changed:
        return 0
    if connection.vendor == "postgresql":
        written = _write_reasons_pg(changed)
        changed = [r for r in changed if r.pk in written]  # as below: the estimates follow the rows written
    else:
        still_pending = dict(
            Workload.objects.select_for_update()
            .filter(pk__in=[r.pk for r in changed], state=Workload.State.PENDING)
            .order_by("pk")
            .values_list("pk", "spec_version")
        )
        changed = [r for r in changed if still_pending.get(r.pk) == r.version]
        if changed:
            Workload.objects.bulk_update(
                [Workload(pk=r.pk, pending_reason=r.reason, pending_detail=r.detail) for r in changed],
                ["pending_reason", "pending_detail"],
                batch_size=500,
            )
    _cap_estimates(changed)
    _clear_estimates(changed)
    return arrivals


def _clear_estimates(changed: list[ReasonRow]) -> None:
    """A workload that now waits on a hold, hardware or an ``after`` list (not
    :func:`~scheduler.estimates.estimable`) has no estimated start, as its words say: its stored
    one, found before that wait, is cleared in the same transaction rather than shown beside the
    reason until the next estimates run (up to ``ESTIMATE_INTERVAL_S``). One UPDATE, only when such
    a reason was written."""
    from scheduler.estimates import estimable

    waiting = [r.pk for r in changed if not estimable(r.reason, r.detail)]
    if waiting:
        Workload.objects.filter(pk__in=waiting, state=Workload.State.PENDING, estimated_start__isnull=False).update(
            estimated_start=None, estimate_unfunded=False
        )


def _cap_estimates(changed: list[ReasonRow]) -> None:
    """A workload given a reservation starts by its latest start (``reservation_latest``: the
    reservation's start plus the grace, §3.8): its stored estimate, which the lists, the API and
    the CLI show, is capped in the same transaction, so no surface shows a later start than the
    reservation beside it until the next estimates run (which caps by it too). One conditional
    UPDATE per reservation stored by this tick (a few: at most one per host)."""
    from django.conf import settings
    from django.db.models import Q

    from scheduler.sim.estimate import reservation_latest

    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    for r in changed:
        start = r.detail.get("reserved_start")
        if not isinstance(start, int | float):
            continue
        latest = datetime.fromtimestamp(reservation_latest(start, grace), tz=UTC)
        Workload.objects.filter(pk=r.pk, state=Workload.State.PENDING, spec_version=r.version).filter(
            Q(estimated_start__isnull=True) | Q(estimated_start__gt=latest)
        ).update(estimated_start=latest, estimate_unfunded=False)  # a reservation is made for funded work


def _write_reasons_pg(changed: list[ReasonRow]) -> set[int]:
    """Write reasons with one ``UPDATE``, only on rows still pending: three parameters whatever
    the number of rows — the ids and the reason codes as arrays, the details as one JSON array
    (row *i*'s detail is its element *i*).

    Django's ``bulk_update`` builds a CASE expression per row and field in Python, a ``VALUES``
    list of three placeholders per row costs the driver a conversion per row, and a text array
    of JSON documents an escape of every quote (12,257 reasons: 0.42 s to pass them, against
    0.08 s as one JSON array); each dominated a tick with thousands of pending workloads. The
    rows are locked already (:func:`_lock_workloads`, id order: this statement's own order is
    PostgreSQL's choice, left50), so the condition on ``state`` reads them as a cancel committed
    before that lock left them (it keeps its cleared reason; a hold or a release its own reason),
    and the one on ``spec_version`` as an update left them; returns the pks written, so the
    estimates capped and cleared after it are those of the rows written (brk46: a reason judged on
    the old request, not written, still cleared the new request's estimate).
    """
    table = Workload._meta.db_table
    rows_sql, params = _rows_with_json(
        [
            ("id", "bigint", [r.pk for r in changed]),
            ("reason", "text", [r.reason for r in changed]),
            ("version", "bigint", [r.version for r in changed]),
        ],
        "detail",
        [r.detail for r in changed],
    )
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} AS w SET pending_reason = v.reason, pending_detail = v.detail "  # noqa: S608 - table name from the model, values are parameters
            f"FROM (SELECT r.id, r.reason, r.version, d.detail FROM {rows_sql}) AS v "
            "WHERE w.id = v.id AND w.state = 'pending' AND w.spec_version = v.version RETURNING w.id",
            params,
        )
        return {pk for (pk,) in cur.fetchall()}


def _rows_with_json(
    columns: Sequence[tuple[str, str, list[Any]]], json_column: str, documents: Iterable[object]
) -> tuple[str, list[Any]]:
    """The rows of a bulk statement as a ``FROM`` item and its parameters: one array per column
    (``(name, SQL type, values)``, ``unnest`` as ``r(names…, n)``) and a column of JSON documents
    (``json_column`` of ``d``) passed as one JSON array (:func:`_json_array`), joined on the
    ordinal ``n``: as many parameters as columns, whatever the number of rows."""
    arrays = ", ".join(f"%s::{sql_type}[]" for _name, sql_type, _values in columns)
    names = ", ".join(name for name, _type, _values in columns)
    sql = (
        f"unnest({arrays}) WITH ORDINALITY AS r({names}, n) "
        f"JOIN jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS d({json_column}, n) USING (n)"
    )
    return sql, [values for _name, _type, values in columns] + [_json_array(documents)]


def _json_array(values: Iterable[object]) -> str:
    """``values`` as one JSON array: the one parameter that carries a column of JSON documents
    into an ``unnest`` statement (``jsonb_array_elements``), where a text array would escape every
    quote of every document."""
    return json.dumps(list(values), separators=(",", ":"))


def _describe(gpus: tuple[p.GpuRef, ...]) -> str:
    by_host: dict[str, list[int]] = defaultdict(list)
    for host, idx in gpus:
        by_host[host].append(idx)
    return ", ".join(f"{h}:{','.join(str(i) for i in sorted(ix))}" for h, ix in by_host.items())
