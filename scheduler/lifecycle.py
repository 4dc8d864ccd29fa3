"""Attempt lifecycle and host liveness: what the server does when an agent speaks (DESIGN.md §4, §6).

Every function here is a service function: one transaction, conditional updates
on the rows it changes, events recorded, and a tick requested (and agents
pushed) only after the commit. Times are the server's clock at receipt; an
event that happened while the agent was disconnected carries its age in
seconds and is stamped ``receipt − age``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import BooleanField, Case, DateTimeField, Q, Subquery, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone

from agent.protocol import FATAL_XIDS
from fairway_cli.numbers import duration_text
from scheduler import histograms, metrics, notify
from scheduler.gpu_report import MISSING, missing_on_hold, stamped
from scheduler.gpu_text import gpu_text_problem
from scheduler.models import GPU, Attempt, AttemptGPU, Host, HostEvent, Workload, WorkloadEvent
from scheduler.stop_rules import MAX_START_FAILURES, REQUEUE_REASONS

logger = logging.getLogger(__name__)

_LIVE = (Workload.State.STARTING, Workload.State.RUNNING, Workload.State.PREEMPTING)


@dataclass(frozen=True, slots=True)
class GpuReport:
    """One GPU as the agent's hello describes it."""

    index: int
    uuid: str
    model: str
    memory_mb: int = 0
    health: str = GPU.Health.HEALTHY


@dataclass(frozen=True, slots=True)
class ExitReport:
    """An attempt that ended while the agent was away: exit code and age in seconds."""

    attempt_id: int
    exit_code: int | None
    age_s: float = 0.0
    failed_to_start: bool = False
    message: str = ""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's heartbeat sample. ``sample`` is stored verbatim as ``GPU.last_sample``."""

    index: int
    health: str
    xids: tuple[int, ...] = ()
    sample: Mapping[str, Any] | None = None


# --- helpers ---------------------------------------------------------------------------


def clean_text(text: str) -> str:
    """An agent's free text made storable: PostgreSQL text holds no NUL and no lone surrogate
    (UTF-8 cannot encode it); either would fail the whole transaction, so an exit carrying one
    would never be recorded."""
    text = text.replace("\x00", "\ufffd")
    if _has_surrogate(text):
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def attempt_pks(wire_ids: Iterable[int]) -> dict[int, int]:
    """Wire id → primary key of the attempts the agent link names (``Attempt.wire_id``); ids
    the database does not know (e.g. attempts from before a restore) are left out."""
    ids = sorted(set(wire_ids))
    if not ids:
        return {}
    return dict(Attempt.objects.filter(wire_id__in=ids).values_list("wire_id", "pk"))


def hello_gpu_problem(gpus: Sequence[GpuReport]) -> str | None:
    """Why a hello's GPU inventory cannot be registered, or None.

    Indices and UUIDs are unique within the hello (the database allows one GPU per index
    and per UUID), UUID and model follow :func:`scheduler.gpu_text.gpu_text_problem` (as a join).
    """
    seen_index: set[int] = set()
    seen_uuid: set[str] = set()
    for g in gpus:
        if g.index in seen_index:
            return f"GPU index {g.index} is listed twice"
        if g.uuid in seen_uuid:
            return f"GPU UUID {g.uuid[:64]!r} is listed twice"
        seen_index.add(g.index)
        seen_uuid.add(g.uuid)
        for what, value in (("uuid", g.uuid), ("model", g.model)):
            if problem := gpu_text_problem(value):
                return f"GPU {g.index}: its {what} {problem}"
    return None


def _attempts_on_host(host_id: int, attempt_ids: Iterable[int] | None = None) -> set[int]:
    """Open attempts holding at least one GPU of ``host_id`` (optionally among ``attempt_ids``)."""
    qs = AttemptGPU.objects.filter(open=True, gpu__host_id=host_id, attempt__ended_at__isnull=True)
    if attempt_ids is not None:
        qs = qs.filter(attempt_id__in=list(attempt_ids))
    return set(qs.values_list("attempt_id", flat=True))


def charged_seconds(started_at: datetime, ended_at: datetime) -> int:
    """The seconds a GPU of an attempt is charged from its confirmed start to its end: whole UNIX
    seconds (floored) of each, as the policy counts a closed attempt's usage (``snapshot._epoch_col``)."""
    return max(0, math.floor(ended_at.timestamp()) - math.floor(started_at.timestamp()))


def _end_attempt(
    attempt: Attempt,
    *,
    ended_at: datetime,
    reason: str,
    exit_code: int | None = None,
    message: str = "",
    locked: LockedWorkload | None = None,
    links: Sequence[tuple[int, int, bool]] | None = None,
) -> None:
    """Close ``attempt`` (locked by the caller), charge it, release its GPUs, move its workload on.
    ``locked``: its workload's fields as the caller read them under the workload's lock in this
    transaction (:func:`_lock_open_attempt_and_workload`); None: locked and read here. ``links``:
    its GPU rows (GPU, host, open) as the caller read them in this transaction; None: read here.

    Charge: ``gpus × (ended_at − started_at)`` GPU-seconds for allocated attempts
    that were confirmed started (:func:`charged_seconds`: so history, ``ls`` and the budget's
    usage agree; ``int(ended_at − started_at)`` was up to a second per GPU less); 0 otherwise
    (§4). A lost attempt passes the host's last heartbeat as ``ended_at``.
    """
    ended_at = max(ended_at, attempt.started_at or attempt.placed_at)
    if links is None:
        links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu_id", "gpu__host_id", "open"))
    gpu_links = [(gpu, host) for gpu, host, _open in links]
    _close_attempt(attempt, ended_at, reason, exit_code, len(gpu_links))
    attempt.save(update_fields=["ended_at", "end_reason", "exit_code", "charged_gpu_seconds"])
    AttemptGPU.objects.filter(attempt=attempt, open=True).update(open=False)

    if locked is None:
        workload = Workload.objects.select_for_update().get(pk=attempt.workload_id)
    else:
        workload = _workload_of(attempt, locked)
    event = _move_workload_on(workload, attempt, message)
    workload.save(update_fields=["state", "finished_at", "start_failures", "retries_used", "updated_at"])
    if workload.state in Workload.FINAL_STATES:
        GPU.objects.filter(nominated_for_id=workload.pk).update_in_id_order(nominated_for=None)
    event.save()
    notify.events_on_commit([event])
    notify.request_tick_on_commit(workload.cluster_id)
    notify.push_hosts_on_commit({hid for _gid, hid in gpu_links})


def _close_attempt(attempt: Attempt, ended_at: datetime, reason: str, exit_code: int | None, gpus: int) -> None:
    """Stamp ``attempt``'s end in memory (:func:`_end_attempt`'s charge rule, ``gpus`` its GPU rows).

    A gang stopped ``lost`` (a part lost with its host or gone from its agent, :func:`_release_gang_part`)
    ends, as every lost attempt does, at the instant its part was lost (the stop's: that host's last
    heartbeat; DESIGN.md §4), though its other parts held their GPUs until they reported (brk37)."""
    if reason == Attempt.EndReason.LOST == attempt.stop_reason and attempt.stop_requested_at is not None:
        ended_at = max(min(ended_at, attempt.stop_requested_at), attempt.started_at or attempt.placed_at)
    charged = 0
    if attempt.allocated and attempt.started_at is not None:
        charged = gpus * charged_seconds(attempt.started_at, ended_at)
    attempt.ended_at = ended_at
    attempt.end_reason = reason
    attempt.exit_code = exit_code
    attempt.charged_gpu_seconds = charged


def _workload_of(attempt: Attempt, locked: LockedWorkload) -> Workload:
    """The fields :func:`_move_workload_on` reads and writes, as locked (no second read of the row)."""
    return Workload(
        pk=attempt.workload_id,
        state=locked.state,
        finished_at=locked.finished_at,
        start_failures=locked.start_failures,
        retries_used=locked.retries_used,
        retries=locked.retries,
        cluster_id=locked.cluster_id,
    )


def _move_workload_on(workload: Workload, attempt: Attempt, message: str) -> WorkloadEvent:
    """Move ``workload`` on after its ``attempt`` ended (closed by :func:`_close_attempt`), in memory:
    requeued, retried, or final (§1, docs/jobs.md); its event, unsaved."""
    reason, exit_code, ended_at = attempt.end_reason, attempt.exit_code, attempt.ended_at
    message = clean_text(message)
    data = {
        "attempt": attempt.pk,
        "reason": reason,
        "exit_code": exit_code,
        "charged_gpu_seconds": attempt.charged_gpu_seconds,
    }
    if reason == Attempt.EndReason.FAILED_TO_START:
        workload.start_failures += 1
    retry = reason == Attempt.EndReason.FAILED and workload.retries_used < workload.retries
    if workload.state in _LIVE:
        if reason in REQUEUE_REASONS or (
            reason == Attempt.EndReason.FAILED_TO_START and workload.start_failures <= MAX_START_FAILURES
        ):
            # Requeue: same id, original submitted_at and seq, so it keeps its place (§1 requeue).
            workload.state = Workload.State.PENDING
            workload.finished_at = None
            kind = "requeued"
        elif retry:
            # A non-zero exit of its own with retries left (docs/jobs.md): a new attempt later,
            # with the same submission time, like a requeue.
            workload.retries_used += 1
            workload.state = Workload.State.PENDING
            workload.finished_at = None
            kind = "retried"
            data["retry"] = workload.retries_used
            data["retries"] = workload.retries
        else:
            workload.state = {
                Attempt.EndReason.SUCCEEDED: Workload.State.SUCCEEDED,
                Attempt.EndReason.CANCELED: Workload.State.CANCELED,
            }.get(reason, Workload.State.FAILED)  # type: ignore[call-overload]  # TextChoices keys
            workload.finished_at = ended_at
            kind = str(workload.state)
    else:
        kind = "attempt_ended"  # the workload already moved on (e.g. canceled while pending a stop)
    return WorkloadEvent(
        workload_id=workload.pk,
        at=timezone.now(),
        kind=kind,
        message=f"attempt {attempt.number} ended {reason}"
        + (f" (exit {exit_code})" if exit_code is not None else "")
        + (f" (retry {workload.retries_used} of {workload.retries})" if kind == "retried" else "")
        + (f": {message}" if message else ""),
        data=data,
    )


class LockedWorkload(NamedTuple):
    """The fields of an attempt's workload the attempt events use, read under its row lock."""

    state: str
    min_runtime_s: int
    submitted_at: datetime
    budget_id: int
    cluster_id: int
    owner_id: int
    finished_at: datetime | None
    start_failures: int
    retries_used: int
    retries: int
    mounts: list[Any]


_LOCKED_WORKLOAD_FIELDS = LockedWorkload._fields


def _lock_open_attempt(host: Host | None, attempt_id: int) -> Attempt | None:
    """The open attempt ``attempt_id``, row-locked, if ``host`` holds a GPU of it (None: ignore).

    Locks in the one order of docs/locking.md: the attempt's **workload first**, then the
    attempt (a cancel does the same; the reverse order deadlocked against it on PostgreSQL).
    """
    found = _lock_open_attempt_and_workload(host, attempt_id)
    return None if found is None else found[0]


def _lock_open_attempt_and_workload(host: Host | None, attempt_id: int) -> tuple[Attempt, LockedWorkload] | None:
    """:func:`_lock_open_attempt`, with the fields of its workload read by the workload's lock
    (:class:`LockedWorkload`): an attempt event reads them there instead of once each.

    The workload is found through the open attempt in the locking statement itself (an attempt's
    workload never changes, so the subquery needs no lock of its own; only the workload's row is
    locked, ``of=("self",)``), then the attempt is locked."""
    open_attempt = Attempt.objects.filter(pk=attempt_id, ended_at__isnull=True).values("workload_id")[:1]
    row = (
        Workload.objects.select_for_update(of=("self",))
        .filter(pk=Subquery(open_attempt))
        .values_list(*_LOCKED_WORKLOAD_FIELDS)
        .first()
    )
    if row is None:
        return None
    attempts = Attempt.objects.select_for_update(of=("self",)).filter(pk=attempt_id, ended_at__isnull=True)
    if host is not None:
        attempts = attempts.annotate(on_host=_on_host_sql(host.pk))
    attempt = attempts.first()
    if attempt is None:
        return None
    if host is not None and not attempt.on_host:
        logger.warning("host %s spoke of attempt %s which is not on it; ignored", host.name, attempt_id)
        return None
    return attempt, LockedWorkload(*row)


