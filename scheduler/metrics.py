"""GPU metrics time series: per-minute roll-ups of heartbeat samples, retention (an attempt's
utilization: ``scheduler.efficiency``).

Design: one row per (GPU, minute) in :class:`~scheduler.models.GpuMinuteSample`, accumulated
from every heartbeat (count, utilization sum, max memory, max temperature, power sum, worst
health). :func:`record_samples` runs inside ``record_heartbeat``'s transaction, which holds the
host row locked (``select_for_update``), so heartbeats of one host are serialized and a plain
read-merge-write is correct on PostgreSQL and SQLite alike: one SELECT of this minute's rows of
the host's GPUs, one bulk INSERT of the new ones, one bulk UPDATE of the existing ones —
at most three queries whatever the GPU count. Raw heartbeats are not kept.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from scheduler.models import GPU, GpuMinuteSample

DEFAULT_RETENTION_DAYS = 30
_HEALTH_RANK = {GPU.Health.HEALTHY: 0, GPU.Health.DEGRADED: 1, GPU.Health.UNHEALTHY: 2}


def retention_days() -> int:
    """Days of GPU minute samples kept: ``FAIRWAY["GPU_METRICS_RETENTION_DAYS"]``, else the env (default 30)."""
    value = settings.FAIRWAY.get("GPU_METRICS_RETENTION_DAYS")
    if value is None:
        value = os.environ.get("FAIRWAY_GPU_METRICS_RETENTION_DAYS", DEFAULT_RETENTION_DAYS)
    days = int(value)
    if days < 1:
        raise ValueError("FAIRWAY_GPU_METRICS_RETENTION_DAYS must be at least 1")
    return days


def minute_of(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _worse(a: str, b: str) -> str:
    return a if _HEALTH_RANK.get(a, 2) >= _HEALTH_RANK.get(b, 2) else b


def record_samples(samples: Iterable[tuple[int, str, Mapping[str, Any]]], now: datetime) -> int:
    """Accumulate ``(gpu_id, health, sample)`` into the minute of ``now``; returns the rows touched.

    Call inside a transaction holding the host's row lock (``record_heartbeat`` does).
    """
    minute = minute_of(now)
    incoming: dict[int, tuple[str, Mapping[str, Any]]] = {}
    for gpu_id, health, sample in samples:
        if sample:
            incoming[gpu_id] = (health, sample)
    if not incoming:
        return 0
    existing = {row.gpu_id: row for row in GpuMinuteSample.objects.filter(gpu_id__in=list(incoming), minute=minute)}
    new: list[GpuMinuteSample] = []
    changed: list[GpuMinuteSample] = []
    for gpu_id, (health, s) in incoming.items():
        row = existing.get(gpu_id)
        if row is None:
            row = GpuMinuteSample(gpu_id=gpu_id, minute=minute, health_worst=health)
            new.append(row)
        else:
            row.health_worst = _worse(row.health_worst, health)
            changed.append(row)
        row.samples += 1
        # A reading the GPU could not give (None) is not measured: it adds nothing, never 0 (nvml56).
        if (util := s.get("utilization_pct")) is not None:
            row.utilization_sum += float(util)
            row.utilization_samples += 1
        if (mem := s.get("memory_used_mb")) is not None:
            row.memory_used_max_mb = int(mem) if row.memory_used_max_mb is None else max(row.memory_used_max_mb, mem)
        temp = s.get("temperature_c")
        if temp is not None:
            row.temperature_max_c = float(temp) if row.temperature_max_c is None else max(row.temperature_max_c, temp)
        if (power := s.get("power_w")) is not None:
            row.power_sum_w += float(power)
    if new:
        GpuMinuteSample.objects.bulk_create(new)
    if changed:
        GpuMinuteSample.objects.bulk_update(
            changed,
            [
                "samples",
                "utilization_sum",
                "utilization_samples",
                "memory_used_max_mb",
                "temperature_max_c",
                "power_sum_w",
                "health_worst",
            ],
        )
    return len(new) + len(changed)


def prune(now: datetime | None = None, days: int | None = None) -> int:
    """Delete minute samples older than the retention; returns the number deleted. First every
    ended attempt placed before the cutoff keeps its efficiency as it reads now
    (``scheduler.efficiency.keep_efficiency``): its figure is the same after (util47)."""
    from scheduler.efficiency import keep_efficiency

    now = now or timezone.now()
    cutoff = now - timedelta(days=days if days is not None else retention_days())
    keep_efficiency(cutoff, now)
    deleted, _ = GpuMinuteSample.objects.filter(minute__lt=cutoff).delete()
    return deleted
