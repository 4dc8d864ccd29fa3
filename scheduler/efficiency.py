"""How well an attempt, and a workload over all its attempts, used the GPUs it held, like Slurm's
``seff`` (docs/jobs.md "Efficiency"): the one computation the API's ``efficiency``, ``fairway
show``, ``fairway seff``, ``fairway history`` and the workload page read.

Per GPU an attempt holds (``AttemptGPU``), over ``[placed_at, released_at or ended_at or now)``
(the pyramid's occupied time, DESIGN.md §8: a gang's part released before the attempt ended held
its GPUs to its release, util46; an open attempt on an offline host up to its last heartbeat, as
it is charged: ``accounting.silent_until``):

- **held**: the GPU-seconds held;
- **measured** and **utilized**: the minutes of its own, each measured for the seconds held of it
  and utilized for its busy seconds (:func:`scheduler.pyramid.minute_busy`: 60 s × the minute
  sample's mean, :func:`scheduler.pyramid.minute_utilization`, held whole; held in part, its busy
  readings' share of those the held seconds took, as :func:`scheduler.pyramid.weigh_minutes`
  weighs the cluster's; busy46, util47: a partly held minute's free seconds' 0 % no longer dilutes
  a short job's figure, and a GPU busy all along reads 100 %); the mean utilization is utilized
  over measured, unknown (None) when nothing was measured. A minute sample is the GPU's minute,
  not the attempt's, so a minute is the attempt's own when it held it whole, or held it in part
  and no other attempt held that GPU in it (its other seconds the GPU was free; util46: a 50 s job
  read "not measured" though its GPU was sampled). A minute another attempt held too has both
  jobs' samples: held, not measured (util63: a finished attempt read 61 %, 63 %, 64 % on reloads
  as the next attempt's samples entered the minute it ended in). Samples are bucketed by the
  minute they were received in, so once the minute an attempt ended in is over, none of its
  minutes takes another sample and no other attempt can enter one: the figure is fixed, and kept
  before its samples are pruned (``Attempt.efficiency_kept``, :func:`keep_efficiency`, util47:
  read from then on);
- **not measured**: the held GPU-time without a minute sample of its own that read its
  utilization (``held - measured``: a minute shared with another attempt, a MIG-mode GPU NVML
  cannot read, nvml56), never 0 %; all of it for an attempt that ended without its agent ever
  starting it (``failed_to_start``): nothing of it ran, so its GPUs' minutes are other work's
  (try61: 71 %, the work's before it). ``utilization_why`` says why the mean is unknown:
  ``never_started`` (no attempt of it was ever started by its agent: ``failed_to_start``),
  ``no_own_minute`` (every minute it held, so far, another attempt held the GPU in too),
  ``no_sample`` (it held minutes of its own, none sampled);
- **idle**: the measured GPU-time in minutes under ``FAIRWAY_IDLE_UTIL_PCT`` by their busy
  seconds (:func:`scheduler.idle.quiet_held`, the idle rule's minute, util47; in SQL for the
  minutes held whole, :func:`scheduler.idle.quiet_minute`), as a share of the measured time;
- **peak memory**: the highest ``memory_used_max_mb`` of a minute of its own on any GPU it held,
  with that GPU's memory; None (not measured) without one (left59: not the previous job's).

Unlike the pyramid's hours, no GPU's latest sample stands in for an hour without minute samples.
Two queries for any number of attempts (:func:`efficiency_of_attempts`): per GPU link, the minutes
wholly held are summed in SQL and whether another attempt held its first and last minute is
asked there; the partly held minutes of its own (two per GPU at most) are read in one more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import (
    BooleanField,
    Count,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    OuterRef,
    Q,
    Subquery,
    Sum,
)
from django.db.models import Value as V
from django.db.models.functions import Coalesce, TruncMinute
from django.utils import timezone

from scheduler.accounting import silent_until_subquery
from scheduler.idle import quiet_held, quiet_minute, threshold_pct
from scheduler.models import AttemptGPU, GpuMinuteSample, Workload
from scheduler.pyramid import (
    MINUTE,
    measured_minutes,
    minute_busy,
    minute_utilization,
    minute_utilization_sql,
    sampled_seconds,
)


@dataclass
class Efficiency:
    """GPU-seconds of one attempt, or of a workload's attempts added up."""

    held: float = 0.0
    measured: float = 0.0
    utilized: float = 0.0
    idle: float = 0.0
    memory_peak_mb: int | None = None
    memory_total_mb: int | None = None
    gpus: int = 0
    running: bool = False
    own_minute: bool = False
    """It held a minute of its own on a GPU at least: whole, or in part with no other attempt on
    that GPU in it (else no minute sample is its own)."""
    ran: bool = False
    """One of its attempts was started by its agent, or is still open (an attempt that ended never
    started, ``failed_to_start``, ran nothing: none of its GPUs' minutes is its own, try61)."""
    threshold_pct: float = field(default_factory=threshold_pct)

    def add(self, other: Efficiency) -> None:
        self.held += other.held
        self.measured += other.measured
        self.utilized += other.utilized
        self.idle += other.idle
        self.gpus = max(self.gpus, other.gpus)
        self.running = self.running or other.running
        self.own_minute = self.own_minute or other.own_minute
        self.ran = self.ran or other.ran
        if other.memory_peak_mb is not None and (
            self.memory_peak_mb is None or other.memory_peak_mb > self.memory_peak_mb
        ):
            self.memory_peak_mb, self.memory_total_mb = other.memory_peak_mb, other.memory_total_mb

    @property
    def utilization(self) -> float | None:
        """The GPU-time weighted mean utilization (0..1) over the measured held time; None: not measured."""
        return min(1.0, self.utilized / self.measured) if self.measured > 0 else None

    @property
    def utilization_why(self) -> str | None:
        """Why :attr:`utilization` is unknown (``fairway_cli.words.utilization_words`` says it):
        ``never_started``, none of its attempts was ever started (each ended ``failed_to_start``);
        ``no_own_minute``, every minute it held (so far) another attempt held on the same GPU too;
        ``no_sample``, none of its own minutes sampled; None when it is known, or nothing was held."""
        if self.measured > 0 or self.held <= 0:
            return None
        if not self.ran:
            return "never_started"
        return "no_sample" if self.own_minute else "no_own_minute"

    def kept(self) -> dict[str, Any]:
        """What an ended attempt keeps of it (``Attempt.efficiency_kept``, :func:`keep_efficiency`)."""
        return {name: getattr(self, name) for name in KEPT}

    @classmethod
    def from_kept(cls, kept: dict[str, Any]) -> Efficiency:
        """An ended attempt's efficiency as it was kept before its samples were pruned."""
        return cls(**{name: kept[name] for name in KEPT if name in kept}, running=False)

    def as_data(self) -> dict[str, Any]:
        """The API's ``efficiency`` object (``fairway_cli.words.efficiency_lines`` writes it in words)."""
        held, measured = self.held, min(self.measured, self.held)

        def share(x: float, of: float) -> float | None:
            return round(min(1.0, x / of), 4) if of > 0 else None

        util = self.utilization
        return {
            "gpus": self.gpus,
            "gpu_hours": round(held / 3600, 4),
            "utilization": round(util, 4) if util is not None else None,
            "utilization_why": self.utilization_why,
            "not_measured": share(held - measured, held),
            "idle": share(self.idle, measured),
            "idle_threshold_pct": self.threshold_pct,
            "memory_peak_mb": self.memory_peak_mb,
            "memory_total_mb": self.memory_total_mb,
            "running": self.running,
        }


