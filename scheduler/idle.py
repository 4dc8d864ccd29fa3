"""Idle GPUs (docs/jobs.md "Idle GPUs"): the one rule of when a running attempt is idle.

An attempt is **idle** when every GPU it holds reports a mean utilization under
``FAIRWAY_IDLE_UTIL_PCT`` in each of its minute samples (:class:`~scheduler.models.GpuMinuteSample`)
since some minute, and that minute is at least ``FAIRWAY_IDLE_AFTER_S`` ago (0: the rule is off).
Per GPU, over the samples since the attempt's confirmed start: it is idle since the minute after
its last busy minute (mean at or above the threshold), or since its first sample when none was
busy, and not before its sample after a gap longer than :data:`REPORTED_S` (brk56); a GPU whose
latest sample is older than that (or that has none, or whose utilization NVML could not read: a
MIG-mode GPU) is not reported, and unknown is not idle. The
attempt is idle since the latest of its GPUs'.

:func:`idle_attempts` is that rule, read by every surface (the API's ``idle`` and ``?idle=``, the
workload page, ``fairway ls`` and ``show`` through the API) and by :func:`tell_idle`, which the
clock's sweep runs (``tasks.check_idle``) to tell owners once per idle stretch. Two queries, by
the samples' ``(gpu, minute)`` index: one probe per open GPU link of the attempts asked about (its
latest reported minute: quiet or not); then, for the attempts whose every GPU is quiet now only,
each GPU's last busy minute (a short scan back over the idle stretch), first sample and samples
since; a third only for a stretch missing minutes enough for a gap (:func:`_after_gaps`).
Fairway does not stop idle work (docs/jobs.md says why).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Count, Exists, F, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from fairway_cli.words import idle_held_text, idle_words
from scheduler.pyramid import measured_minutes

logger = logging.getLogger(__name__)

REPORTED_S = 180
"""A GPU is reported while its latest minute sample began at most this long before the current
minute's start (the agents send a heartbeat every few seconds; a silent host's GPUs are unknown)."""

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Idle:
    """An idle attempt: since when all its GPUs are under ``threshold_pct``, for how long, and how many it holds."""

    attempt_id: int
    workload_id: int
    since: datetime
    seconds: int
    gpus: int
    threshold_pct: float

    @property
    def gpu_hours(self) -> float:
        """GPU-hours held idle: its GPUs times the idle stretch."""
        return self.gpus * self.seconds / 3600

    def as_data(self) -> dict[str, Any]:
        """The API's ``idle`` object (``fairway_cli.words.idle_words`` writes it in words)."""
        return {
            "since": self.since.isoformat().replace("+00:00", "Z"),
            "seconds": self.seconds,
            "gpus": self.gpus,
            "gpu_hours": round(self.gpu_hours, 3),
            "threshold_pct": self.threshold_pct,
        }

    @property
    def text(self) -> str:
        return idle_words(self.as_data())


def threshold_pct() -> float:
    return float(settings.FAIRWAY["IDLE_UTIL_PCT"])


def after_s() -> int:
    return int(settings.FAIRWAY["IDLE_AFTER_S"])


def quiet_held(held: float, busy: float, pct: float) -> bool:
    """The one rule of an idle GPU-minute (util47): its busy seconds
    (:func:`scheduler.pyramid.minute_busy`, the utilization's) are under ``pct`` (:func:`threshold_pct`)
    of the seconds it was held; exactly the threshold is busy. So a minute reads idle exactly when
    its utilization reads under the threshold: a partly held one by its held seconds' readings,
    not by the minute's mean with the free seconds' 0 % (20 s held of a minute sampled every 15 s,
    busy all along, read 100 % and idle under a 30 % threshold). A minute held whole (this
    module's minutes: from the confirmed start to now, the one in progress so far) is
    :func:`quiet_minute`, the same rule in SQL."""
    return held > 0 and busy < held * pct / 100.0


def quiet_minute(pct: float) -> Q:
    """:func:`quiet_held` of a ``GpuMinuteSample`` held whole, in SQL: its mean utilization is under
    ``pct`` (its busy seconds are 60 s, or those so far, × its mean): an idle minute, of this
    module's rule and of ``scheduler.efficiency``'s share of the minutes held whole. A minute
    whose utilization no sample read is not quiet: unknown is not idle (nvml56)."""
    return measured_minutes() & Q(utilization_sum__lt=F("utilization_samples") * pct)


