"""The idle rule of docs/jobs.md "Idle GPUs", written slowly: the oracle of :mod:`scheduler.idle`.

Nothing here is fast or clever, and nothing outside the tests reads it. It loads the rows plainly
(every ``GpuMinuteSample`` of every GPU an attempt holds) and walks each GPU's minutes one by one,
from the attempt's confirmed start to the current minute, stating the rule in the docs' words:

- A minute sample is **quiet** when its mean utilization (over the heartbeats that read it) is
  under ``FAIRWAY_IDLE_UTIL_PCT``; exactly the threshold is busy.
- **Unknown is not idle**: a minute whose utilization no heartbeat read (``null``: a MIG-mode GPU,
  nvml56) tells nothing, as a minute without a sample; a GPU with no read minute, or none in the
  last 3 minutes (:data:`~scheduler.idle.REPORTED_S`), keeps the attempt not idle; a gap of over
  3 minutes between two read minutes starts the stretch again at the one after it (brk56).
- A GPU is idle since the minute after its last busy minute, or since its first read minute (or
  the first after a gap), counting the minutes after the attempt's confirmed start only; the
  attempt is idle since the latest of its GPUs', when that is at least ``FAIRWAY_IDLE_AFTER_S``
  ago (``0``: off). A starting attempt, one asked to stop, or an ended one is not idle.

And :func:`efficiency_idle_reference`, the minute rule of ``scheduler.efficiency``'s share of
minutes idle: every read minute of a GPU an attempt held whole (within ``[placed_at, ended_at or
now)``) weighs a minute, and counts as idle when quiet; a partly held minute is the GPU's, other
work's too, so it is not the attempt's (util63).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from scheduler.idle import MINUTE, REPORTED_S, after_s, threshold_pct


@dataclass(frozen=True)
class Reading:
    """One GPU's minute, as the oracle reads it: its mean utilization in percent, None: not read."""

    minute: datetime
    mean_pct: float | None


def _readings(gpu_id: int) -> dict[datetime, Reading]:
    from scheduler.models import GpuMinuteSample

    out = {}
    for row in GpuMinuteSample.objects.filter(gpu_id=gpu_id):
        if row.samples > 0:
            out[row.minute] = Reading(row.minute, row.utilization_mean)
    return out


def is_quiet(reading: Reading, pct: float) -> bool:
    """Under the threshold (exactly it is busy); a minute nobody read is not quiet."""
    return reading.mean_pct is not None and reading.mean_pct < pct


def gpu_idle_since(
    readings: dict[datetime, Reading], started_at: datetime, now: datetime, pct: float
) -> datetime | None:
    """Since when one GPU is idle for an attempt started at ``started_at``; None: not idle now
    (busy in its latest read minute, or not reported: unknown)."""
    current = now.replace(second=0, microsecond=0)
    gap = timedelta(seconds=REPORTED_S)
    stretch: datetime | None = None  # the start of the quiet stretch so far
    previous: datetime | None = None  # the latest minute read so far (since the start)
    latest_quiet = False
    minute = started_at.replace(second=0, microsecond=0)
    if minute < started_at:
        minute += MINUTE  # the minute the attempt started in may hold the work before it
    while minute <= current:
        reading = readings.get(minute)
        if reading is not None and reading.mean_pct is not None:
            if previous is None or minute - previous > gap:
                stretch = minute  # its first read minute, or the first after a gap: unknown before
            if is_quiet(reading, pct):
                latest_quiet = True
            else:
                stretch = minute + MINUTE  # busy: idle, if at all, from the minute after
                latest_quiet = False
            previous = minute
        minute += MINUTE
    if previous is None or current - previous > gap:
        return None  # never read, or silent for over 3 minutes: not reported
    if not latest_quiet:
        return None
    return stretch


@dataclass(frozen=True)
class IdleReference:
    since: datetime
    seconds: int
    gpus: int


def idle_reference(now: datetime | None = None) -> dict[int, IdleReference]:
    """Every idle attempt by id, by the rule above: what :func:`scheduler.idle.idle_attempts` says."""
    from scheduler.models import Attempt

    now = now or timezone.now()
    after = after_s()
    pct = threshold_pct()
    if after <= 0:
        return {}
    found = {}
    for attempt in Attempt.objects.order_by("pk"):
        if attempt.started_at is None or attempt.ended_at is not None or attempt.stop_requested_at is not None:
            continue  # starting, asked to stop, or over
        gpus = [link.gpu_id for link in attempt.gpu_links.all() if link.open]
        if not gpus:
            continue
        starts = [gpu_idle_since(_readings(gpu_id), attempt.started_at, now, pct) for gpu_id in gpus]
        if any(s is None for s in starts):
            continue  # one GPU not idle (or unknown): the attempt is not
        since = max(s for s in starts if s is not None)
        seconds = int((now - since).total_seconds())
        if seconds >= after:
            found[attempt.pk] = IdleReference(since, seconds, len(gpus))
    return found


@dataclass(frozen=True)
class EfficiencyIdleReference:
    measured: float  # GPU-seconds held in minutes whose utilization was read
    idle: float  # of those, the GPU-seconds in quiet minutes


def efficiency_idle_reference(now: datetime | None = None) -> dict[int, EfficiencyIdleReference]:
    """Every attempt with a GPU link, by id: its measured and idle GPU-seconds, minute by minute."""
    from scheduler.models import Attempt

    now = now or timezone.now()
    pct = threshold_pct()
    out = {}
    for attempt in Attempt.objects.order_by("pk"):
        links = list(attempt.gpu_links.all())
        if not links:
            continue
        a0, a1 = attempt.placed_at, attempt.ended_at or now
        measured = idle = 0.0
        for link in links:
            readings = _readings(link.gpu_id)
            minute = a0.replace(second=0, microsecond=0)
            while minute < a1:
                reading = readings.get(minute)
                whole = a0 <= minute and minute + MINUTE <= a1  # util63: a partly held minute is not its own
                held = MINUTE.total_seconds() if whole else 0.0
                if reading is not None and reading.mean_pct is not None:
                    measured += held
                    if is_quiet(reading, pct):
                        idle += held
                minute += MINUTE
        out[attempt.pk] = EfficiencyIdleReference(measured, idle)
    return out