KEPT = (
    "held",
    "measured",
    "utilized",
    "idle",
    "memory_peak_mb",
    "memory_total_mb",
    "gpus",
    "own_minute",
    "ran",
    "threshold_pct",
)
"""The :class:`Efficiency` fields an ended attempt keeps (its weighed totals, util47)."""


def _one(samples: Any, value: Any) -> Subquery:
    """A scalar subquery of ``samples`` (one GPU's minutes): ``value`` of the first, or an aggregate."""
    return Subquery(samples.order_by().values("gpu_id").annotate(v=value).values("v")[:1])


def _first_whole_minute(at: datetime) -> datetime:
    """The start of the first minute that begins at ``at`` or after it."""
    minute = at.replace(second=0, microsecond=0)
    return minute if minute == at else minute + MINUTE


def _partial_minutes(a0: datetime, a1: datetime) -> list[tuple[datetime, float]]:
    """The minutes ``[a0, a1)`` holds in part (its first and last, or the one it lies in), each with
    the seconds held of it; the others it holds whole."""
    first, last = a0.replace(second=0, microsecond=0), a1.replace(second=0, microsecond=0)
    if first == last:
        return [(first, (a1 - a0).total_seconds())] if a1 > a0 else []
    out = []
    if first < a0:
        out.append((first, (first + MINUTE - a0).total_seconds()))
    if last < a1:
        out.append((last, (a1 - last).total_seconds()))
    return out


