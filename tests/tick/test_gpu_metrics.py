"""GPU metrics time series: per-minute roll-ups from heartbeats, bounded queries, pruning.

An attempt's utilization: tests/tick/test_efficiency.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler import clock, lifecycle, metrics, tasks
from scheduler.models import GPU, GpuMinuteSample


def _samples(n: int, util: float, health: str = "healthy", power: float = 300.0, temp: float = 60.0):
    return [
        lifecycle.GpuSample(
            i,
            health,
            (),
            {"utilization_pct": util, "memory_used_mb": 1000 * (i + 1), "temperature_c": temp, "power_w": power},
        )
        for i in range(n)
    ]


def test_heartbeats_accumulate_into_one_row_per_gpu_and_minute(tw, ticks):
    host = tw.host("h1", 2)
    minute = tw.now.replace(second=0)
    lifecycle.record_heartbeat(host, _samples(2, 40.0, temp=60.0, power=200.0), now=minute + timedelta(seconds=5))
    lifecycle.record_heartbeat(
        host, _samples(2, 80.0, "degraded", temp=70.0, power=400.0), now=minute + timedelta(seconds=35)
    )
    lifecycle.record_heartbeat(host, _samples(2, 10.0, temp=50.0), now=minute + timedelta(seconds=65))

    rows = list(GpuMinuteSample.objects.filter(gpu__index=0).order_by("minute"))
    assert [r.minute for r in rows] == [minute, minute + timedelta(minutes=1)]
    first = rows[0]
    assert first.samples == 2 and first.utilization_mean == pytest.approx(60.0)
    assert first.temperature_max_c == 70.0 and first.power_mean_w == pytest.approx(300.0)
    assert first.memory_used_max_mb == 1000 and first.health_worst == "degraded"
    assert rows[1].samples == 1 and rows[1].health_worst == "healthy"
    assert GpuMinuteSample.objects.count() == 4


def _heartbeat_queries(tw, name: str, gpus: int) -> int:
    host = tw.host(name, gpus)
    lifecycle.record_heartbeat(host, _samples(gpus, 1.0), now=tw.now)  # first: inserts
    with CaptureQueriesContext(connection) as first:
        lifecycle.record_heartbeat(host, _samples(gpus, 2.0), now=tw.now + timedelta(seconds=1))  # updates
    with CaptureQueriesContext(connection) as next_minute:
        lifecycle.record_heartbeat(host, _samples(gpus, 2.0), now=tw.now + timedelta(minutes=1))  # inserts
    return max(len(first), len(next_minute))


def test_heartbeat_query_count_does_not_grow_with_the_gpus(tw, ticks):
    assert _heartbeat_queries(tw, "small", 2) == _heartbeat_queries(tw, "big", 8)
    assert GpuMinuteSample.objects.filter(gpu__host__name="big").count() == 16


def test_pruning_keeps_the_retention(tw, ticks, settings):
    host = tw.host("h1", 1)
    gpu = GPU.objects.get(host=host)
    for days in (40, 31, 29, 1):
        GpuMinuteSample.objects.create(gpu=gpu, minute=(tw.now - timedelta(days=days)).replace(second=0), samples=1)
    assert metrics.prune(now=tw.now) == 2
    assert GpuMinuteSample.objects.count() == 2
    settings.FAIRWAY = {**settings.FAIRWAY, "GPU_METRICS_RETENTION_DAYS": 7}
    tasks.prune_gpu_metrics.fn()
    assert GpuMinuteSample.objects.count() == 1


def test_retention_from_the_environment(settings, monkeypatch):
    settings.FAIRWAY = {k: v for k, v in settings.FAIRWAY.items() if k != "GPU_METRICS_RETENTION_DAYS"}
    monkeypatch.delenv("FAIRWAY_GPU_METRICS_RETENTION_DAYS", raising=False)
    assert metrics.retention_days() == 30
    monkeypatch.setenv("FAIRWAY_GPU_METRICS_RETENTION_DAYS", "3")
    assert metrics.retention_days() == 3


def test_the_clock_sends_the_prune_hourly(db, monkeypatch):
    sent: list[str] = []
    monkeypatch.setattr(tasks.prune_gpu_metrics, "send", lambda: sent.append("prune"))
    monkeypatch.setattr(tasks.sweep_hosts, "send", lambda: None)
    monkeypatch.setattr(tasks.start_timeouts, "send", lambda: None)
    c = clock.Clock(interval=1.0)
    c.beat(sweep=True)
    c.beat(sweep=True)
    assert sent == ["prune"]