def _on_host_sql(host_id: int) -> RawSQL:
    """Whether the attempt row holds an open GPU row of ``host_id``: :func:`_attempts_on_host` of
    one attempt, as a column of the attempt's own locking read (its oracle: that function)."""
    link, gpu, attempt = AttemptGPU._meta.db_table, GPU._meta.db_table, Attempt._meta.db_table
    return RawSQL(  # noqa: S611 -- the models' own names; the host id a parameter
        f"EXISTS (SELECT 1 FROM {link} l JOIN {gpu} g ON g.id = l.gpu_id"  # noqa: S608 -- the models' own names
        f" WHERE l.attempt_id = {attempt}.id AND l.open AND g.host_id = %s)",
        [host_id],
        output_field=BooleanField(),
    )


# --- attempt events --------------------------------------------------------------------


def agent_time(now: datetime, age_s: float | None, placed_at: datetime | None) -> datetime:
    """When an event the agent reports ``age_s`` seconds old happened: ``now − age_s``, ``now``
    being the receipt of the report (never a future time: ``age_s`` is never negative), and never
    before ``placed_at`` (nothing of an attempt happens before the server placed it; an agent's
    clock that ran ahead cannot date a start earlier). ``age_s`` None or 0: ``now`` itself."""
    if not age_s:
        return now
    at = now - timedelta(seconds=max(0.0, float(age_s)))
    return max(at, min(placed_at, now)) if placed_at is not None else at


def _confirm_start(
    attempt: Attempt, host: Host, at: datetime, now: datetime, note: str = "", workload: LockedWorkload | None = None
) -> None:
    """Stamp the locked, unconfirmed ``attempt`` started at ``at`` (learnt at ``now``): ``started_at``,
    its protection window (allocated: ``at + M``, DESIGN.md §4), the workload ``running``, a
    ``started`` event. ``workload``: its workload's fields as read under the workload's lock in this
    transaction (:func:`_lock_open_attempt_and_workload`); None: read here."""
    if workload is None:
        row = Workload.objects.values_list(*_LOCKED_WORKLOAD_FIELDS).get(pk=attempt.workload_id)
        workload = LockedWorkload(*row)
    attempt.started_at = at
    if attempt.allocated:
        attempt.protected_until = at + timedelta(seconds=workload.min_runtime_s)
    attempt.save(update_fields=["started_at", "protected_until"])
    histograms.attempt_started(
        attempt, at, submitted_at=workload.submitted_at, budget_id=workload.budget_id, cluster_id=workload.cluster_id
    )
    if workload.state == Workload.State.STARTING:
        Workload.objects.filter(pk=attempt.workload_id, state=Workload.State.STARTING).update(
            state=Workload.State.RUNNING, updated_at=now
        )
    event = WorkloadEvent.objects.create(
        workload_id=attempt.workload_id,
        at=at,
        kind="started",
        message=f"attempt {attempt.number} started on {host.name}" + (f" ({note})" if note else ""),
        data={"attempt": attempt.pk, "host": host.name},
    )
    notify.events_on_commit([event], owners={attempt.workload_id: workload.owner_id})
    notify.request_tick_on_commit(host.cluster_id)


def attempt_started(host: Host, attempt_id: int, age_s: float | None = None, *, now: datetime | None = None) -> bool:
    """The agent confirms ``attempt_id`` started ``age_s`` seconds before ``now`` (the receipt of
    its report; None or 0: a live report, at ``now``): stamp ``started_at`` and the protection
    window from that time (:func:`agent_time`: never in the future, never before the placement).

    Ignores unknown, foreign, ended or already-confirmed attempts (returns False).
    The first confirmation of a gang's parts starts it.
    """
    now = now or timezone.now()
    with transaction.atomic():
        found = _lock_open_attempt_and_workload(host, attempt_id)
        if found is None or found[0].started_at is not None:
            return False
        attempt, workload = found
        _confirm_start(attempt, host, agent_time(now, age_s, attempt.placed_at), now, workload=workload)
    return True


@dataclass(frozen=True, slots=True)
class StartReport:
    """One ``started``/``running`` report for :func:`attempts_started`: as :func:`attempt_started`'s
    arguments (``attempt_id`` a primary key; ``now`` the report's receipt)."""

    host: Host
    attempt_id: int
    age_s: float | None
    now: datetime


START_BATCH_MAX = 128
"""Reports :func:`attempts_started` writes in one call at most (the caller splits a larger burst):
one statement per step on both databases (SQLite's 999 parameters bound the attempts' update)."""


def attempts_started(reports: Sequence[StartReport]) -> list[bool]:
    """:func:`attempt_started` of each report (its oracle: that function, report by report, in
    order), in **one transaction of set-based statements whatever their number**: the workloads
    locked in one statement (id order), then the attempts (id order) as docs/locking.md orders
    them, their hosts' open GPU rows read once, the attempts' and the workloads' updates, the
    events' insert, each one statement; the notifications' and the histograms' work once for all.
    ``reports`` name distinct attempts (the caller runs a report of an attempt named twice through
    :func:`attempt_started`, in its turn); at most :data:`START_BATCH_MAX` of them. True where the
    report confirmed a start, as :func:`attempt_started` returns."""
    if not reports:
        return []
    if len({r.attempt_id for r in reports}) != len(reports) or len(reports) > START_BATCH_MAX:
        raise ValueError("attempts_started: distinct attempts, at most START_BATCH_MAX of them")
    ids = sorted({r.attempt_id for r in reports})
    with transaction.atomic():
        workloads, attempts = _lock_open_attempts_and_workloads(ids)
        on_host = set(
            AttemptGPU.objects.filter(open=True, attempt_id__in=list(attempts)).values_list(
                "attempt_id", "gpu__host_id"
            )
        )
        started: list[tuple[StartReport, Attempt, LockedWorkload, datetime]] = []
        for r in reports:
            attempt = attempts.get(r.attempt_id)
            if attempt is None:
                continue
            if (attempt.pk, r.host.pk) not in on_host:
                logger.warning("host %s spoke of attempt %s which is not on it; ignored", r.host.name, r.attempt_id)
                continue
            if attempt.started_at is not None:
                continue
            workload = workloads[attempt.workload_id]
            at = agent_time(r.now, r.age_s, attempt.placed_at)
            attempt.started_at = at
            if attempt.allocated:
                attempt.protected_until = at + timedelta(seconds=workload.min_runtime_s)
            started.append((r, attempt, workload, at))
        if started:
            _confirm_starts(started)
    done = {r.attempt_id for r, *_ in started}
    return [r.attempt_id in done for r in reports]


def _confirm_starts(started: Sequence[tuple[StartReport, Attempt, LockedWorkload, datetime]]) -> None:
    """:func:`_confirm_start` of many attempts (stamped by the caller, locked with their workloads):
    one statement per write."""
    Attempt.objects.bulk_update([a for _r, a, _w, _at in started], ["started_at", "protected_until"])
    histograms.attempts_started([(a, at, w) for _r, a, w, at in started])
    running = {a.workload_id: r.now for r, a, w, _at in started if w.state == Workload.State.STARTING}
    if running:
        Workload.objects.filter(pk__in=list(running), state=Workload.State.STARTING).update(
            state=Workload.State.RUNNING,
            updated_at=Case(
                *(When(pk=pk, then=Value(now)) for pk, now in running.items()), output_field=DateTimeField()
            ),
        )
    events = WorkloadEvent.objects.bulk_create(
        [
            WorkloadEvent(
                workload_id=a.workload_id,
                at=at,
                kind="started",
                message=f"attempt {a.number} started on {r.host.name}",
                data={"attempt": a.pk, "host": r.host.name},
            )
            for r, a, _w, at in started
        ]
    )
    notify.events_on_commit(events, owners={a.workload_id: w.owner_id for _r, a, w, _at in started})
    for cluster_id in sorted({r.host.cluster_id for r, *_ in started}):
        notify.request_tick_on_commit(cluster_id)


def exit_time(now: datetime, age_s: float | None, attempt: Attempt, alive_at: datetime | None = None) -> datetime:
    """When the process of ``attempt`` ended, by an exit report ``age_s`` seconds old received at
    ``now``: ``now − age_s``, but never before what the server knows of it: its start (the
    confirmed start, else its placement) nor ``alive_at``, the receipt of the last report that
    the agent ran it (a hello or heartbeat listing it running, a ``running`` report; capped at
    ``now``). So an ``age_s`` larger than the agent can know (a hostile agent, a clock that jumped)
    cannot date the end before a stop the process was still running at, and escape the stop's
    reason (DESIGN.md §4), nor shorten the charge below what the agent itself reported."""
    at = now - timedelta(seconds=max(0.0, float(age_s or 0.0)))
    floor = attempt.started_at or attempt.placed_at
    if alive_at is not None:
        floor = max(floor, min(alive_at, now)) if floor is not None else min(alive_at, now)
    return max(at, floor) if floor is not None else at


def without_host_paths(mounts: list[Any], message: str) -> str:
    """An agent's ``message`` about an attempt of a workload whose ``mounts`` are these, with each mount's
    host paths written as the mount's name: it goes into the workload's events and a host's cordon
    event, which everyone reads, while a mount's host path is shown only to those who may read the
    workload's private parts (``WorkloadDetailSerializer.get_mounts``). The process runtime's
    "mount data: /srv/… is not a directory" and a docker bind error named them (brk35)."""
    if not message:
        return message
    paths = [(m.get("host_path"), m.get("name")) for m in mounts if isinstance(m, dict)]
    for path, name in sorted((p for p in paths if isinstance(p[0], str) and len(p[0]) > 1), key=lambda p: -len(p[0])):
        message = message.replace(path, f"<host path of mount {name}>")
    return message


def attempt_exited(
    host: Host | None,
    attempt_id: int,
    exit_code: int | None,
    age_s: float = 0.0,
    *,
    message: str = "",
    now: datetime | None = None,
    alive_at: datetime | None = None,
) -> bool:
    """The attempt's process ended ``age_s`` seconds ago with ``exit_code`` (None: killed/unknown).

    End reason: the stop's reason if the server issued one before the exit, else
    ``succeeded`` (exit 0) or ``failed`` — an attempt that ended on its own before a cancel
    (or any stop) keeps its own end (DESIGN.md §4). The end is stamped with the agent's time
    (``now − age_s``, ``now`` being the receipt time: pass it when the report waited before
    being processed), never the time the lock was obtained, and never before what the server
    knows (:func:`exit_time`: the start, ``alive_at``); the reason is decided on that same
    instant. Returns False when the attempt is unknown, foreign or already ended (a duplicate report).
    """
    now = now or timezone.now()
    with transaction.atomic():
        found = _lock_open_attempt_and_workload(host, attempt_id)
        if found is None:
            return False
        attempt, workload = found
        message = without_host_paths(workload.mounts or [], message)
        ended_at = exit_time(now, age_s, attempt, alive_at)
        if attempt.started_at is None:
            # It ran (the agent reports its exit) but its start never reached the server (an
            # agent older than the repeated start report, or a report lost to a server error):
            # dated at the placement, as Slurm dates a job's start at its allocation (the GPUs
            # were held from then). docs/policy.md, "An exit without a confirmed start".
            note = "dated at its placement: its start was never reported"
            _confirm_start(attempt, host or attempt.host, attempt.placed_at, now, note, workload=workload)
        links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu_id", "gpu__host_id", "open"))
        if _release_gang_part(attempt, host, links, ended_at, exit_code, workload.cluster_id):
            return True
        reason, exit_code = _exit_outcome(attempt, exit_code, ended_at)
        _end_attempt(
            attempt,
            ended_at=ended_at,
            reason=reason,
            exit_code=exit_code,
            message=message,
            locked=workload,
            links=links,
        )
    return True