def _shared(minute: str) -> Exists:
    """Another attempt held the link's GPU in its minute ``minute`` (the link's annotation naming
    the minute's start): its samples are in that minute too (a minute sample is the GPU's, not the
    attempt's)."""
    minute_end = ExpressionWrapper(OuterRef(minute) + V(MINUTE), output_field=DateTimeField())
    others = AttemptGPU.objects.filter(gpu_id=OuterRef("gpu_id")).exclude(pk=OuterRef("pk"))
    return Exists(
        others.annotate(until=Coalesce(F("released_at"), F("attempt__ended_at"), output_field=DateTimeField()))
        .filter(attempt__placed_at__lt=minute_end)
        .filter(Q(until__isnull=True) | Q(until__gt=OuterRef(minute)))
    )


def efficiency_of_attempts(
    attempt_ids: Iterable[int] | None = None, now: datetime | None = None, *, workload_id: int | None = None
) -> dict[int, Efficiency]:
    """Each attempt's :class:`Efficiency` (of ``attempt_ids``, or of the workload ``workload_id``'s
    attempts), by attempt id: two queries (the links with their whole minutes summed, then the
    partly held minutes); an attempt without a GPU link is absent."""
    now = now or timezone.now()
    pct = threshold_pct()
    links = AttemptGPU.objects.all()
    if attempt_ids is not None:
        ids = sorted(set(attempt_ids))
        if not ids:
            return {}
        links = links.filter(attempt_id__in=ids)
    if workload_id is not None:
        links = links.filter(attempt__workload_id=workload_id)
    # an open attempt on an offline host held its GPUs up to that host's last heartbeat, as it is
    # charged (accounting.silent_until, try37; brk58: held to now here, back to it once lost); a
    # gang's part released before the attempt ended held its GPUs to its release (util46), as the
    # pyramid's occupied time and the live count free them then (words63)
    silent = silent_until_subquery("attempt_id", outer="attempt_id")
    until = Coalesce(F("released_at"), F("attempt__ended_at"), silent, V(now), output_field=DateTimeField())
    first_minute = TruncMinute("attempt__placed_at", output_field=DateTimeField())
    last_minute = TruncMinute("held_until", output_field=DateTimeField())
    links = links.annotate(
        held_until=until,
        whole_until=ExpressionWrapper(until - V(MINUTE), output_field=DateTimeField()),
        first_minute=first_minute,
        last_minute=last_minute,
    )
    sampled = GpuMinuteSample.objects.filter(gpu_id=OuterRef("gpu_id"), samples__gt=0)
    mine = sampled.filter(measured_minutes())  # the minutes whose utilization was read (nvml56)
    # The minutes wholly held, each weighing a minute: the attempt's own samples only (util63).
    whole = mine.filter(minute__gte=OuterRef("attempt__placed_at"), minute__lte=OuterRef("whole_until"))
    # the memory of the minutes held whole here; of the partly held ones below, where no other
    # attempt held the GPU (left59: the previous job's 79 GB in the minute they shared)
    held = sampled.filter(minute__gte=OuterRef("attempt__placed_at"), minute__lte=OuterRef("whole_until"))
    rows = links.annotate(
        whole_n=_one(whole, Count("pk")),
        whole_util=_one(whole, Sum(minute_utilization_sql())),
        whole_idle=_one(whole, Count("pk", filter=quiet_minute(pct))),
        memory=_one(held, Max("memory_used_max_mb", output_field=IntegerField())),
        first_shared=_shared("first_minute"),
        last_shared=_shared("last_minute"),
    ).values_list(
        "attempt_id",
        "gpu_id",
        "attempt__placed_at",
        "held_until",
        "gpu__memory_mb",
        "whole_n",
        "whole_util",
        "whole_idle",
        "memory",
        "attempt__ended_at",
        "attempt__started_at",
        "first_shared",
        "last_shared",
        "attempt__efficiency_kept",
    )
    out: dict[int, Efficiency] = {}
    # (attempt, GPU's memory, seconds held) of each partly held minute no other attempt held: its
    # samples are the attempt's, and the rest of the minute the GPU was idle (util46)
    partial: dict[tuple[int, datetime], list[tuple[int, int | None, float]]] = {}
    for (
        attempt_id,
        gpu_id,
        a0,
        a1,
        total_mb,
        whole_n,
        whole_util,
        whole_idle,
        memory,
        ended,
        started,
        first_shared,
        last_shared,
        kept,
    ) in rows:
        if kept is not None:  # ended, its figure kept before its samples were pruned (util47)
            out.setdefault(attempt_id, Efficiency.from_kept(kept))
            continue
        e = out.setdefault(attempt_id, Efficiency(threshold_pct=pct, running=ended is None))
        e.gpus += 1
        e.ran = e.ran or started is not None or ended is None
        if a1 <= a0:
            continue
        e.held += (a1 - a0).total_seconds()
        own = [  # its partly held minutes no other attempt held the GPU in
            (minute, part)
            for minute, part in _partial_minutes(a0, a1)
            if not (first_shared if minute == a0.replace(second=0, microsecond=0) else last_shared)
        ]
        e.own_minute = e.own_minute or bool(own) or _first_whole_minute(a0) + MINUTE <= a1
        if started is None and ended is not None:  # it ended never started: its GPUs' minutes are other work's (try61)
            continue
        for minute, part in own:
            partial.setdefault((gpu_id, minute), []).append((attempt_id, total_mb, part))
        seconds = MINUTE.total_seconds()
        e.measured += (whole_n or 0) * seconds
        e.utilized += (whole_util or 0.0) / 100.0 * seconds
        e.idle += (whole_idle or 0) * seconds
        if memory is not None and (e.memory_peak_mb is None or memory > e.memory_peak_mb):
            e.memory_peak_mb, e.memory_total_mb = int(memory), total_mb or None
    if partial:
        _add_partial_minutes(out, partial, pct, now)
    return out