def idle_attempts(
    attempt_ids: Iterable[int] | None = None, now: datetime | None = None, *, workload_ids: Iterable[int] | None = None
) -> dict[int, Idle]:
    """The idle ones of the open, started attempts (all of them, or those of ``attempt_ids``, or
    of ``workload_ids``), by attempt id: the module's rule, in two queries (three with a gap)."""
    from scheduler.models import AttemptGPU, GpuMinuteSample

    after = after_s()
    if after <= 0:
        return {}
    now = now or timezone.now()
    pct = threshold_pct()
    links = AttemptGPU.objects.filter(
        open=True,
        attempt__ended_at__isnull=True,
        attempt__started_at__isnull=False,
        attempt__stop_requested_at__isnull=True,
    )
    if attempt_ids is not None:
        ids = sorted(set(attempt_ids))
        if not ids:
            return {}
        links = links.filter(attempt_id__in=ids)
    if workload_ids is not None:
        wids = sorted(set(workload_ids))
        if not wids:
            return {}
        links = links.filter(attempt__workload_id__in=wids)
    reported_from = now.replace(second=0, microsecond=0) - timedelta(seconds=REPORTED_S)
    # Only the minutes that began after the confirmed start: the one it started in may hold the
    # samples of the work before it on that GPU.
    samples = GpuMinuteSample.objects.filter(
        measured_minutes(), gpu_id=OuterRef("gpu_id"), minute__gte=OuterRef("attempt__started_at")
    )
    quiet = Case(When(quiet_minute(pct), then=Value(True)), default=Value(False))
    # First every GPU's latest reported minute (one probe each): True under the threshold, False
    # at or above it, None when the GPU is not reported. Only the attempts whose every GPU is quiet
    # now are read further (most running work is busy: a third of the probes).
    latest = links.annotate(
        quiet=Subquery(samples.filter(minute__gte=reported_from).order_by("-minute").annotate(q=quiet).values("q")[:1])
    ).values_list("attempt_id", "attempt__workload_id", "quiet")
    workloads: dict[int, int] = {}
    gpus: dict[int, int] = {}
    candidates: dict[int, bool] = {}
    for attempt_id, workload_id, is_quiet in latest:
        workloads[attempt_id] = workload_id
        gpus[attempt_id] = gpus.get(attempt_id, 0) + 1
        candidates[attempt_id] = candidates.get(attempt_id, True) and bool(is_quiet)
    quiet_ids = sorted(pk for pk, ok in candidates.items() if ok)
    if not quiet_ids:
        return {}
    # Then, of those, each GPU's last busy minute and first sample: it is idle since the minute
    # after the busy one, or since its first sample (a busy minute come meanwhile: since after now);
    # and how many samples it has since then, for the gaps (:func:`_after_gaps`).
    last_busy = Subquery(samples.exclude(quiet_minute(pct)).order_by("-minute").values("minute")[:1])
    after_busy = samples.filter(minute__gt=Coalesce(OuterRef("last_busy"), OuterRef("attempt__started_at")))
    rows = (
        links.filter(attempt_id__in=quiet_ids)
        .annotate(
            last_busy=last_busy,
            first_seen=Subquery(samples.order_by("minute").values("minute")[:1]),
            seen=Subquery(after_busy.order_by().values("gpu_id").annotate(n=Count("pk")).values("n")[:1]),
        )
        .values_list("pk", "attempt_id", "last_busy", "first_seen", "seen")
    )
    since: dict[int, datetime | None] = {}
    gapped: dict[int, int] = {}  # link → attempt, of the stretches missing minutes enough for a gap
    current = now.replace(second=0, microsecond=0)
    for link_id, attempt_id, busy, first_seen, seen in rows:
        gpu_since = None if first_seen is None else max(first_seen, busy + MINUTE if busy else first_seen)
        _later(since, attempt_id, gpu_since)
        # the minutes of the stretch up to the current one without a sample (the last few may be
        # only not reported yet: read exactly below)
        if gpu_since is not None and (int((current - gpu_since) / MINUTE) + 1 - (seen or 0)) * 60 >= REPORTED_S:
            gapped[link_id] = attempt_id
    if gapped:
        _after_gaps(gapped, since, links, after_busy, last_busy)
    found = {}
    for attempt_id, began in since.items():
        if began is None:
            continue
        seconds = int((now - began).total_seconds())
        if seconds >= after:
            found[attempt_id] = Idle(attempt_id, workloads[attempt_id], began, seconds, gpus[attempt_id], pct)
    return found