def _exit_reason(attempt: Attempt, exit_code: int | None, ended_at: datetime) -> str:
    """An exit's end reason (:func:`attempt_exited`): the stop's if issued before ``ended_at``."""
    if attempt.stop_reason and (attempt.stop_requested_at is None or attempt.stop_requested_at <= ended_at):
        return attempt.stop_reason
    return Attempt.EndReason.SUCCEEDED if exit_code == 0 else Attempt.EndReason.FAILED


PART_EXIT_REASONS = frozenset({Attempt.EndReason.SUCCEEDED, Attempt.EndReason.FAILED})
"""The stop reasons only a gang's part issues, by exiting on its own (:func:`_release_gang_part`)."""


def _exit_outcome(attempt: Attempt, exit_code: int | None, ended_at: datetime) -> tuple[str, int | None]:
    """An exit's end reason (:func:`_exit_reason`) and exit code: a gang that ends as its first part
    to exit on its own (:func:`_release_gang_part`) keeps that part's code, not the SIGTERM of the last."""
    reason = _exit_reason(attempt, exit_code, ended_at)
    if reason == attempt.stop_reason and reason in PART_EXIT_REASONS:
        return reason, attempt.exit_code
    return reason, exit_code


def _release_gang_part(
    attempt: Attempt,
    host: Host | None,
    links: Sequence[tuple[int, int, bool]],
    ended_at: datetime,
    exit_code: int | None,
    cluster_id: int,
    failed_start: str | None = None,
    *,
    gone: str | None = None,
) -> bool:
    """The exit of one part of a gang (``attempt``, locked; ``links`` its GPU rows: GPU, host, open)
    reported by ``host`` while other hosts still hold parts: the part's GPUs are released (its rows
    closed), the attempt stays open until the last part reports, and, unless a stop was issued
    already (before this part's exit), the others are stopped now with this part's own outcome as
    the stop's reason (the gang ends as its first part to exit on its own, with that part's exit
    code: ``PART_EXIT_REASONS``; ``failed_start``: the part failed to start, saying so, and the gang ends as
    :func:`attempt_failed_to_start` ends one; ``gone``: how the part was lost (its agent reconnected
    without it, :func:`host_hello`; its host was silent past ``HOST_LOST_AFTER_S``, :func:`sweep_hosts`),
    and the gang ends ``lost``, requeued). True when it did so; False (end the attempt as usual)
    when ``host`` holds the last part.

    Ending the whole attempt at the first part's exit (brk36) released every host's GPUs while the
    other parts still ran (their stop's grace period: 30 s by default): the tick placed new work on
    GPUs a process of the gang still held. A gang is still charged as one attempt: all its GPUs from
    its start to its last part's release (docs/policy.md, "A gang's parts exit")."""
    if host is None or not any(is_open and hid != host.pk for _g, hid, is_open in links):
        return False
    # the part's GPU-time ends here in the pyramid, as the live count frees its GPUs now (words63)
    released_at = max(ended_at, attempt.started_at or attempt.placed_at)
    AttemptGPU.objects.filter(attempt=attempt, open=True, gpu__host_id=host.pk).update(
        open=False, released_at=released_at
    )
    # An exit of its own from before the stop decides, as a single attempt's does (_exit_reason): a
    # preemption issued while the report was on its way requeued a gang whose part had exited 0 (brk37).
    own_exit_first = (
        failed_start is None
        and gone is None
        and attempt.stop_requested_at is not None
        and attempt.stop_requested_at > ended_at
    )
    if attempt.stop_requested_at is None or own_exit_first:
        if gone is not None:
            reason, said = Attempt.EndReason.LOST, gone
        elif failed_start is not None:
            reason = Attempt.EndReason.FAILED if attempt.started_at else Attempt.EndReason.FAILED_TO_START
            said = f"failed to start ({failed_start[:200]})" if failed_start else "failed to start"
        else:
            reason = Attempt.EndReason.SUCCEEDED if exit_code == 0 else Attempt.EndReason.FAILED
            said = f"exited (exit {exit_code})" if exit_code is not None else "exited (no exit code)"
        attempt.stop_requested_at, attempt.stop_reason, attempt.exit_code = ended_at, reason, exit_code
        attempt.save(update_fields=["stop_requested_at", "stop_reason", "exit_code"])
        WorkloadEvent.objects.create(
            workload_id=attempt.workload_id,
            at=ended_at,
            kind="part_exited",
            message=f"attempt {attempt.number}: its part on {host.name} {said}; the other parts are "
            f"stopped and it ends {reason} once they release their GPUs",
            data={"attempt": attempt.pk, "host": host.name, "exit_code": exit_code, "reason": reason},
        )
    notify.request_tick_on_commit(cluster_id)  # the part's GPUs are free
    notify.push_hosts_on_commit({hid for _g, hid, _o in links})
    return True


@dataclass(frozen=True, slots=True)
class ExitEvent:
    """One ``exited`` report for :func:`attempts_exited`: :func:`attempt_exited`'s arguments."""

    host: Host
    attempt_id: int
    exit_code: int | None
    age_s: float
    message: str
    now: datetime
    alive_at: datetime | None


def attempts_exited(reports: Sequence[ExitEvent]) -> list[bool]:
    """:func:`attempt_exited` of each report (its oracle, report by report, in order), in **one
    transaction of set-based statements whatever their number**: the workloads locked in one
    statement (id order), then the attempts (id order); every GPU row of them read once (the host
    check and the charge); the attempts', the GPU rows', the workloads' and the nominations'
    updates, the events' insert, one statement each; notifications, tick requests and pushes once.
    An exit whose start was never reported is dated at its placement first, as there
    (:func:`_confirm_start`, its own statements). Distinct attempts, at most
    :data:`START_BATCH_MAX`. True where the report ended its attempt."""
    if not reports:
        return []
    if len({r.attempt_id for r in reports}) != len(reports) or len(reports) > START_BATCH_MAX:
        raise ValueError("attempts_exited: distinct attempts, at most START_BATCH_MAX of them")
    ids = sorted(r.attempt_id for r in reports)
    with transaction.atomic():
        workloads, attempts = _lock_open_attempts_and_workloads(ids)
        links: dict[int, list[tuple[int, int, bool]]] = {}
        for aid, gid, hid, is_open in AttemptGPU.objects.filter(attempt_id__in=list(attempts)).values_list(
            "attempt_id", "gpu_id", "gpu__host_id", "open"
        ):
            links.setdefault(aid, []).append((gid, hid, is_open))
        ended: list[tuple[Attempt, Workload, WorkloadEvent]] = []
        for r in reports:
            attempt = attempts.get(r.attempt_id)
            if attempt is None:
                continue
            if not any(hid == r.host.pk and is_open for _g, hid, is_open in links.get(attempt.pk, ())):
                logger.warning("host %s spoke of attempt %s which is not on it; ignored", r.host.name, r.attempt_id)
                continue
            locked = workloads[attempt.workload_id]
            ended_at = exit_time(r.now, r.age_s, attempt, r.alive_at)
            if attempt.started_at is None:  # as attempt_exited: dated at its placement
                note = "dated at its placement: its start was never reported"
                _confirm_start(attempt, r.host, attempt.placed_at, r.now, note, workload=locked)
            if _release_gang_part(attempt, r.host, links[attempt.pk], ended_at, r.exit_code, locked.cluster_id):
                continue  # its own statements, as there: the attempt stays open
            reason, code = _exit_outcome(attempt, r.exit_code, ended_at)  # on the unclamped instant, as there
            ended_at = max(ended_at, attempt.started_at or attempt.placed_at)
            _close_attempt(attempt, ended_at, reason, code, len(links[attempt.pk]))
            workload = _workload_of(attempt, locked)
            message = without_host_paths(locked.mounts or [], r.message)
            ended.append((attempt, workload, _move_workload_on(workload, attempt, message)))
        if ended:
            done = [a for a, _w, _e in ended]
            Attempt.objects.bulk_update(done, ["ended_at", "end_reason", "exit_code", "charged_gpu_seconds"])
            AttemptGPU.objects.filter(attempt_id__in=[a.pk for a in done], open=True).update(open=False)
            now = timezone.now()
            for _a, w, _e in ended:
                w.updated_at = now
            Workload.objects.bulk_update(
                [w for _a, w, _e in ended], ["state", "finished_at", "start_failures", "retries_used", "updated_at"]
            )
            final = [w.pk for _a, w, _e in ended if w.state in Workload.FINAL_STATES]
            if final:
                GPU.objects.filter(nominated_for_id__in=final).update_in_id_order(nominated_for=None)
            events = WorkloadEvent.objects.bulk_create([e for _a, _w, e in ended])
            notify.events_on_commit(events, owners={a.workload_id: workloads[a.workload_id].owner_id for a in done})
            for cluster_id in sorted({w.cluster_id for _a, w, _e in ended}):
                notify.request_tick_on_commit(cluster_id)
            notify.push_hosts_on_commit({hid for a in done for _g, hid, _o in links[a.pk]})
    closed = {a.pk for a, _w, _e in ended}
    return [r.attempt_id in closed for r in reports]


def _lock_open_attempts_and_workloads(ids: list[int]) -> tuple[dict[int, LockedWorkload], dict[int, Attempt]]:
    """The open attempts among ``ids`` and their workloads' fields, locked as docs/locking.md orders
    them: the workloads in one statement (id order), then the attempts (id order)."""
    open_attempts = Attempt.objects.filter(pk__in=ids, ended_at__isnull=True).values("workload_id")
    workloads = {
        row[0]: LockedWorkload(*row[1:])
        for row in Workload.objects.select_for_update(of=("self",))
        .filter(pk__in=Subquery(open_attempts))
        .order_by("pk")
        .values_list("pk", *_LOCKED_WORKLOAD_FIELDS)
    }
    attempts = {
        a.pk: a
        for a in Attempt.objects.select_for_update(of=("self",))
        .filter(pk__in=ids, ended_at__isnull=True, workload_id__in=list(workloads))
        .order_by("pk")
    }
    return workloads, attempts


def attempt_failed_to_start(
    host: Host | None,
    attempt_id: int,
    message: str = "",
    age_s: float = 0.0,
    *,
    now: datetime | None = None,
    alive_at: datetime | None = None,
) -> bool:
    """The agent could not start ``attempt_id`` (image pull, bad command, ...).

    Ends it ``failed_to_start`` (charged 0) and requeues the workload, at most
    :data:`MAX_START_FAILURES` times, then fails it. If a stop was already
    issued the stop's reason wins and the workload is requeued as usual. Dated as an exit
    (:func:`exit_time`, ``alive_at`` included): a report of one whose start was confirmed never
    ends it before the agent last said it ran (a year's ``age_s`` charged it nothing: brk35).
    """
    now = now or timezone.now()
    with transaction.atomic():
        found = _lock_open_attempt_and_workload(host, attempt_id)
        if found is None:
            return False
        attempt, workload = found
        message = without_host_paths(workload.mounts or [], message)
        if attempt.started_at is not None:
            reason = attempt.stop_reason or Attempt.EndReason.FAILED
        else:
            reason = attempt.stop_reason or Attempt.EndReason.FAILED_TO_START
        ended_at = exit_time(now, age_s, attempt, alive_at)
        links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu_id", "gpu__host_id", "open"))
        if _release_gang_part(attempt, host, links, ended_at, None, workload.cluster_id, failed_start=message):
            return True
        _end_attempt(attempt, ended_at=ended_at, reason=reason, message=message, locked=workload, links=links)
        if host is not None and reason == Attempt.EndReason.FAILED_TO_START:
            _cordon_after_start_failures(host, now, message)
    return True


