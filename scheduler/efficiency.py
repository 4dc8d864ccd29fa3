"""How well an attempt, and a workload over all its attempts, used the GPUs it held, like Slurm's
``seff`` (docs/jobs.md "Efficiency"): the one computation the API's ``efficiency``, ``fairway
show``, ``fairway seff``, ``fairway history`` and the workload page read.

Per GPU an attempt holds (``AttemptGPU``), over ``[placed_at, ended_at or now)`` (the pyramid's
occupied time, DESIGN.md §8; an open attempt on an offline host up to its last heartbeat, as it is
charged: ``accounting.silent_until``):

- **held**: the GPU-seconds held;
- **measured** and **utilized**: the minutes the GPU was held **whole** (a minute ``m`` with
  ``placed_at ≤ m`` and ``m + 1 min ≤ ended_at or now``), each weighing a minute, with their
  minute sample's mean (:func:`scheduler.pyramid.minute_utilization`); the mean utilization is
  utilized over measured, unknown (None) when nothing was measured. A minute sample is the GPU's
  minute, not the attempt's: the minute it was placed in and the one it ended in hold the work
  before and after it on the same GPU (or an idle GPU), so they are held, not measured (util63: a
  finished attempt read 61 %, 63 %, 64 % on reloads as the next attempt's samples entered the
  minute it ended in; a job seconds old read 2 %, the idle minute before it). Samples are bucketed
  by the minute they were received in, so a minute held whole holds this attempt's samples only,
  and once the attempt ended none of its minutes takes another: the figure is fixed;
- **not measured**: the held GPU-time without a minute sample of its own that read its
  utilization (``held - measured``: its partly held first and last minutes, a MIG-mode GPU NVML
  cannot read, nvml56), never 0 %; all of it for an attempt that ended without its agent ever
  starting it (``failed_to_start``): nothing of it ran, so its GPUs' minutes are other work's
  (try61: 71 %, the work's before it). ``utilization_why`` says why the mean is unknown:
  ``no_whole_minute`` (younger than one minute sample of its own, or ended before one),
  ``no_sample`` (held whole minutes, none sampled);
- **idle**: the measured GPU-time in minutes under ``FAIRWAY_IDLE_UTIL_PCT``
  (:func:`scheduler.idle.quiet_minute`, the idle rule's minute), as a share of the measured time;
- **peak memory**: the highest ``memory_used_max_mb`` of a minute any held GPU was held whole,
  with that GPU's memory; None (not measured) without one (left59).

Unlike the pyramid's hours, no GPU's latest sample stands in for an hour without minute samples,
and no partly held minute is weighed (the pyramid's cluster hour weighs them by the seconds held:
all work on a GPU is the cluster's). One query for any number of attempts
(:func:`efficiency_of_attempts`): per GPU link, the minutes wholly held are summed in SQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, DateTimeField, ExpressionWrapper, F, IntegerField, Max, OuterRef, Subquery, Sum
from django.db.models import Value as V
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduler.accounting import silent_until_subquery
from scheduler.idle import quiet_minute, threshold_pct
from scheduler.models import AttemptGPU, GpuMinuteSample, Workload
from scheduler.pyramid import MINUTE, measured_minutes, minute_utilization_sql


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
    whole_minute: bool = False
    """A GPU of it was held one whole minute at least (else no minute sample is its own)."""
    threshold_pct: float = field(default_factory=threshold_pct)

    def add(self, other: Efficiency) -> None:
        self.held += other.held
        self.measured += other.measured
        self.utilized += other.utilized
        self.idle += other.idle
        self.gpus = max(self.gpus, other.gpus)
        self.running = self.running or other.running
        self.whole_minute = self.whole_minute or other.whole_minute
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
        ``no_whole_minute``, no minute held whole yet (or ever); ``no_sample``, none of them sampled;
        None when it is known, or nothing was held."""
        if self.measured > 0 or self.held <= 0:
            return None
        return "no_sample" if self.whole_minute else "no_whole_minute"

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


