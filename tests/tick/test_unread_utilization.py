"""nvml56: a GPU whose utilization NVML cannot read (``null`` in the heartbeat: a MIG-mode GPU,
an error) is stored as not read and every reader says "not measured": never 0 %, never idle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import idle, lifecycle
from scheduler.efficiency import efficiency_of_attempts
from scheduler.models import GPU, Attempt, GpuMinuteSample, Host
from scheduler.pyramid import _minute_samples, compute_hour, hour_of

UNREAD = {"utilization_pct": None, "memory_used_mb": None, "temperature_c": None, "power_w": None}
READ = {"utilization_pct": 40.0, "memory_used_mb": 2048, "temperature_c": 50.0, "power_w": 300.0}


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 600}


def _beat(host, index: int, sample: dict, at) -> None:
    lifecycle.record_heartbeat(host, [lifecycle.GpuSample(index, "healthy", (), sample)], now=at)


def test_unread_readings_are_stored_as_not_read_and_a_mixed_minute_averages_the_read_ones(tw, ticks):
    host = tw.host("h1", 1)
    gpu = GPU.objects.get(host=host)
    minute = tw.now.replace(second=0)
    _beat(host, 0, UNREAD, minute + timedelta(seconds=5))
    row = GpuMinuteSample.objects.get(gpu=gpu)
    gpu.refresh_from_db()
    assert gpu.last_sample["utilization_pct"] is None  # NULL, not 0
    assert (row.samples, row.utilization_samples, row.utilization_mean) == (1, 0, None)
    assert (row.memory_used_max_mb, row.temperature_max_c, row.power_sum_w) == (None, None, 0.0)

    _beat(host, 0, READ, minute + timedelta(seconds=25))
    _beat(host, 0, UNREAD, minute + timedelta(seconds=45))
    row.refresh_from_db()
    assert (row.samples, row.utilization_samples) == (3, 1)
    assert row.utilization_mean == 40.0  # not 40/3: the unread samples are no 0 %
    assert (row.memory_used_max_mb, row.temperature_max_c, row.power_sum_w) == (2048, 50.0, 300.0)


def test_a_gpu_that_cannot_read_its_utilization_is_not_idle_and_not_measured(tw, ticks):
    host = tw.host("h1", 2)
    mig, plain = GPU.objects.filter(host=host).order_by("index")
    start = tw.now.replace(second=0) - timedelta(minutes=30)
    unread = tw.attempt(tw.workload(gpus=1), [mig], started_ago=31 * 60)
    quiet = tw.attempt(tw.workload(gpus=1), [plain], started_ago=31 * 60)
    Attempt.objects.filter(pk__in=[unread.pk, quiet.pk]).update(placed_at=start, started_at=start)
    for m in range(30):
        at = start + timedelta(minutes=m, seconds=10)
        lifecycle.record_heartbeats(
            [
                lifecycle.HeartbeatReport(
                    host.pk,
                    at,
                    [
                        lifecycle.GpuSample(0, "healthy", (), UNREAD),
                        lifecycle.GpuSample(1, "healthy", (), {**READ, "utilization_pct": 0.0}),
                    ],
                )
            ]
        )
    assert GpuMinuteSample.objects.filter(gpu=mig, utilization_samples=0).count() == 30  # the flush path too

    # idle: a measured 0 % GPU is idle; one nobody could read is unknown, and unknown is not idle
    assert set(idle.idle_attempts(now=tw.now)) == {quiet.pk}

    # efficiency: not measured, never 0 %, never idle; its memory was not read either
    eff = efficiency_of_attempts([unread.pk, quiet.pk], now=tw.now)
    assert eff[unread.pk].as_data()["utilization"] is None
    assert eff[unread.pk].as_data()["not_measured"] == 1.0 and eff[unread.pk].as_data()["idle"] is None
    assert eff[unread.pk].memory_peak_mb is None
    assert eff[quiet.pk].as_data()["utilization"] == 0.0 and eff[quiet.pk].as_data()["not_measured"] < 0.05

    # the pyramid: only the read GPU's minutes are measured
    assert set(_minute_samples([mig.pk, plain.pk], start, tw.now)) == {plain.pk}
    Host.objects.filter(pk=host.pk).update(created_at=start - timedelta(hours=1))  # registered all along
    hours = {hour_of(start), hour_of(tw.now - timedelta(seconds=1))}
    measured = sum(compute_hour(host.cluster, h, now=tw.now)["measured"] for h in hours)
    assert measured == pytest.approx(30 * 60, abs=60)  # the read GPU's 30 minutes, none of the unread one's