def _cordon_after_start_failures(host: Host, now: datetime, message: str) -> None:
    """Cordon ``host`` when its last ``HOST_START_FAILURES`` attempts, of two workloads or more
    **of two owners or more**, all failed to start: the host is broken (an account that cannot run
    the program, a missing runtime), not the workloads, and each retry would land on it again while
    it is the emptiest fit. Like Slurm draining a node whose job launches fail; an operator
    resumes it. One owner's workloads never cordon a host alone (tryout24: one researcher's four
    submissions of a command not on the job's PATH cordoned both hosts of the cluster in 4 s):
    that is the owner's fault, which fails those workloads after their retries. Called with the
    workload and attempt locked; the host is locked after them (docs/locking.md)."""
    n = int(settings.FAIRWAY["HOST_START_FAILURES"])
    if n <= 0:
        return
    last = list(
        Attempt.objects.filter(gpus__host=host, ended_at__isnull=False)
        .distinct()
        .order_by("-ended_at", "-pk")
        .values_list("end_reason", "workload_id", "workload__image", "workload__owner_id")[:n]
    )
    failed = all(r == Attempt.EndReason.FAILED_TO_START for r, _, _, _ in last)
    if len(last) < n or not failed or len({w for _, w, _, _ in last}) < 2 or len({o for *_, o in last}) < 2:
        return
    if (host.labels or {}).get("runtime") == "process" and any(image for _, _, image, _ in last):
        return  # images on a process-runtime host: the placement's mismatch, not a broken host
    locked = Host.objects.select_for_update().get(pk=host.pk)
    if locked.state != Host.State.ACTIVE:
        return
    locked.state = Host.State.CORDONED
    locked.save(update_fields=["state"])
    HostEvent.objects.create(
        host=locked,
        at=now,
        kind="cordoned",
        message=f"the last {n} attempts on this host failed to start (last: {message[:200]}): "
        "active → cordoned until an operator resumes it",
        data={"from": Host.State.ACTIVE, "to": Host.State.CORDONED, "start_failures": n},
    )
    notify.request_tick_on_commit(locked.cluster_id)


def attempt_stopped_unknown(host: Host | None, attempt_id: int, *, now: datetime | None = None) -> bool:
    """The agent answered a ``stop`` with ``stopped``: it does not run ``attempt_id`` (nothing to kill).

    If the server had asked for the stop, the attempt ends now with the stop's
    reason; otherwise the report is ignored (the agent never had it). Returns True
    when the attempt was ended.
    """
    now = now or timezone.now()
    with transaction.atomic():
        found = _lock_open_attempt_and_workload(host, attempt_id)
        if found is None or found[0].stop_requested_at is None:
            return False
        attempt, workload = found
        links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu_id", "gpu__host_id", "open"))
        if _release_gang_part(attempt, host, links, now, None, workload.cluster_id):
            return True  # a gang's part that does not run there: the others still release theirs
        note = "not running on the agent"
        _end_attempt(attempt, ended_at=now, reason=attempt.stop_reason, message=note, locked=workload, links=links)
    return True


# --- hosts -----------------------------------------------------------------------------


def _host_back_online(host: Host, now: datetime, *, first: bool = False) -> None:
    """Restore an offline host's earlier state (the host row is locked by the caller); ``first``:
    its agent's first hello (a joined host is offline until then), said so in the event."""
    if host.state != Host.State.OFFLINE:
        return
    before = host.state_before_offline or Host.State.ACTIVE
    host.state = before
    host.state_before_offline = ""
    said = f"agent connected for the first time: {before}" if first else f"agent back: offline → {before}"
    HostEvent.objects.create(host=host, at=now, kind="online", message=said)
    notify.request_tick_on_commit(host.cluster_id)


def record_heartbeat(host: Host, samples: Sequence[GpuSample], *, now: datetime | None = None) -> None:
    """Store a heartbeat: ``last_heartbeat``, each GPU's health and last sample.

    A bounded number of queries whatever the GPU count. A GPU that turns
    unhealthy (or healthy again) requests a tick: the policy stops attempts on
    unhealthy GPUs with ``gpu_fault``. With ``AUTO_DRAIN_ON_GPU_FAULT`` a fatal
    XID drains the host (HostEvent recorded).
    """
    now = now or timezone.now()
    with transaction.atomic():
        locked = Host.objects.select_for_update().get(pk=host.pk)
        first = locked.last_heartbeat is None  # never heard from (the scenario runner's first contact)
        locked.last_heartbeat = now
        _host_back_online(locked, now, first=first)
        gpus = _gpus_by_agent_index(host.pk, locked.pending_inventory)
        changed: list[GPU] = []
        health_changed: list[tuple[int, str, str]] = []
        fatal: list[tuple[int, int]] = []
        minute_rows: list[tuple[int, str, dict]] = []
        for s in samples:
            gpu = gpus.get(s.index)
            if gpu is None:
                continue
            health = s.health if s.health in GPU.Health.values else GPU.Health.UNHEALTHY
            if health != gpu.health:
                health_changed.append((gpu.index, gpu.health, health))
                gpu.health = health
            fatal.extend((gpu.index, x) for x in s.xids if x in FATAL_XIDS)
            if s.sample is not None:
                gpu.last_sample = stamped(s.sample, now)
                minute_rows.append((gpu.pk, health, gpu.last_sample))
            changed.append(gpu)
        if changed:  # docs/locking.md: GPU rows in id order (one statement), then the UPDATE
            GPU.objects.bulk_update_in_id_order(changed, ["health", "last_sample"])
        metrics.record_samples(minute_rows, now)
        events = [
            HostEvent(
                host_id=host.pk,
                at=now,
                kind="gpu_health",
                message=f"GPU {idx}: {old} → {new}",
                data={"gpu": idx, "from": old, "to": new},
            )
            for idx, old, new in health_changed
        ]
        if (
            fatal
            and settings.FAIRWAY["AUTO_DRAIN_ON_GPU_FAULT"]
            and locked.state
            in (
                Host.State.ACTIVE,
                Host.State.CORDONED,
            )
        ):
            events.append(
                HostEvent(
                    host_id=host.pk,
                    at=now,
                    kind="draining",
                    message=f"auto-drain: fatal XID {', '.join(f'{x} on GPU {i}' for i, x in fatal)}",
                    data={"from": locked.state, "to": Host.State.DRAINING, "xids": [list(f) for f in fatal]},
                )
            )
            locked.state = Host.State.DRAINING
            health_changed.append((-1, "", ""))
        locked.save(update_fields=["last_heartbeat", "state", "state_before_offline"])
        if events:
            HostEvent.objects.bulk_create(events)
        if health_changed:
            notify.request_tick_on_commit(host.cluster_id)
    host.last_heartbeat, host.state = locked.last_heartbeat, locked.state


def _gpus_by_agent_index(host_id: int, pending: Mapping[str, Any] | None) -> dict[int, GPU]:
    """The host's GPU rows by the index its agent gives them. The registered index, but while the
    host's inventory waits for approval (``pending_inventory``: the agent numbers its GPUs unlike
    the database, one fell off the bus or cards changed slots) by UUID through the reported
    inventory: a sample of the agent's GPU 2 is that UUID's, not registered GPU 2's, whose
    attempt a fault of another card stopped (brk39). A reported GPU not registered on the host
    gets nothing."""
    rows = list(GPU.objects.filter(host_id=host_id))
    if not pending:
        return {g.index: g for g in rows}
    by_uuid = {g.uuid: g for g in rows}
    reported = ((int(g["index"]), str(g["uuid"])) for g in pending.get("gpus", ()))
    return {index: by_uuid[uuid] for index, uuid in reported if uuid in by_uuid}


@dataclass(frozen=True, slots=True)
class HeartbeatReport:
    """One host's heartbeat as the web process buffered it: receipt time and GPU samples."""

    host_id: int
    received_at: datetime
    samples: Sequence[GpuSample]
    store_samples: bool = True
    """False: only ``last_heartbeat`` (and health/XID handling); the GPU samples are not stored."""
    inventory_held: bool = False
    """True: the host's GPU inventory waited for approval at its agent's hello (the agent's indices
    may not be the registered ones): written by :func:`record_heartbeat`, which maps them by UUID."""


_HEALTH_VALUES = frozenset(GPU.Health.values)


def _health(value: str) -> str:
    return value if value in _HEALTH_VALUES else GPU.Health.UNHEALTHY


def record_heartbeats(reports: Sequence[HeartbeatReport]) -> None:
    """Store many hosts' heartbeats at once (the web process's flush), exactly as
    :func:`record_heartbeat` would one by one, in a fixed number of queries whatever the host count.

    The common case, a host that is not offline and whose GPUs keep their health with no fatal
    XID, is written in bulk: one ``SELECT … FOR UPDATE`` of the hosts in id order (docs/locking.md),
    one read of the GPUs, one conditional UPDATE of ``last_heartbeat``
    (it skips offline hosts), one UPDATE of ``GPU.last_sample``, one upsert of the per-minute
    roll-ups (PostgreSQL; other engines: the ORM's bulk operations, a few queries more). Each
    ``last_heartbeat`` is that heartbeat's receipt time. A report with ``store_samples`` false
    only refreshes ``last_heartbeat`` (the web process stores one sample per host every few
    heartbeats: roll-up means stay unbiased). The rare rest, a health change, a fatal XID, an
    offline host coming back, goes through :func:`record_heartbeat` host by host (its own
    transaction: tick request, events, auto-drain, the sample stored). One report per host (the
    last one wins).
    """
    latest = {r.host_id: r for r in reports}
    if not latest:
        return
    special: dict[int, HeartbeatReport] = {}
    with transaction.atomic():
        # docs/locking.md: hosts in id order before their GPUs (the UPDATE below would lock them
        # in the order PostgreSQL picks). One query whatever the host count.
        gpus: dict[int, dict[int, tuple[int, str]]] = {hid: {} for hid in latest}
        for gid, hid, index, health in _lock_hosts_and_read_gpus(sorted(latest)):
            gpus[hid][index] = (gid, health)
        plain: dict[int, HeartbeatReport] = {}
        for hid, report in latest.items():
            known = gpus[hid]
            if report.inventory_held or any(
                s.index in known and (_health(s.health) != known[s.index][1] or any(x in FATAL_XIDS for x in s.xids))
                for s in report.samples
            ):
                special[hid] = report
            else:
                plain[hid] = report
        rows: dict[int, tuple[int, str, dict[str, Any], datetime]] = {}  # gpu id → (host, health, sample, received)
        for hid, report in plain.items():
            for s in report.samples if report.store_samples else ():
                if s.index in gpus[hid] and s.sample is not None:
                    rows[gpus[hid][s.index][0]] = (
                        hid,
                        _health(s.health),
                        stamped(s.sample, report.received_at),
                        report.received_at,
                    )
        touched = _touch_hosts_and_store_samples({hid: r.received_at for hid, r in plain.items()}, rows)
        for hid, report in plain.items():
            if hid not in touched:  # offline (or gone) since: the per-host path brings it back
                special[hid] = report
    if not special:
        return
    hosts = Host.objects.in_bulk(list(special))
    for hid, report in special.items():
        host = hosts.get(hid)
        if host is None:
            continue  # removed from the database meanwhile
        try:
            record_heartbeat(host, report.samples, now=report.received_at)
        except Exception:  # one host's failure must not lose the others' heartbeats
            logger.exception("recording the heartbeat of host %s failed", host.name)


