"""brk58: utilization not measured (nvml56) in the idle GPU alerts and the efficiency words.
Each failed before its fix."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import idle
from scheduler.models import GPU, GpuMinuteSample


@pytest.fixture
def _idle_rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}


def _minute(tw, ago_min: int):
    return tw.now.replace(second=0) - timedelta(minutes=ago_min)


def _fill(tw, gpu, util: float | None, from_ago: int, to_ago: int = 0) -> None:
    """Minute samples of ``gpu`` from ``from_ago`` minutes ago to ``to_ago`` (both in); ``None``:
    utilization not read (nvml56: samples, but none of them read it)."""
    read = 0 if util is None else 4
    GpuMinuteSample.objects.bulk_create(
        [
            GpuMinuteSample(
                gpu=gpu, minute=_minute(tw, m), samples=4, utilization_samples=read, utilization_sum=read * (util or 0)
            )
            for m in range(to_ago, from_ago + 1)
        ]
    )


def test_an_hour_not_measured_is_no_idle_hour(tw, ticks, _idle_rule):
    """Busy, then an hour whose utilization NVML could not read (a transient error: samples came,
    none read it), then one quiet minute: it read "idle for 1h" (the gap check counted the
    unmeasured minutes as reported ones). Unknown is not idle: the stretch starts after it."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    a = tw.attempt(tw.workload(gpus=1), [gpu], started_ago=200 * 60)
    _fill(tw, gpu, 50.0, 150, 61)  # busy until 61 minutes ago
    _fill(tw, gpu, None, 60, 1)  # an hour not measured
    _fill(tw, gpu, 0.0, 0, 0)  # a quiet minute now
    assert idle.idle_attempts(now=tw.now) == {}
    _fill(tw, gpu, 0.0, -1, -60)  # quiet for the hour after
    assert idle.idle_attempts(now=tw.now + timedelta(minutes=61))[a.pk].since == _minute(tw, 0)


def test_the_efficiency_words_of_a_gpu_sampled_but_not_read(tw, ticks):
    """A MIG-mode GPU sends samples every few seconds, its memory read, its utilization not (nvml56).
    ``fairway seff``/``show`` and the page said "100% of the GPU-time held had no samples" beside a
    peak memory read from those very samples: it had no utilization reading."""
    from fairway_cli.words import efficiency_lines
    from scheduler.efficiency import efficiency_of_attempts

    gpu = GPU.objects.get(host=tw.host("h1", 1))
    a = tw.attempt(tw.workload(gpus=1), [gpu], started_ago=30 * 60)
    _fill(tw, gpu, None, 29, 1)
    GpuMinuteSample.objects.filter(gpu=gpu).update(memory_used_max_mb=2048)
    lines = dict(efficiency_lines(efficiency_of_attempts([a.pk], now=tw.now)[a.pk].as_data()))
    assert lines["Peak GPU memory"].startswith("2.0 ")
    assert "no samples" not in lines["Not measured"]
    assert lines["Not measured"].endswith("of the GPU-time held had no utilization reading")
