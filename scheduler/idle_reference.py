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

And :func:`efficiency_idle_reference`, the minute rule of ``scheduler.efficiency``'s measured,
utilized and idle GPU-seconds: per GPU an attempt held over ``[placed_at, released_at or ended_at or
now)``, a minute is its own when it held it whole, or in part with no other attempt holding that GPU
in it (util46; a minute another attempt held too is both jobs' samples, util63). Each read minute of
its own is measured for the seconds held of it. Its busy seconds: held whole, 60 s (the seconds so
far, in the minute in progress) times the minute's mean; held in part, the rest of the minute the
GPU was free and read 0 % (busy46: that must not dilute the job's figure), so every busy reading was
taken in the seconds held, and of the readings spread evenly over the minute these held a whole
number, the fewest of the two they can hold (util47: ⌊x⌋ or ⌈x⌉ of x = readings × held / sampled
seconds) that has room for the busy readings; the busy seconds are the held seconds times the busy
readings' share of those, never more than the seconds held. It is idle for them when quiet: its
busy seconds under the threshold's share of the seconds held, held whole its mean under it (util47).
An attempt that ended without starting measured nothing (try61).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from scheduler.idle import MINUTE, REPORTED_S, after_s, threshold_pct


@dataclass(frozen=True)
class Reading:
    """One GPU's minute, as the oracle reads it: its mean utilization in percent, None: not read."""

    minute: datetime
    mean_pct: float | None
    readings: int = 0  # the heartbeats that read its utilization


def _readings(gpu_id: int) -> dict[datetime, Reading]:
    from scheduler.models import GpuMinuteSample

    out = {}
    for row in GpuMinuteSample.objects.filter(gpu_id=gpu_id):
        if row.samples > 0:
            out[row.minute] = Reading(row.minute, row.utilization_mean, row.utilization_samples)
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


def _busy_seconds(held: float, so_far: float, mean: float, readings: int) -> float:
    """A GPU-minute's busy seconds of the ``held`` ones, written slowly (the module's docstring)."""
    if held >= so_far:
        return held * mean  # held all the seconds sampled: the mean is the holder's
    busy_readings = mean * readings
    spread = readings * held / so_far  # the readings the held seconds hold on average
    for taken in sorted({math.floor(spread + 1e-9), math.ceil(spread - 1e-9)}):
        if busy_readings <= taken + 1e-9:  # the fewest with room for every busy reading
            return min(held, held * busy_readings / taken) if taken else 0.0
    return held  # more busy readings than they can hold: rounding only


@dataclass(frozen=True)
class EfficiencyIdleReference:
    measured: float  # GPU-seconds held in minutes of its own whose utilization was read
    idle: float  # of those, the GPU-seconds in quiet minutes
    utilized: float  # their busy GPU-seconds


def efficiency_idle_reference(now: datetime | None = None) -> dict[int, EfficiencyIdleReference]:
    """Every attempt with a GPU link, by id: its measured, idle and utilized GPU-seconds, minute by minute."""
    from scheduler.models import Attempt, AttemptGPU

    now = now or timezone.now()
    pct = threshold_pct()
    out = {}
    for attempt in Attempt.objects.order_by("pk"):
        links = list(attempt.gpu_links.all())
        if not links:
            continue
        measured = idle = utilized = 0.0
        never_started = attempt.started_at is None and attempt.ended_at is not None
        for link in links if not never_started else []:
            a0, a1 = attempt.placed_at, link.released_at or attempt.ended_at or now
            readings = _readings(link.gpu_id)
            others = [
                (other.attempt.placed_at, other.released_at or other.attempt.ended_at)
                for other in AttemptGPU.objects.filter(gpu_id=link.gpu_id).exclude(pk=link.pk)
            ]
            minute = a0.replace(second=0, microsecond=0)
            while minute < a1:
                held = (min(a1, minute + MINUTE) - max(a0, minute)).total_seconds()
                whole = held == MINUTE.total_seconds()
                shared = any(p < minute + MINUTE and (u is None or u > minute) for p, u in others)
                reading = readings.get(minute)
                if (whole or not shared) and reading is not None and reading.mean_pct is not None:
                    measured += held
                    so_far = min(MINUTE.total_seconds(), max(held, (now - minute).total_seconds()))
                    mean = min(100.0, max(0.0, reading.mean_pct)) / 100.0
                    busy = _busy_seconds(held, so_far, mean, reading.readings)
                    if busy < held * pct / 100:
                        idle += held
                    utilized += busy
                minute += MINUTE
        out[attempt.pk] = EfficiencyIdleReference(measured, idle, utilized)
    return out