def _lock_hosts(host_ids: list[int]) -> list[int]:
    """Lock these hosts' rows in id order (docs/locking.md) until the transaction ends; returns the
    ids found. One raw statement on PostgreSQL: the ORM's building and compiling of this query was
    ~0.6 of ~0.85 ms CPU, a fifth of a heartbeat flush of 15 hosts (docs/benchmarks/api_load.md,
    web30); other engines use :func:`_lock_hosts_plain`, its oracle (tests/test_gateway_batch.py)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return _lock_hosts_plain(host_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {connection.ops.quote_name(Host._meta.db_table)} "  # noqa: S608 -- our own table
            "WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE",
            [host_ids],
        )
        return [row[0] for row in cursor.fetchall()]


def _lock_hosts_and_read_gpus(host_ids: list[int]) -> list[tuple[int, int, int, str]]:
    """:func:`_lock_hosts` then :func:`_gpus_of` (its oracle, other engines' path), in one
    statement on PostgreSQL (nineteenth pass: one round trip, ~0.1–0.2 ms of CPU, fewer per
    flush). The hosts are locked in id order by a materialized CTE that drives a left join (every
    locked row is read, so every one is locked, GPUs or not); the GPUs are those of the hosts found."""
    from django.db import connection

    if connection.vendor != "postgresql":
        _lock_hosts(host_ids)
        return list(_gpus_of(host_ids))
    host_table = connection.ops.quote_name(Host._meta.db_table)
    gpu_table = connection.ops.quote_name(GPU._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH locked AS MATERIALIZED (SELECT id FROM {host_table} "  # noqa: S608 -- our own tables
            "WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE) "
            f"SELECT g.id, l.id, g.index, g.health FROM locked AS l LEFT JOIN {gpu_table} AS g ON g.host_id = l.id",
            [host_ids],
        )
        return [row for row in cursor.fetchall() if row[0] is not None]


def _lock_hosts_plain(host_ids: list[int]) -> list[int]:
    """:func:`_lock_hosts` through the ORM."""
    return list(Host.objects.select_for_update().filter(pk__in=host_ids).order_by("pk").values_list("pk", flat=True))


def _gpus_of(host_ids: list[int]) -> Iterable[tuple[int, int, int, str]]:
    """(id, host id, index, health) of the GPUs of these hosts."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return GPU.objects.filter(host_id__in=host_ids).values_list("id", "host_id", "index", "health")
    with connection.cursor() as cursor:  # one array parameter instead of one per host
        cursor.execute(
            f"SELECT id, host_id, index, health FROM {connection.ops.quote_name(GPU._meta.db_table)} "  # noqa: S608
            "WHERE host_id = ANY(%s::bigint[])",
            [host_ids],
        )
        return cursor.fetchall()


_MINUTE_MERGE = (
    "ON CONFLICT (gpu_id, minute) DO UPDATE SET "
    "samples = m.samples + 1, "
    "utilization_sum = m.utilization_sum + EXCLUDED.utilization_sum, "
    "utilization_samples = m.utilization_samples + EXCLUDED.utilization_samples, "
    "memory_used_max_mb = GREATEST(m.memory_used_max_mb, EXCLUDED.memory_used_max_mb), "
    "temperature_max_c = GREATEST(m.temperature_max_c, EXCLUDED.temperature_max_c), "
    "power_sum_w = m.power_sum_w + EXCLUDED.power_sum_w, "
    "health_worst = CASE WHEN 'unhealthy' IN (m.health_worst, EXCLUDED.health_worst) THEN 'unhealthy' "
    "WHEN 'degraded' IN (m.health_worst, EXCLUDED.health_worst) THEN 'degraded' ELSE 'healthy' END"
)
"""How a sample merges into its GPU's minute roll-up row (``m``), in both flush paths' upserts."""


def _minute_row(gid: int, health: str, s: Mapping[str, Any], at: datetime) -> dict[str, Any]:
    """One GPU's sample as a row of the minute roll-up's upsert (both flush paths write these).
    A reading the GPU could not give (None) adds nothing and counts no sample of it, as
    ``metrics.record_samples`` (nvml56)."""
    util, mem, temp, power = (s.get(k) for k in ("utilization_pct", "memory_used_mb", "temperature_c", "power_w"))
    return {
        "gpu": gid,
        "minute": metrics.minute_of(at).isoformat(),
        "util": 0.0 if util is None else float(util),
        "util_n": 0 if util is None else 1,
        "mem": None if mem is None else int(mem),
        "temp": None if temp is None else float(temp),
        "power": 0.0 if power is None else float(power),
        "health": health,
    }


def _touch_hosts_and_store_samples(
    times: Mapping[int, datetime], rows: Mapping[int, tuple[int, str, dict[str, Any], datetime]]
) -> set[int]:
    """:func:`_touch_hosts`, then :func:`_store_samples` of the ``rows`` (gpu id → host id, health,
    sample, received) of the hosts it touched; returns those hosts. One statement on PostgreSQL
    (nineteenth pass: data-modifying CTEs, the samples' writes joined to the touched hosts'
    ``RETURNING``; two round trips fewer per flush); :func:`_touch_and_store_plain` is its oracle
    and other engines' path (tests/test_gateway_batch.py). The GPU rows are locked in id order
    first (docs/locking.md, gpu53): a materialized ``FOR NO KEY UPDATE`` in id order drives the
    UPDATE, which writes a row only once that CTE has yielded it, so whatever join PostgreSQL
    picks, the rows are taken in id order (the UPDATE alone took them in its plan's order and
    deadlocked with the tick's nominations)."""
    from django.db import connection

    if connection.vendor != "postgresql" or not times:
        return _touch_and_store_plain(times, rows)
    from scheduler.models import GpuMinuteSample

    host_table = connection.ops.quote_name(Host._meta.db_table)
    gpu_table = connection.ops.quote_name(GPU._meta.db_table)
    minute_table = connection.ops.quote_name(GpuMinuteSample._meta.db_table)
    samples = [  # as _store_samples: metrics.record_samples skips empty samples
        {**_minute_row(gid, health, s, at), "host": hid} for gid, (hid, health, s, at) in rows.items() if s
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH touched AS (UPDATE {host_table} AS h SET last_heartbeat = v.t "  # noqa: S608 -- our own tables
            "FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, t timestamptz) "
            "WHERE h.id = v.id AND h.state <> %s RETURNING h.id), "
            f"glocked AS MATERIALIZED (SELECT id FROM {gpu_table} WHERE id = ANY(%s::bigint[]) "
            "ORDER BY id FOR NO KEY UPDATE), "
            f"gpus AS (UPDATE {gpu_table} AS g SET last_sample = v.s "
            "FROM glocked AS l, jsonb_to_recordset(%s::jsonb) AS v(id bigint, host bigint, s jsonb) "
            "WHERE g.id = l.id AND g.id = v.id AND v.host IN (SELECT id FROM touched)), "
            f"minutes AS (INSERT INTO {minute_table} AS m "
            "(gpu_id, minute, samples, utilization_sum, utilization_samples, memory_used_max_mb, temperature_max_c, "
            "power_sum_w, health_worst) "
            "SELECT v.gpu, v.minute, 1, v.util, v.util_n, v.mem, v.temp, v.power, v.health "
            "FROM jsonb_to_recordset(%s::jsonb) "
            "AS v(gpu bigint, host bigint, minute timestamptz, util float8, util_n int, mem bigint, temp float8, "
            "power float8, health text) WHERE v.host IN (SELECT id FROM touched) "
            f"{_MINUTE_MERGE}) "
            "SELECT id FROM touched",
            [
                json.dumps([{"id": hid, "t": t.isoformat()} for hid, t in times.items()]),
                Host.State.OFFLINE,
                sorted(rows),
                json.dumps([{"id": gid, "host": hid, "s": s} for gid, (hid, _h, s, _t) in rows.items()]),
                json.dumps(samples),
            ],
        )
        return {row[0] for row in cursor.fetchall()}


def _touch_and_store_plain(
    times: Mapping[int, datetime], rows: Mapping[int, tuple[int, str, dict[str, Any], datetime]]
) -> set[int]:
    """:func:`_touch_hosts_and_store_samples` in two steps (the oracle)."""
    touched = _touch_hosts(times)
    _store_samples({gid: (health, s, at) for gid, (hid, health, s, at) in rows.items() if hid in touched})
    return touched


def _touch_hosts(times: Mapping[int, datetime]) -> set[int]:
    """Set ``last_heartbeat`` of the hosts that are not offline; returns the ids updated."""
    if not times:
        return set()
    from django.db import connection
    from django.db.models import Case, Value, When

    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(Host._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS h SET last_heartbeat = v.t "  # noqa: S608 -- our own table name
                "FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, t timestamptz) "
                "WHERE h.id = v.id AND h.state <> %s RETURNING h.id",
                [json.dumps([{"id": hid, "t": t.isoformat()} for hid, t in times.items()]), Host.State.OFFLINE],
            )
            return {row[0] for row in cursor.fetchall()}
    # SQLite (embedded mode): the transaction holds the database's write lock from its start.
    alive = set(Host.objects.filter(pk__in=list(times)).exclude(state=Host.State.OFFLINE).values_list("pk", flat=True))
    if alive:
        Host.objects.filter(pk__in=alive).update(
            last_heartbeat=Case(*(When(pk=hid, then=Value(times[hid])) for hid in alive))
        )
    return alive


def _store_samples(rows: Mapping[int, tuple[str, dict[str, Any], datetime]]) -> None:
    """``GPU.last_sample`` and the per-minute roll-ups (as :func:`metrics.record_samples`) of many GPUs."""
    if not rows:
        return
    from django.db import connection

    if connection.vendor != "postgresql":
        GPU.objects.bulk_update([GPU(pk=gid, last_sample=s) for gid, (_h, s, _t) in rows.items()], ["last_sample"])
        by_minute: dict[datetime, list[tuple[int, str, dict[str, Any]]]] = {}
        for gid, (health, sample, at) in rows.items():
            by_minute.setdefault(metrics.minute_of(at), []).append((gid, health, sample))
        for minute, samples in by_minute.items():
            metrics.record_samples(samples, minute)
        return
    from scheduler.models import GpuMinuteSample

    # One JSON parameter per statement: psycopg binds it as one string (client-side binding of
    # long arrays costs more than the statement), PostgreSQL unpacks it with jsonb_to_recordset.
    gpu_table = connection.ops.quote_name(GPU._meta.db_table)
    minute_table = connection.ops.quote_name(GpuMinuteSample._meta.db_table)
    GPU.objects.filter(pk__in=list(rows)).lock_in_id_order()  # docs/locking.md (gpu53)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {gpu_table} AS g SET last_sample = v.s "  # noqa: S608 -- our own table name
            "FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, s jsonb) WHERE g.id = v.id",
            [json.dumps([{"id": gid, "s": s} for gid, (_h, s, _t) in rows.items()])],
        )
        samples = [  # metrics.record_samples skips empty samples
            _minute_row(gid, health, s, at) for gid, (health, s, at) in rows.items() if s
        ]
        if not samples:
            return
        cursor.execute(
            f"INSERT INTO {minute_table} AS m "  # noqa: S608 -- our own table name
            "(gpu_id, minute, samples, utilization_sum, utilization_samples, memory_used_max_mb, temperature_max_c, "
            "power_sum_w, health_worst) "
            "SELECT v.gpu, v.minute, 1, v.util, v.util_n, v.mem, v.temp, v.power, v.health "
            "FROM jsonb_to_recordset(%s::jsonb) "
            "AS v(gpu bigint, minute timestamptz, util float8, util_n int, mem bigint, temp float8, power float8, "
            "health text) "
            f"{_MINUTE_MERGE}",
            [json.dumps(samples)],
        )


def host_hello(
    host: Host,
    *,
    agent_version: str,
    gpus: Sequence[GpuReport],
    running: Iterable[int],
    exited: Sequence[ExitReport] = (),
    isolation: Mapping[str, Any] | None = None,
    cpus: int | None = None,
    memory: int | None = None,
    started: Mapping[int, float] | None = None,
    now: datetime | None = None,
) -> set[int]:
    """An agent (re)connects: check its GPUs against the registered inventory (a different one
    is held for an admin, :func:`_check_inventory`), bring the host back, reconcile attempts.

    ``running`` are the attempt ids (primary keys) the agent has (starting or running);
    ``started`` maps those of them whose start the agent dated to the seconds since it (the
    hello's ``age_s`` of a running attempt): an attempt the server still holds as starting is
    confirmed started then (:func:`attempt_started`; a ``started`` report lost with a connection);
    ``exited`` those that ended while it was away. Open attempts the server
    placed here that were confirmed started but that the agent no longer has
    end ``lost``, charged to the last heartbeat; unconfirmed ones stay and their
    start is re-sent; ones the server already asked to stop end with the stop's
    reason. Attempts the agent runs that the server does not want are stopped
    by the desired-state push that follows. ``isolation``: how attempts run there (``hello.isolation``,
    docs/isolation.md), stored on the host; None from an agent older than the field.
    ``cpus``, ``memory``: what the host offers (DESIGN.md §3.3), stored as reported (None: an
    agent older than the fields, unknown: no CPU or memory constraint there); unlike GPUs, a change
    needs no approval (docs/resources.md), except while a GPU inventory waits for one: then they
    wait with it in ``pending_inventory`` (docs/deploy.md).

    Returns the attempts of ``running`` still not confirmed started (reported running without
    the age of their start: an agent older than that report, or a start still in progress, e.g.
    an image pull): the caller sends them their ``start`` again, which the agent answers with
    ``running`` (or ``started`` once its start is done), confirming the start.
    """
    now = now or timezone.now()
    running_ids = set(running)
    started = dict(started or {})
    with transaction.atomic():
        locked = Host.objects.select_for_update().get(pk=host.pk)
        last_seen = locked.last_heartbeat
        held = _held_running_at(last_seen, [e.attempt_id for e in exited])
        agent_version = clean_text(agent_version)
        locked.agent_version = agent_version[:32]
        locked.last_heartbeat = now
        _host_back_online(locked, now, first=last_seen is None)
        _check_inventory(locked, gpus, now)
        locked.isolation = _clean_isolation(isolation)
        if locked.pending_inventory is not None:
            # The CPUs and memory of a hello whose GPUs wait for approval wait with them (applied by
            # do_approve_host_inventory): one unapproved report changes nothing (docs/deploy.md).
            locked.pending_inventory = {**locked.pending_inventory, "cpus": cpus, "memory_bytes": memory}
            cpus, memory = locked.cpus, locked.memory_bytes
        sized = _set_size(locked, cpus, memory)
        locked.save(
            update_fields=[
                "agent_version",
                "last_heartbeat",
                "state",
                "state_before_offline",
                "pending_inventory",
                "isolation",
                *sized,
            ]
        )
        HostEvent.objects.create(
            host=locked,
            at=now,
            kind="hello",
            message=f"agent {agent_version} connected: {len(gpus)} GPUs, {len(running_ids)} attempts running",
            data={"running": sorted(running_ids), "exited": [e.attempt_id for e in exited]},
        )
        notify.request_tick_on_commit(locked.cluster_id)
        notify.push_hosts_on_commit([locked.pk])
    host.state, host.last_heartbeat, host.agent_version = locked.state, locked.last_heartbeat, locked.agent_version
    host.pending_inventory = locked.pending_inventory  # the connection maps its heartbeats by it (brk39)

    for attempt_id, age in sorted(started.items()):
        if attempt_id in running_ids:
            attempt_started(host, attempt_id, age, now=now)
    for report in exited:
        alive_at = last_seen if report.attempt_id in held else None
        if report.failed_to_start:
            attempt_failed_to_start(host, report.attempt_id, report.message, report.age_s, now=now, alive_at=alive_at)
        else:
            attempt_exited(
                host,
                report.attempt_id,
                report.exit_code,
                report.age_s,
                message=report.message,
                now=now,
                alive_at=alive_at,
            )

    reported = running_ids | {e.attempt_id for e in exited}
    for attempt_id in sorted(_attempts_on_host(host.pk) - reported):
        with transaction.atomic():
            attempt = _lock_open_attempt(host, attempt_id)
            if attempt is None:
                continue
            if attempt.stop_requested_at is not None or attempt.started_at is not None:
                links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu_id", "gpu__host_id", "open"))
                gone = "is gone (its agent reconnected without it)"
                if _release_gang_part(attempt, host, links, last_seen or now, None, host.cluster_id, gone=gone):
                    continue  # a gang's part: the others still hold their GPUs until they report
            if attempt.stop_requested_at is not None:
                _end_attempt(
                    attempt,
                    ended_at=last_seen or now,
                    reason=attempt.stop_reason,
                    message="gone when the agent reconnected",
                )
            elif attempt.started_at is not None:
                _end_attempt(
                    attempt,
                    ended_at=last_seen or now,
                    reason=Attempt.EndReason.LOST,
                    message="the agent no longer runs it",
                )
            # else: never confirmed started; the start command is re-sent.
    unconfirmed = running_ids - set(started)
    if not unconfirmed:
        return set()
    return set(
        Attempt.objects.filter(pk__in=sorted(unconfirmed), started_at__isnull=True, ended_at__isnull=True).values_list(
            "pk", flat=True
        )
    )


def _set_size(host: Host, cpus: int | None, memory: int | None) -> list[str]:
    """Set ``host``'s CPUs and memory; the fields to save: none when they did not change, since
    their write forgets the hardware every process keeps (scheduler.hardware_memo), which an
    agent's reconnect alone does not change."""
    if (host.cpus, host.memory_bytes) == (cpus, memory):
        return []
    host.cpus, host.memory_bytes = cpus, memory
    return ["cpus", "memory_bytes"]


def _held_running_at(last_seen: datetime | None, attempt_ids: Sequence[int]) -> set[int]:
    """Those of ``attempt_ids`` (a hello's exits) the server held running at the host's last
    heartbeat before the hello, ``last_seen``: still open and confirmed started by then. Each one's
    exit is dated no earlier than ``last_seen`` (:func:`exit_time`'s ``alive_at``), the floor a new
    connection carries over from the old one (left37: its ``heard_running`` is gone with it, and a
    year's ``age_s`` ended the attempt at its start, charged nothing). Why it is a floor: frames
    of one connection arrive in order, so an exit the agent reported before that heartbeat
    arrived before it and closed the attempt; one still open ended after it (or the agent
    noticed it a poll later), and the ``lost`` rule charges such an attempt to ``last_seen``
    too (DESIGN.md §4). docs/locking.md."""
    if last_seen is None or not attempt_ids:
        return set()
    return set(
        Attempt.objects.filter(
            pk__in=sorted(attempt_ids), started_at__lte=last_seen, ended_at__isnull=True
        ).values_list("pk", flat=True)
    )


def _clean_isolation(isolation: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``hello.isolation`` as stored on the host (text cleaned as the agent version is)."""
    if isolation is None:
        return None
    return {
        "mode": clean_text(str(isolation.get("mode", ""))),
        "identity": clean_text(str(isolation.get("identity", ""))),
        "cgroup": clean_text(str(isolation.get("cgroup", ""))),
        "warnings": [clean_text(str(w)) for w in isolation.get("warnings", [])],
    }


def _inventory_key(gpus: Iterable[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    return sorted((int(i), str(u), str(m)) for i, u, m in gpus)


def _check_inventory(host: Host, gpus: Sequence[GpuReport], now: datetime) -> None:
    """Hold a hello's GPU inventory against the registered one (the host row is locked).

    The registered GPUs (from the join or registration, or the last approved inventory) are the
    truth: a hello never adds, moves or re-models GPUs. Same indices, UUIDs and models: only
    ``memory_mb`` is refreshed, and a pending inventory is dropped. Anything else: the reported
    inventory waits in ``pending_inventory`` for an admin (:func:`do_approve_host_inventory`)
    and an active host is cordoned meanwhile (running work stays; nothing new is placed on GPUs
    that may not be what the database says). A matching hello later resumes such a host.
    """
    registered = {g.index: g for g in GPU.objects.registered().filter(host=host)}
    reported = _inventory_key((g.index, g.uuid, g.model) for g in gpus)
    if reported == _inventory_key((g.index, g.uuid, g.model) for g in registered.values()):
        changed = []
        for g in gpus:
            gpu = registered[g.index]
            if gpu.memory_mb != g.memory_mb:
                gpu.memory_mb = g.memory_mb
                changed.append(gpu)
        if changed:
            GPU.objects.bulk_update_in_id_order(changed, ["memory_mb"])
        if host.pending_inventory is not None:
            cordoned = bool(host.pending_inventory.get("cordoned"))
            host.pending_inventory = None
            HostEvent.objects.create(
                host=host, at=now, kind="inventory_matched", message="the agent reports the registered GPUs again"
            )
            if cordoned:
                _resume_after_hold(host, now, "the registered GPU inventory is back")
        return
    pending = [
        {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mb": g.memory_mb, "health": g.health}
        for g in sorted(gpus, key=lambda g: g.index)
    ]
    already = host.pending_inventory or {}
    cordon = host.state == Host.State.ACTIVE
    # A registered GPU the agent left out is measured by nothing now: its last sample goes, and
    # every surface says since when it is missing (scheduler.gpu_report, left41).
    missing = missing_on_hold([g.uuid for g in registered.values()], {g.uuid for g in gpus}, already, now)
    host.pending_inventory = {"gpus": pending, "cordoned": bool(already.get("cordoned")) or cordon, MISSING: missing}
    if missing:
        GPU.objects.filter(host=host, uuid__in=list(missing)).update_in_id_order(last_sample={})
    if already.get("gpus") != pending:
        registered_list = [[g.index, g.uuid, g.model] for g in sorted(registered.values(), key=lambda g: g.index)]
        HostEvent.objects.create(
            host=host,
            at=now,
            kind="inventory_held",
            message=f"the agent reports {len(pending)} GPUs "
            f"({', '.join(sorted({g['model'] for g in pending})) or 'none'}) that differ from the "
            f"{len(registered)} registered: awaiting an admin's approval"
            + (f"; {host.state} → cordoned" if cordon else ""),
            data={"registered": registered_list, "reported": [[g["index"], g["uuid"], g["model"]] for g in pending]},
        )
    if cordon:
        host.state = Host.State.CORDONED
        notify.request_tick_on_commit(host.cluster_id)


def _resume_after_hold(host: Host, now: datetime, why: str) -> None:
    """Undo the cordon of an inventory hold, unless an operator changed the state since."""
    if host.state == Host.State.CORDONED:
        host.state = Host.State.ACTIVE
        HostEvent.objects.create(host=host, at=now, kind="resumed", message=f"{why}: cordoned → active")
        notify.request_tick_on_commit(host.cluster_id)
    elif host.state == Host.State.OFFLINE and host.state_before_offline == Host.State.CORDONED:
        host.state_before_offline = Host.State.ACTIVE


def do_approve_host_inventory(actor: Any, host: Host) -> Host:
    """An admin accepts the GPU inventory ``host``'s agent reported (``pending_inventory``).

    The GPUs are registered as reported (added, re-indexed, re-modelled; a UUID registered on
    another live host stays there); registered GPUs the agent no longer reports leave the host's
    inventory (``GPU.removed_at``: placement, the cluster's GPU count, the pyramid; their rows stay
    for the attempts that ran on them, and return if reported again). A host cordoned by the hold
    is resumed. Raises ServiceError ``host_removed``, ``no_pending_inventory``, ``mixed_models`` (all GPUs of a host
    are of one model: such a host must leave and join again) or ``gpu_busy`` (409: a GPU to leave
    still holds an open attempt; drain first, as ``do_remove_host`` asks).
    """
    from config.errors import ServiceError

    now = timezone.now()
    with transaction.atomic():
        locked = Host.objects.select_for_update().get(pk=host.pk)
        if locked.removed_at is not None:  # it resumed a removed host and registered GPUs on it (brk44)
            from scheduler.services import host_removed_error

            raise host_removed_error(locked)
        pending = locked.pending_inventory
        if not pending:
            raise ServiceError("no_pending_inventory", None, f"Host {locked.name} has no inventory awaiting approval.")
        reports = [
            GpuReport(int(g["index"]), str(g["uuid"]), str(g["model"]), int(g["memory_mb"]), str(g["health"]))
            for g in pending["gpus"]
        ]
        models = sorted({r.model for r in reports})
        if len(models) > 1:
            raise ServiceError(
                "mixed_models",
                None,
                f"Host {locked.name} reports GPUs of several models ({', '.join(models)}); "
                "all GPUs of a host are of one model (DESIGN.md §3.3): remove it and join it again.",
            )
        missing = GPU.objects.registered().filter(host=locked).exclude(index__in=[r.index for r in reports])
        busy = sorted(missing.filter(attempt_links__open=True).values_list("index", flat=True).distinct())
        if busy:
            raise ServiceError(
                "gpu_busy",
                None,
                f"Host {locked.name}'s GPU(s) {', '.join(map(str, busy))}, which the agent no longer reports, "
                "still hold an attempt: drain the host first, then approve once they are free.",
                status=409,
            )
        _register_gpus(locked, reports)
        # docs/resources.md: a GPU the agent no longer reports leaves the inventory (placement, the
        # registered GPUs of every entitlement and of the pyramid); its row stays for the history.
        gone = sorted(missing.values_list("index", flat=True))
        missing.update(removed_at=now, nominated_for=None)
        locked.pending_inventory = None
        HostEvent.objects.create(
            host=locked,
            at=now,
            kind="inventory_approved",
            actor=actor,
            message=f"GPU inventory approved: {len(reports)} × {models[0] if models else '-'}"
            + (f"; GPU(s) {', '.join(map(str, gone))} removed" if gone else ""),
            data={"gpus": [[r.index, r.uuid, r.model] for r in reports], "removed": gone},
        )
        if pending.get("cordoned"):
            _resume_after_hold(locked, now, "GPU inventory approved")
        # The CPUs and memory the held hello reported (host_hello); none kept by an older hold.
        sized = _set_size(locked, pending["cpus"], pending["memory_bytes"]) if "cpus" in pending else []
        locked.save(update_fields=["pending_inventory", "state", "state_before_offline", *sized])
        notify.request_tick_on_commit(locked.cluster_id)
        notify.push_hosts_on_commit([locked.pk])
    return locked


def _register_gpus(host: Host, gpus: Sequence[GpuReport]) -> None:
    # docs/locking.md: every GPU row of the host and every row holding a reported UUID (a card that
    # moves here from a removed host), in id order, in one statement, before the writes below (the
    # placeholders, the moves, the bulk updates, the approval's removals after them). FOR UPDATE,
    # not NO KEY: they change UUIDs (a key), so no lock is upgraded while others are held.
    reported_elsewhere = Q(uuid__in=[r.uuid for r in gpus]) & (
        Q(removed_at__isnull=False) | Q(host__removed_at__isnull=False)
    )
    locked = GPU.objects.filter(Q(host=host) | reported_elsewhere)  # a live host's cards stay unlocked: never moved
    existing = {g.index: g for g in locked.select_for_update(of=("self",)).order_by("pk") if g.host_id == host.pk}
    # GPUs of this host that traded indices (cards moved between slots): each UUID is held by
    # the other's row, so each was "registered elsewhere; kept" and the approval changed nothing
    # (brk32). Such rows give up their UUID first (a placeholder, the column being unique), then
    # take the reported one below. Every row whose index reports another UUID, or whose UUID is
    # reported at another index, does: a GPU that fell off the bus shifts the ones after it down
    # an index, and the last row, its UUID now reported one index lower and its own index no
    # longer reported, kept it, so the row below stayed a placeholder (brk39).
    reported = {r.index: r.uuid for r in gpus}
    claimed = {r.uuid: r.index for r in gpus}
    trading = [
        g
        for g in existing.values()
        if reported.get(g.index, g.uuid) != g.uuid or claimed.get(g.uuid, g.index) != g.index
    ]
    for gpu in trading:
        gpu.uuid = f"~moving-{gpu.pk}"
        gpu.save(update_fields=["uuid"])
    changed: list[GPU] = []
    revived: list[GPU] = []
    for report in gpus:
        gpu = existing.get(report.index)
        if gpu is None:
            # A UUID seen before: at another index of this host, its row moves there; on another
            # (removed) host, its row stays there for the history, this host gets one (leave_to_history).
            moved = GPU.objects.filter(uuid=report.uuid).first()
            if moved is not None and moved.host_id != host.pk:
                # A host speaks only of its own GPUs (DESIGN.md §7): a UUID registered on another
                # live host stays there (else a misconfigured agent takes GPUs away from a
                # healthy host, and two agents claiming one UUID move it back and forth). It
                # moves only from a removed host, and never while an open attempt holds it.
                other_removed = moved.removed_at is not None or (
                    Host.objects.filter(pk=moved.host_id, removed_at__isnull=False).exists()
                )
                if not other_removed or AttemptGPU.objects.filter(gpu=moved, open=True).exists():
                    logger.warning("GPU %s reported by %s is registered on another host; ignored", report.uuid, host)
                    continue
                GPU.objects.filter(pk=moved.pk).leave_to_history()  # its old host's history names it
                moved = None
            if moved is not None:  # of this host, at another index
                moved.host, moved.index, moved.model, moved.memory_mb, moved.removed_at = (
                    host,
                    report.index,
                    report.model,
                    report.memory_mb,
                    None,
                )
                moved.save(update_fields=["host", "index", "model", "memory_mb", "removed_at"])
            else:
                GPU.objects.create(
                    host=host,
                    index=report.index,
                    uuid=report.uuid,
                    model=report.model,
                    memory_mb=report.memory_mb,
                    health=report.health if report.health in GPU.Health.values else GPU.Health.HEALTHY,
                )
            continue
        if gpu.removed_at is not None:  # reported again: back in the inventory
            gpu.removed_at = None
            revived.append(gpu)
        if (gpu.uuid, gpu.model, gpu.memory_mb) != (report.uuid, report.model, report.memory_mb):
            if gpu.uuid != report.uuid and GPU.objects.filter(uuid=report.uuid).exclude(pk=gpu.pk).exists():
                logger.warning("GPU %s:%s reports UUID %s, registered elsewhere; kept", host, gpu.index, report.uuid)
            else:
                gpu.uuid = report.uuid
            gpu.model, gpu.memory_mb = report.model, report.memory_mb
            changed.append(gpu)
    if changed:
        GPU.objects.bulk_update(changed, ["uuid", "model", "memory_mb"])
    if revived:
        GPU.objects.bulk_update(revived, ["removed_at"])
    # A trading row whose reported UUID is another live host's kept its placeholder: out of placement.
    GPU.objects.filter(pk__in=[g.pk for g in trading], uuid__startswith="~moving-").update(health=GPU.Health.UNHEALTHY)


# --- sweeps (run by the clock through scheduler.tasks) ----------------------------------


def host_lost_after() -> timedelta:
    """How long a host may stay silent before it is lost and its attempts end ``lost``
    (``HOST_LOST_AFTER_S``): the sweep's rule, and the workload page's "ends lost at"."""
    return timedelta(seconds=settings.FAIRWAY["HOST_LOST_AFTER_S"])


def host_lost_at(host: Host) -> datetime:
    """When :func:`sweep_hosts` ends the open attempts of ``host``, offline, if it stays silent:
    :func:`host_lost_after` past its last heartbeat, or past its registration if none came. The one
    rule of the workload's ``silent_hosts`` and the hosts' ``attempts_lost_at`` (API, CLI, page)."""
    return (host.last_heartbeat or host.created_at) + host_lost_after()


class SilentHost(NamedTuple):
    """An offline host of an open attempt: its name, its last heartbeat (None: never heard from)
    and when the sweep ends the attempt ``lost`` if the host stays silent."""

    host: str
    last_heartbeat: datetime | None
    lost_at: datetime


def silent_hosts(attempt: Attempt, links: Iterable[Any] | None = None) -> list[SilentHost]:
    """The offline hosts of the open ``attempt``, by name, read from its GPU links with their
    hosts loaded (``links``, else ``attempt.gpu_links.all()``: prefetched by every reader, so no
    query). One source for the workload page, the API's detail (each attempt's
    ``silent_hosts``) and ``fairway show``; ``lost_at`` is :func:`sweep_hosts`' rule: silent
    :func:`host_lost_after` past the last heartbeat, or past its registration if none came."""
    if attempt.ended_at is not None:
        return []
    out: dict[str, SilentHost] = {}
    for link in attempt.gpu_links.all() if links is None else links:
        host = link.gpu.host
        if host.state == Host.State.OFFLINE and host.name not in out:
            out[host.name] = SilentHost(host.name, host.last_heartbeat, host_lost_at(host))
    return [out[name] for name in sorted(out)]


class DrainingHost(NamedTuple):
    """A draining host of an open attempt not yet asked to stop, or one with a drain scheduled
    for later: its name, whether the drain is a drain now, when a scheduled drain drains it (None:
    it drains already) and when the tick stops the attempt there (DESIGN.md §6: as soon as it is
    unprotected; its protection's end, the scheduled drain's time, or None: at the next tick,
    unprotected or drained now)."""

    host: str
    drain_now: bool
    stops_at: datetime | None
    drains_at: datetime | None = None


def _returns_to(host: Host) -> str:
    """``host``'s state, or an offline host's the state it returns to when its agent is back."""
    if host.state != Host.State.OFFLINE:
        return str(host.state)
    return host.state_before_offline or Host.State.ACTIVE


def wall_time_ends_at(attempt: Attempt) -> datetime | None:
    """When ``attempt``'s wall-time limit stops it (its workload's ``max_runtime_s`` from its
    confirmed start, as :func:`stop_timed_out` reads it); None without a limit or a start."""
    limit = attempt.workload.max_runtime_s
    if limit is None or attempt.started_at is None:
        return None
    return attempt.started_at + timedelta(seconds=limit)


def draining_hosts(attempt: Attempt, links: Iterable[Any] | None = None) -> list[DrainingHost]:
    """The draining hosts of the open ``attempt`` that has no stop yet, and its active or cordoned
    hosts with a drain scheduled (fake46; docs/deploy.md "Scheduled drains"), offline ones that
    return active or cordoned included (beside :func:`silent_hosts`' line: words47), by name, read as
    :func:`silent_hosts` reads its hosts. One source for the workload page, the API's detail (each
    attempt's ``draining_hosts``) and ``fairway show``: the owner of work on a host being drained
    learns when it will be stopped and requeued (tryout46: only the clusters page said so).

    The rule of the drain's tick: a drain stops the attempt once unprotected (its protection's
    end, where it is charged until its release: allocated), a drain now at once; a drain scheduled
    at T does so from T (``services.apply_due_drains``), so at T, or at a later protection's end;
    a drain now scheduled at T on a host draining already stops it at T where its protection ends
    later (said as that drain now). A drain that would stop it only at or after its wall-time
    limit's end is not said: the limit ends it first, failed (try51)."""
    if attempt.ended_at is not None or attempt.stop_requested_at is not None:
        return []
    out: dict[str, DrainingHost] = {}
    for link in attempt.gpu_links.all() if links is None else links:
        host = link.gpu.host
        if host.name in out:
            continue
        protected = attempt.protected_until if attempt.charged_until_release else None  # allocated work's
        if host.state == Host.State.DRAINING:
            drain_now, drains_at = host.drain_now, None
            if (
                not drain_now
                and host.drain_at is not None
                and host.drain_at_now
                and protected
                and protected > host.drain_at
            ):
                # a drain now scheduled on a host draining already stops it before its protection's end
                drain_now, drains_at = True, host.drain_at
        elif host.drain_at is not None and _returns_to(host) in (Host.State.ACTIVE, Host.State.CORDONED):
            # an offline host's too: its drain still applies at its time (words47: only "silent" was said)
            drain_now, drains_at = host.drain_at_now, host.drain_at
        else:
            continue
        if drain_now:
            protected = None
        stops_at = protected if drains_at is None else max(drains_at, protected or drains_at)
        if stops_at is not None and (limit_ends := wall_time_ends_at(attempt)) is not None and limit_ends <= stops_at:
            continue  # its wall-time limit ends it first, failed, not requeued (try51: both were said)
        out[host.name] = DrainingHost(host.name, drain_now, stops_at, drains_at)
    return [out[name] for name in sorted(out)]