def _add_partial_minutes(
    out: dict[int, Efficiency],
    partial: dict[tuple[int, datetime], list[tuple[int, int | None, float]]],
    pct: float,
    now: datetime,
) -> None:
    """Weigh each partly held minute of its own (``partial``: (GPU, minute) → attempt, GPU memory,
    seconds held): measured for the seconds held, utilized for :func:`scheduler.pyramid.minute_busy`
    of them (no other attempt held the GPU in it, so its busy seconds are the attempt's), as
    :func:`scheduler.pyramid.weigh_minutes` weighs the cluster's; idle when those busy seconds are
    under the threshold's share of the seconds held (:func:`scheduler.idle.quiet_held`, util47): one
    query."""
    gpus = sorted({g for g, _m in partial})
    minutes = sorted({m for _g, m in partial})
    found = (
        GpuMinuteSample.objects.filter(gpu_id__in=gpus, minute__in=minutes, samples__gt=0)
        .annotate(measured=ExpressionWrapper(measured_minutes(), output_field=BooleanField()))
        .values_list("gpu_id", "minute", "measured", "utilization_sum", "utilization_samples", "memory_used_max_mb")
    )
    for gpu_id, minute, measured, total, n, memory in found:
        for attempt_id, total_mb, seconds in partial.get((gpu_id, minute), ()):
            e = out[attempt_id]
            if measured:
                busy = minute_busy(seconds, minute_utilization(total, n), n, sampled_seconds(minute, now))
                e.measured += seconds
                e.utilized += busy
                e.idle += seconds if quiet_held(seconds, busy, pct) else 0.0
            if memory is not None and (e.memory_peak_mb is None or memory > e.memory_peak_mb):
                e.memory_peak_mb, e.memory_total_mb = int(memory), total_mb or None