def _after_gaps(
    gapped: dict[int, int], since: dict[int, datetime | None], links: Any, after_busy: Any, last_busy: Any
) -> None:
    """Unknown is not idle within a stretch either (brk56: busy, an hour without samples, then one
    quiet minute read "idle for 1h"; brk58: alike an hour of samples whose utilization NVML could
    not read): a stretch starts again at its latest sample with none in the
    :data:`REPORTED_S` before it. Read only for the GPU links of ``gapped`` (link → attempt), those
    whose stretch misses minutes enough for such a gap: a probe per sample, back to the gap."""
    from scheduler.models import GpuMinuteSample

    before = GpuMinuteSample.objects.filter(  # a minute not measured is no report (brk58)
        measured_minutes(),
        gpu_id=OuterRef("gpu_id"),
        minute__lt=OuterRef("minute"),
        minute__gte=OuterRef("minute") - timedelta(seconds=REPORTED_S),
    )
    resumed = (
        links.filter(pk__in=list(gapped))
        .annotate(
            last_busy=last_busy,
            resumed=Subquery(after_busy.filter(~Exists(before)).order_by("-minute").values("minute")[:1]),
        )
        .values_list("pk", "resumed")
    )
    for link_id, at in resumed:
        if at is not None:
            _later(since, gapped[link_id], at)


def _later(since: dict[int, datetime | None], attempt_id: int, at: datetime | None) -> None:
    """``since[attempt_id]``: the latest of its GPUs' starts, None once one GPU has none (no sample)."""
    before = since.get(attempt_id, at)
    since[attempt_id] = None if at is None or before is None else max(before, at)


def idle_of_workloads(workload_ids: Iterable[int], now: datetime | None = None) -> dict[int, Idle]:
    """The idle open attempt of each of these workloads, by workload id (a workload runs one attempt at a time)."""
    return {i.workload_id: i for i in idle_attempts(None, now, workload_ids=workload_ids).values()}


def idle_workload_ids(now: datetime | None = None) -> set[int]:
    """The workloads whose open attempt is idle (the list's ``?idle=true``, ``fairway ls --idle``)."""
    return {i.workload_id for i in idle_attempts(None, now).values()}


def told_message(idle: Idle) -> str:
    """The ``idle`` event's words (stored: the instant in full)."""
    return f"{idle_held_text(idle.as_data(), absolute=True)}. Fairway does not stop it: cancel it if it is not needed."


def tell_idle(now: datetime | None = None) -> int:
    """Tell the owners of the attempts idle now that were not told of this idle stretch (an
    ``idle`` workload event and its notifications); returns how many were told. An attempt is told
    once per stretch: again only after a busy minute began a new one (``Attempt.idle_told_since``,
    set by a compare-and-set, so two checks at once tell once). Each told attempt is its own
    transaction: its workload's row, then the attempt's (docs/locking.md)."""
    from scheduler.models import Attempt, Workload, WorkloadEvent
    from scheduler.notify import events_on_commit

    now = now or timezone.now()
    idle = idle_attempts(None, now)
    if not idle:
        return 0
    candidates = {
        pk
        for pk, told in Attempt.objects.filter(pk__in=list(idle)).values_list("pk", "idle_told_since")
        if told is None or told < idle[pk].since
    }
    told = 0
    for pk in sorted(candidates):
        i = idle[pk]
        with transaction.atomic():
            # docs/locking.md: the workload before its attempt, as a cancel and an exit report lock
            # them (the event's insert takes a key-share lock of the workload: after the attempt's,
            # it waited for a cancel holding the workload and waiting for the attempt).
            list(Workload.objects.select_for_update().filter(pk=i.workload_id).values_list("pk"))
            claimed = (
                Attempt.objects.filter(pk=pk, ended_at__isnull=True)
                .filter(Q(idle_told_since__isnull=True) | Q(idle_told_since__lt=i.since))
                .update(idle_told_since=i.since)
            )
            if not claimed:
                continue
            data = {"attempt_id": pk, **i.as_data()}
            event = WorkloadEvent.objects.create(
                workload_id=i.workload_id, at=now, kind="idle", message=told_message(i), data=data
            )
            events_on_commit([event])
        told += 1
    if told:
        logger.info("told %d idle attempt(s)", told)
    return told