def sweep_hosts(now: datetime | None = None) -> dict[str, int]:
    """Mark silent hosts ``offline``; end the attempts of hosts silent past ``HOST_LOST_AFTER_S``.

    Lost attempts end ``lost``, charged up to the host's last heartbeat (from the placement when
    their start was never confirmed: the GPUs were held), and their workloads are requeued. A
    gang's part on a lost host releases that part only and stops the others ``lost``: the gang
    ends when they report, charged as one attempt to its last release (docs/policy.md, "A gang's
    parts exit"). Safe to run twice. Returns counts.
    """
    now = now or timezone.now()
    conf = settings.FAIRWAY
    offline_before = now - timedelta(seconds=conf["HOST_OFFLINE_AFTER_S"])
    lost_before = now - host_lost_after()
    went_offline = 0
    live = Host.objects.filter(removed_at__isnull=True).exclude(state=Host.State.OFFLINE)
    silent = list(live.filter(last_heartbeat__lt=offline_before).values_list("pk", flat=True)) + list(
        live.filter(last_heartbeat__isnull=True, created_at__lt=offline_before).values_list("pk", flat=True)
    )
    for host_id in silent:
        with transaction.atomic():
            host = Host.objects.select_for_update().filter(pk=host_id).exclude(state=Host.State.OFFLINE).first()
            if host is None or (host.last_heartbeat is not None and host.last_heartbeat >= offline_before):
                continue
            HostEvent.objects.create(
                host=host,
                at=now,
                kind="offline",
                message=f"agent silent since {host.last_heartbeat or 'registration'}: {host.state} → offline",
                data={
                    "from": host.state,
                    "last_heartbeat": host.last_heartbeat.isoformat() if host.last_heartbeat else None,
                },
            )
            host.state_before_offline = host.state
            host.state = Host.State.OFFLINE
            host.save(update_fields=["state", "state_before_offline"])
            notify.request_tick_on_commit(host.cluster_id)
            went_offline += 1

    lost = 0
    # A host whose agent never connected (joined, then its install failed) is lost that long after
    # its registration: its attempts stayed "starting" for good, as the start timeout leaves
    # offline hosts to this sweep (brk30).
    lost_hosts = Host.objects.filter(state=Host.State.OFFLINE).filter(
        Q(last_heartbeat__lt=lost_before) | Q(last_heartbeat__isnull=True, created_at__lt=lost_before)
    )
    for host in lost_hosts:
        for attempt_id in sorted(_attempts_on_host(host.pk)):
            with transaction.atomic():
                attempt = _lock_open_attempt(None, attempt_id)
                if attempt is None:
                    continue
                # A gang's part on this host ends that part only (its GPUs here released, the other
                # parts stopped ``lost``), as a part its agent reconnects without: ending the whole
                # attempt freed the live hosts' GPUs while their parts still ran (brk37).
                links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu_id", "gpu__host_id", "open"))
                if host.last_heartbeat is None:  # never heard from: nothing ran, nothing is charged
                    gone = f"is lost (host {host.name}: its agent never connected)"
                    if _release_gang_part(attempt, host, links, attempt.placed_at, None, host.cluster_id, gone=gone):
                        lost += 1
                        continue
                    _end_attempt(
                        attempt,
                        ended_at=attempt.placed_at,
                        reason=attempt.stop_reason or Attempt.EndReason.LOST,
                        message=f"host {host.name} lost (its agent never connected)",
                    )
                    lost += 1
                    continue
                if attempt.started_at is None and host.last_heartbeat > attempt.placed_at:
                    # The lab's GPUs were held for it from the placement to the last heartbeat,
                    # whether its start was still in progress or its report lost: dated at the
                    # placement and charged, as Slurm charges an allocation (docs/policy.md,
                    # "A lost attempt"). Placed after the last heartbeat: nothing to vouch for.
                    note = "dated at its placement: its host was lost before its start was reported"
                    _confirm_start(attempt, host, attempt.placed_at, now, note)
                gone = f"is lost (host {host.name} silent since its last heartbeat)"
                if _release_gang_part(attempt, host, links, host.last_heartbeat, None, host.cluster_id, gone=gone):
                    lost += 1
                    continue
                _end_attempt(
                    attempt,
                    ended_at=host.last_heartbeat,
                    reason=attempt.stop_reason or Attempt.EndReason.LOST,
                    message=f"host {host.name} lost",
                )
                lost += 1
    return {"offline": went_offline, "lost": lost}