KEEP_BATCH = 500
"""Attempts whose efficiency :func:`keep_efficiency` weighs and writes at a time."""


def keep_efficiency(before: datetime, now: datetime | None = None) -> int:
    """Keep the efficiency of every ended attempt placed before ``before`` that has not kept it
    (``Attempt.efficiency_kept``), as read now: the GPU metrics' prune calls it before it deletes
    the minute samples older than ``before`` (``scheduler.metrics.prune``), so an ended attempt
    reads the same figure after its samples are gone (util47: it read fewer minutes, or "not
    measured"). Returns how many were kept. Idempotent: a kept figure is never weighed again. Only
    the attempts that ended after the oldest minute sample stored: one that ended before it has
    none left to lose (a first prune after an upgrade weighs the retention's edge, not every
    attempt of the past; about 1,400 attempts took 3.3 s on PostgreSQL, 16 s on SQLite)."""
    from scheduler.models import Attempt

    now = now or timezone.now()
    oldest = GpuMinuteSample.objects.order_by("minute").values_list("minute", flat=True).first()
    if oldest is None or oldest >= before:
        return 0
    pending = Attempt.objects.filter(ended_at__gt=oldest, efficiency_kept__isnull=True, placed_at__lt=before)
    ids = list(pending.order_by("pk").values_list("pk", flat=True))
    kept = 0
    for i in range(0, len(ids), KEEP_BATCH):
        found = efficiency_of_attempts(ids[i : i + KEEP_BATCH], now)
        rows = [Attempt(pk=pk, efficiency_kept=e.kept()) for pk, e in found.items() if not e.running]
        Attempt.objects.bulk_update(rows, ["efficiency_kept"])
        kept += len(rows)
    return kept


@dataclass
class WorkloadEfficiency:
    """A workload's efficiency over all its attempts, and each attempt's (by attempt id)."""

    total: Efficiency
    attempts: dict[int, Efficiency]


CACHE = "_efficiency"
"""The attribute a workload keeps its :func:`workload_efficiency` in (the API's detail reads it
for the workload and each attempt: one query)."""


def workload_efficiency(workload: Workload, now: datetime | None = None) -> WorkloadEfficiency:
    """``workload``'s efficiency, all its attempts added up, and each attempt's: one query, once per object."""
    cached = workload.__dict__.get(CACHE)
    if cached is not None:
        return cached
    prefetched = getattr(workload, "_prefetched_objects_cache", {}).get("attempts")
    none = prefetched is not None and not prefetched  # a pending one's detail: no query
    attempts = {} if none else efficiency_of_attempts(None, now, workload_id=workload.pk)
    total = Efficiency()
    for e in attempts.values():
        total.add(e)
    found = WorkloadEfficiency(total, attempts)
    workload.__dict__[CACHE] = found
    return found


__all__ = ["Efficiency", "WorkloadEfficiency", "efficiency_of_attempts", "keep_efficiency", "workload_efficiency"]