def _one(samples: Any, value: Any) -> Subquery:
    """A scalar subquery of ``samples`` (one GPU's minutes): ``value`` of the first, or an aggregate."""
    return Subquery(samples.order_by().values("gpu_id").annotate(v=value).values("v")[:1])


def _first_whole_minute(at: datetime) -> datetime:
    """The start of the first minute that begins at ``at`` or after it."""
    minute = at.replace(second=0, microsecond=0)
    return minute if minute == at else minute + MINUTE


def efficiency_of_attempts(
    attempt_ids: Iterable[int] | None = None, now: datetime | None = None, *, workload_id: int | None = None
) -> dict[int, Efficiency]:
    """Each attempt's :class:`Efficiency` (of ``attempt_ids``, or of the workload ``workload_id``'s
    attempts), by attempt id: one query; an attempt without a GPU link is absent."""
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
    # charged (accounting.silent_until, try37; brk58: held to now here, back to it once lost)
    silent = silent_until_subquery("attempt_id", outer="attempt_id")
    until = Coalesce(F("attempt__ended_at"), silent, V(now), output_field=DateTimeField())
    links = links.annotate(
        held_until=until,
        whole_until=ExpressionWrapper(until - V(MINUTE), output_field=DateTimeField()),
    )
    sampled = GpuMinuteSample.objects.filter(gpu_id=OuterRef("gpu_id"), samples__gt=0)
    mine = sampled.filter(measured_minutes())  # the minutes whose utilization was read (nvml56)
    # The minutes wholly held, each weighing a minute: the attempt's own samples only (util63).
    whole = mine.filter(minute__gte=OuterRef("attempt__placed_at"), minute__lte=OuterRef("whole_until"))
    # the memory of the minutes held whole only: a sample is the GPU's minute, not the attempt's, so
    # a partly held one may be another attempt's memory (left59: the previous job's 79 GB)
    held = sampled.filter(minute__gte=OuterRef("attempt__placed_at"), minute__lte=OuterRef("whole_until"))
    rows = links.annotate(
        whole_n=_one(whole, Count("pk")),
        whole_util=_one(whole, Sum(minute_utilization_sql())),
        whole_idle=_one(whole, Count("pk", filter=quiet_minute(pct))),
        memory=_one(held, Max("memory_used_max_mb", output_field=IntegerField())),
    ).values_list(
        "attempt_id",
        "attempt__placed_at",
        "held_until",
        "gpu__memory_mb",
        "whole_n",
        "whole_util",
        "whole_idle",
        "memory",
        "attempt__ended_at",
        "attempt__started_at",
    )
    out: dict[int, Efficiency] = {}
    for (
        attempt_id,
        a0,
        a1,
        total_mb,
        whole_n,
        whole_util,
        whole_idle,
        memory,
        ended,
        started,
    ) in rows:
        e = out.setdefault(attempt_id, Efficiency(threshold_pct=pct, running=ended is None))
        e.gpus += 1
        if a1 <= a0:
            continue
        e.held += (a1 - a0).total_seconds()
        e.whole_minute = e.whole_minute or _first_whole_minute(a0) + MINUTE <= a1
        if started is None and ended is not None:  # it ended never started: its GPUs' minutes are other work's (try61)
            continue
        seconds = MINUTE.total_seconds()
        e.measured += (whole_n or 0) * seconds
        e.utilized += (whole_util or 0.0) / 100.0 * seconds
        e.idle += (whole_idle or 0) * seconds
        if memory is not None and (e.memory_peak_mb is None or memory > e.memory_peak_mb):
            e.memory_peak_mb, e.memory_total_mb = int(memory), total_mb or None
    return out


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


__all__ = ["Efficiency", "WorkloadEfficiency", "efficiency_of_attempts", "workload_efficiency"]