def start_timeouts(now: datetime | None = None) -> int:
    """End attempts not confirmed started within ``START_TIMEOUT_S`` as ``failed_to_start``.

    Not those holding a GPU of an ``offline`` host: a host silent during the start says nothing
    of the start; it comes back (and reports it) or is lost (:func:`sweep_hosts`), within
    ``HOST_LOST_AFTER_S`` of its last heartbeat, whichever timeout would come first.
    """
    now = now or timezone.now()
    before = now - timedelta(seconds=settings.FAIRWAY["START_TIMEOUT_S"])
    ended = 0
    silent = AttemptGPU.objects.filter(open=True, gpu__host__state=Host.State.OFFLINE).values("attempt_id")
    for attempt_id in (
        Attempt.objects.filter(ended_at__isnull=True, started_at__isnull=True, placed_at__lt=before)
        .exclude(pk__in=silent)
        .values_list("pk", flat=True)
    ):
        if attempt_failed_to_start(None, attempt_id, "start not confirmed in time", now=now):
            ended += 1
    return ended


# --- wall-time limits and dependencies (docs/jobs.md), run by the tick before its snapshot ---------


def _timed_out_candidates(cluster_id: int, now: datetime) -> list[tuple[int, int]]:
    """(attempt, workload) of the open attempts of ``cluster_id`` past their workload's limit at
    ``now``, read without locks (:func:`stop_timed_out` reads it again under the tick's lock)."""
    limits = dict(live_with_limits(cluster_id).order_by().values_list("pk", "max_runtime_s"))
    if not limits:
        return []
    return [
        (aid, wid)
        for aid, wid, started in Attempt.objects.filter(
            workload_id__in=sorted(limits),
            ended_at__isnull=True,
            started_at__isnull=False,
            stop_requested_at__isnull=True,
        )
        .order_by()
        .values_list("pk", "workload_id", "started_at")
        if started + timedelta(seconds=limits[wid]) <= now
    ]


