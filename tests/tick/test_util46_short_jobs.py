"""util46: an attempt's utilization (scheduler.efficiency, docs/jobs.md "Efficiency") for short
jobs, gangs whose parts were released early, and after the attempt ended."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.efficiency import efficiency_of_attempts
from scheduler.models import GPU, AttemptGPU
from tests.tick.test_efficiency import _held
from tests.tick.test_efficiency import _sample as sample_minute


def _sample(gpu, minute, util, samples=6, memory=0):
    sample_minute(gpu, minute, util, samples, memory)


def test_a_short_job_alone_on_its_gpu_is_measured_by_the_seconds_held(tw, ticks):
    """A 90 s job from :40 to 2:10, no other attempt on its GPU in those minutes: each minute
    counts for the seconds it held it (20 s, 60 s, 10 s), with its busy seconds, 60 s × the
    minute's mean bounded by them (busy46); before util46 only the whole one counted, and a 50 s
    job (:40 to 1:30) read "not measured" although the agent sampled the GPU."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    GPU.objects.filter(pk=gpu.pk).update(memory_mb=80_000)
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    _sample(gpu, minute, 30.0, memory=5_000)
    _sample(gpu, minute + timedelta(minutes=1), 90.0, memory=7_000)
    _sample(gpu, minute + timedelta(minutes=2), 60.0)
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=40), ended=minute + timedelta(minutes=2, seconds=10))
    e = efficiency_of_attempts([a.pk])[a.pk]
    assert (e.held, e.measured) == (90, 90)
    assert e.utilized == pytest.approx(min(20, 60 * 0.3) + 60 * 0.9 + min(10, 60 * 0.6))
    assert e.memory_peak_mb == 7_000
    short = _held(tw, [gpu], placed=minute + timedelta(seconds=40), ended=minute + timedelta(minutes=1, seconds=30))
    AttemptGPU.objects.filter(attempt=a).delete()  # one at a time on the GPU
    data = efficiency_of_attempts([short.pk])[short.pk].as_data()
    assert data["utilization"] == pytest.approx(round((min(20, 60 * 0.3) + min(30, 60 * 0.9)) / 50, 4))
    assert data["utilization_why"] is None and data["not_measured"] == 0.0


def test_a_minute_shared_with_another_attempt_on_the_gpu_is_not_measured(tw, ticks):
    """Back to back on one GPU: the minute both held is both jobs' samples (bucketed per GPU and
    minute), so neither counts it (util63: the next job's 100 % entered the first one's figure)."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    first = _held(tw, [gpu], placed=minute + timedelta(seconds=30), ended=minute + timedelta(minutes=1, seconds=20))
    second = _held(tw, [gpu], placed=minute + timedelta(minutes=1, seconds=25), ended=minute + timedelta(minutes=3))
    _sample(gpu, minute, 40.0)
    _sample(gpu, minute + timedelta(minutes=1), 70.0)  # both jobs' samples
    _sample(gpu, minute + timedelta(minutes=2), 100.0)
    found = efficiency_of_attempts([first.pk, second.pk])
    # its own first minute: 30 s held, 60 s × 40 % = 24 busy seconds (busy46)
    assert (found[first.pk].measured, found[first.pk].utilized) == (30, pytest.approx(24))
    assert (found[second.pk].measured, found[second.pk].utilized) == (60, pytest.approx(60))
    # a job whose every minute was shared has no minute of its own
    middle = _held(
        tw, [gpu], placed=minute + timedelta(minutes=1, seconds=21), ended=minute + timedelta(minutes=1, seconds=24)
    )
    data = efficiency_of_attempts([middle.pk])[middle.pk].as_data()
    assert data["utilization"] is None and data["utilization_why"] == "no_own_minute"


def test_a_released_gang_part_is_held_to_its_release(tw, ticks):
    """A gang's part released early (``AttemptGPU.released_at``) is neither held nor measured after
    its release: its GPU idled at 0 % (or ran the next job) and read as the gang's own minutes."""
    g1 = GPU.objects.get(host=tw.host("h1", 1))
    g2 = GPU.objects.get(host=tw.host("h2", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=20)
    gang = _held(tw, [g1, g2], placed=minute, ended=minute + timedelta(minutes=10))
    AttemptGPU.objects.filter(attempt=gang, gpu=g2).update(released_at=minute + timedelta(minutes=4))
    for m in range(10):
        _sample(g1, minute + timedelta(minutes=m), 80.0)
        _sample(g2, minute + timedelta(minutes=m), 80.0 if m < 4 else 0.0)
    e = efficiency_of_attempts([gang.pk])[gang.pk]
    assert e.held == 600 + 240
    assert e.measured == 600 + 240
    assert e.as_data()["utilization"] == 0.8
    assert e.as_data()["idle"] == 0.0