def live_with_limits(cluster_id: int) -> Any:
    """The live workloads of ``cluster_id`` that have a wall-time limit (the ``cluster, state``
    index): none, and :func:`stop_timed_out` has nothing to read further (most ticks)."""
    return Workload.objects.filter(cluster_id=cluster_id, state__in=_LIVE, max_runtime_s__isnull=False)


def timeouts_due(cluster_id: int, now: datetime) -> bool:
    """Whether :func:`stop_timed_out` has an attempt to stop at ``now``: the tick's unlocked check
    before it (after ``tick._steps_due`` found a live workload with a limit), so a tick with none
    due costs reads, not a transaction of its own (begin, lock, reads, commit)."""
    return bool(_timed_out_candidates(cluster_id, now))


def stop_timed_out(cluster_id: int, now: datetime) -> list[int]:
    """Issue a ``timeout`` stop to every attempt of ``cluster_id`` that has run its workload's
    ``max_runtime_s`` since its confirmed start (DESIGN.md §4: a stop like any other, charged to
    the release; the workload then ends ``failed``). Returns the attempt ids stopped.

    Locks workloads, then attempts (docs/locking.md order).

    Read in single-table statements whose plans do not hang on statistics: the cluster's live
    workloads that have a limit (the ``cluster, state`` index; an open attempt without a stop
    issued belongs to a starting, running or preempting workload: one is requeued or ended only
    with its attempt), nothing more when there are none (most ticks),
    else their open attempts (the ``workload`` index). The join of open attempts to the cluster's
    workloads it replaces (:func:`timed_out_plain`, the oracle) ran 0.5–1.2 s in the tick on tables
    without statistics (a nested loop rescanning the cluster's workloads per open attempt;
    docs/benchmarks/api_load.md, "lat32").
    """
    rows = _timed_out_candidates(cluster_id, now)
    if not rows:
        return []
    list(Workload.objects.select_for_update().filter(pk__in=[w for _a, w in rows]).order_by("pk").values_list("pk"))
    # The limit is read again under the workload's lock: a change of a running workload's limit
    # (services._update_limit_once, which locks the row first) committed after the read above must
    # not be lost: a raised (or removed) limit no longer stops it now (docs/jobs.md).
    claimed = [
        (aid, wid, number, limit)
        for aid, wid, number, started, limit in Attempt.objects.select_for_update()
        .filter(pk__in=[a for a, _w in rows], ended_at__isnull=True, stop_requested_at__isnull=True)
        .order_by("pk")
        .values_list("pk", "workload_id", "number", "started_at", "workload__max_runtime_s")
        if limit is not None and started + timedelta(seconds=limit) <= now
    ]
    if not claimed:
        return []
    Attempt.objects.filter(pk__in=[a for a, *_ in claimed]).update(
        stop_requested_at=now, stop_reason=Attempt.EndReason.TIMEOUT
    )
    Workload.objects.filter(
        pk__in=[w for _a, w, *_ in claimed], state__in=[Workload.State.STARTING, Workload.State.RUNNING]
    ).update(state=Workload.State.PREEMPTING, updated_at=now)
    WorkloadEvent.objects.bulk_create(
        WorkloadEvent(
            workload_id=wid,
            at=now,
            kind="timeout",
            message=f"attempt {number} stopping: wall-time limit of {duration_text(limit)} reached",
            data={"attempt": aid, "reason": "timeout", "max_runtime_s": limit},
        )
        for aid, wid, number, limit in claimed
    )
    notify.push_hosts_on_commit(
        AttemptGPU.objects.filter(attempt_id__in=[a for a, *_ in claimed]).values_list("gpu__host_id", flat=True)
    )
    return [a for a, *_ in claimed]


def timed_out_plain(cluster_id: int, now: datetime) -> list[tuple[int, int]]:
    """(attempt, workload) of every attempt :func:`stop_timed_out` stops at ``now``, read plainly in
    one join (its oracle; tests only)."""
    return sorted(
        (aid, wid)
        for aid, wid, started, limit in Attempt.objects.filter(
            workload__cluster_id=cluster_id,
            ended_at__isnull=True,
            started_at__isnull=False,
            stop_requested_at__isnull=True,
            workload__max_runtime_s__isnull=False,
        ).values_list("pk", "workload_id", "started_at", "workload__max_runtime_s")
        if started + timedelta(seconds=limit) <= now
    )


def unmet_dependencies(cluster_id: int) -> Any:
    """The ``after ID:ok`` dependencies of the pending workloads of ``cluster_id`` that can no
    longer be met (the workload waited for ended failed or canceled)."""
    from scheduler.models import WorkloadDependency

    return WorkloadDependency.objects.filter(
        workload__cluster_id=cluster_id,
        workload__state=Workload.State.PENDING,
        condition=WorkloadDependency.Condition.OK,
        after__state__in=[Workload.State.FAILED, Workload.State.CANCELED],
    )


def dependencies_due(cluster_id: int, now: datetime) -> bool:
    """Whether :func:`settle_dependencies` has a workload to cancel: the tick's unlocked check
    again after a step of the tick ran (``tick._steps_due`` read it before); ``now`` for the
    steps' one signature."""
    return unmet_dependencies(cluster_id).exists()


def settle_dependencies(cluster_id: int, now: datetime) -> list[int]:
    """Cancel the pending workloads of ``cluster_id`` whose ``after ID:ok`` can no longer be met
    (the workload waited for ended failed or canceled), each with an event naming it. Returns
    the workloads canceled; their own dependents follow at the next tick."""
    doomed: dict[int, tuple[int, str]] = {}
    for wid, after, state in (
        unmet_dependencies(cluster_id)
        .values_list("workload_id", "after_id", "after__state")
        .order_by("workload_id", "after_id")
    ):
        doomed.setdefault(wid, (after, state))
    if not doomed:
        return []
    ids = list(
        Workload.objects.select_for_update()
        .filter(pk__in=list(doomed), state=Workload.State.PENDING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    GPU.objects.filter(nominated_for_id__in=ids).update_in_id_order(nominated_for=None)
    Workload.objects.filter(pk__in=ids).update(
        state=Workload.State.CANCELED,
        finished_at=now,
        pending_reason="",
        pending_detail={},
        estimated_start=None,
        estimate_unfunded=False,
        updated_at=now,
    )
    WorkloadEvent.objects.bulk_create(
        WorkloadEvent(
            workload_id=wid,
            at=now,
            kind="canceled",
            message=(
                f"workload {doomed[wid][0]}, which it waited for (after {doomed[wid][0]}:ok), ended {doomed[wid][1]}"
            ),
            data={"dependency": doomed[wid][0], "dependency_state": doomed[wid][1]},
        )
        for wid in ids
    )
    return ids
