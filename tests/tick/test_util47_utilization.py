"""util47: three weaknesses of the utilization numbers (docs/jobs.md "Efficiency").

1. A GPU busy all the seconds it was held in a partly held minute read under 100 %: the held
   seconds were weighed as holding their fractional share of the minute's samples (20 s of a
   minute sampled every 15 s as 1⅓ samples), though they hold a whole number of them.
2. The efficiency's idle share judged a partly held minute by the minute's mean (its free seconds'
   0 % included), while its utilization read the same minute's busy seconds: one rule now.
3. A finished attempt's efficiency changed when the retention job pruned its minute samples.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import metrics
from scheduler.efficiency import efficiency_of_attempts, workload_efficiency
from scheduler.idle import quiet_held
from scheduler.models import GPU, Attempt, GpuMinuteSample, Host
from scheduler.pyramid import compute_hour, hour_of, minute_busy
from tests.tick.test_busy46_minute_busy import _held, _sampled  # one setup of a held, sampled GPU


def _grid(placed_s: float, ended_s: float, every: float, minute: int, missing: tuple[float, ...] = ()):
    """The readings of minute ``minute`` of a GPU sampled every ``every`` s (from :00), busy 100 %
    from ``placed_s`` to ``ended_s`` (seconds from the first minute) and free around it."""
    out, s = [], 0.0
    while s < 60:
        at = minute * 60 + s
        if s not in missing:
            out.append(100 if placed_s <= at < ended_s else 0)
        s += every
    return out


def test_the_rule_reads_a_fully_busy_gpu_100_percent_however_the_grid_fell():
    # 20 s held of a minute sampled every 15 s: 1 or 2 of its 4 samples fell in them
    assert minute_busy(20, 0.25, 4) == pytest.approx(20)  # one busy sample: it was busy all along
    assert minute_busy(20, 0.5, 4) == pytest.approx(20)  # two
    assert minute_busy(20, 0.3, 4) == pytest.approx(0.6 * 20)  # 1.2 busy: two samples held, 60 %
    # 30 s held of a minute sampled every 5 s, a sample missing: 5 or 6 of the 11 are its own
    assert minute_busy(30, 5 / 11, 11) == pytest.approx(30)
    assert minute_busy(30, 6 / 11, 11) == pytest.approx(30)
    assert minute_busy(60, 0.4, 12) == pytest.approx(24)  # a minute held whole: 60 s × its mean
    assert minute_busy(12, 0.5, 4, sampled=32) == pytest.approx(12)  # in progress: 2 of 4 so far
    assert minute_busy(3, 0.0, 12) == 0.0  # no busy reading: none


@given(
    readings=st.integers(1, 20),
    phase=st.floats(0, 0.999),
    start=st.floats(0, 59),
    length=st.floats(0.5, 60),
    util=st.floats(0.01, 1.0),
)
def test_the_rule_on_every_sampling_grid(readings, phase, start, length, util):
    """Evenly spaced readings at any phase, a hold at any place in the minute, the GPU at ``util``
    while held and free around it: busy all along reads every second held; never more than held."""
    every = 60 / readings
    end = min(60.0, start + length)
    held = end - start
    taken = sum(1 for i in range(readings) if start <= (phase + i) * every < end)
    busy = minute_busy(held, util * taken / readings, readings)
    assert 0 <= busy <= held + 1e-9
    if util == 1.0 or taken == 0:
        assert busy == pytest.approx(held if taken else 0.0)
    full = minute_busy(held, taken / readings, readings)
    assert full == pytest.approx(held if taken else 0.0)


@pytest.mark.parametrize(
    ("placed_s", "held_s", "every", "missing"),
    [
        (40, 90, 15, ()),  # docs/jobs.md's 94 %: the 15 s samples saw 15 of its first 20 s
        (30, 90, 5, (45.0,)),  # every 5 s, one of its busy samples missing
        (32, 150, 5, ()),  # placed and ended off the 5 s grid
        (7, 61, 10, (50.0,)),
    ],
)
def test_a_job_busy_all_along_reads_100_percent_on_every_surface(tw, ticks, placed_s, held_s, every, missing):
    """Its efficiency and the pyramid's hour alike."""
    hour = hour_of(tw.now) - timedelta(hours=2)
    host = tw.host("h1", 1)
    Host.objects.filter(pk=host.pk).update(created_at=hour - timedelta(days=1), last_heartbeat=tw.now)
    gpu = GPU.objects.get(host=host)
    ended_s = placed_s + held_s
    for m in range(int(ended_s // 60) + 1):
        _sampled(gpu, hour + timedelta(minutes=m), _grid(placed_s, ended_s, every, m, missing))
    a = _held(tw, [gpu], placed=hour + timedelta(seconds=placed_s), ended=hour + timedelta(seconds=ended_s))
    e = efficiency_of_attempts([a.pk])[a.pk]
    assert (e.held, e.measured) == (held_s, held_s)
    assert e.utilized == pytest.approx(held_s)
    assert e.as_data()["utilization"] == 1.0
    t = compute_hour(tw.cluster, hour, tw.now)
    assert (t["measured"], t["utilized"]) == (held_s, pytest.approx(held_s))


def test_the_idle_share_judges_a_partly_held_minute_by_its_busy_seconds(tw, ticks, settings):
    """20 s held of a minute sampled every 15 s, busy all along: the minute's mean is 25 %, under a
    30 % threshold, and it read idle while its utilization read 100 %."""
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 30.0}
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0, microsecond=0) - timedelta(minutes=10)
    _sampled(gpu, minute, [0, 0, 0, 100])
    _sampled(gpu, minute + timedelta(minutes=1), [20, 20, 20, 20])  # held whole, under 30 %: idle
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=40), ended=minute + timedelta(minutes=2))
    e = efficiency_of_attempts([a.pk])[a.pk]
    assert e.utilized == pytest.approx(20 + 12)
    assert e.idle == 60  # the whole minute at 20 %, not the first one busy all its 20 s
    # the one rule: a held minute is idle when its busy share of the seconds held is under the threshold
    assert quiet_held(20, minute_busy(20, 0.25, 4), 30.0) is False
    assert quiet_held(60, minute_busy(60, 0.2, 4), 30.0) is True
    assert quiet_held(60, minute_busy(60, 0.3, 4), 30.0) is False  # exactly the threshold is busy


def test_a_finished_attempts_efficiency_is_the_same_after_its_samples_are_pruned(tw, ticks):
    host = tw.host("h1", 2)
    g0, g1 = GPU.objects.filter(host=host).order_by("index")
    GPU.objects.filter(host=host).update(memory_mb=80_000)
    minute = tw.now.replace(second=0, microsecond=0) - timedelta(days=40)
    w = tw.workload(gpus=2)
    old = _held(tw, [g0, g1], w, placed=minute + timedelta(seconds=30), ended=minute + timedelta(minutes=20))
    for m in range(21):
        for g, util in ((g0, 70.0), (g1, 0.5)):
            GpuMinuteSample.objects.create(
                gpu=g,
                minute=minute + timedelta(minutes=m),
                samples=4,
                utilization_samples=4,
                utilization_sum=4 * util,
                memory_used_max_mb=40_000,
            )
    gone = _held(tw, [g1], w, placed=minute - timedelta(days=9), ended=minute - timedelta(days=8))  # none left
    recent = tw.now.replace(second=0, microsecond=0) - timedelta(days=1)
    new = _held(tw, [g0], w, placed=recent, ended=recent + timedelta(minutes=5))
    for m in range(5):
        _sampled(g0, recent + timedelta(minutes=m), [50, 50])
    before = {pk: e.as_data() for pk, e in efficiency_of_attempts([old.pk, new.pk]).items()}
    total = workload_efficiency(w).total.as_data()
    assert before[old.pk]["utilization"] is not None and before[old.pk]["memory_peak_mb"] == 40_000
    assert metrics.prune(tw.now, days=30) == 42
    assert GpuMinuteSample.objects.filter(minute__lt=recent).count() == 0
    after = {pk: e.as_data() for pk, e in efficiency_of_attempts([old.pk, new.pk]).items()}
    assert after == before
    w.__dict__.pop("_efficiency", None)
    assert workload_efficiency(w).total.as_data() == total
    # kept once: its figure no longer reads the samples (a second prune keeps it again as it is)
    kept = Attempt.objects.get(pk=old.pk).efficiency_kept
    assert kept is not None and kept["held"] == 2 * (20 * 60 - 30)
    assert Attempt.objects.get(pk=new.pk).efficiency_kept is None  # none of its minutes pruned yet
    assert Attempt.objects.get(pk=gone.pk).efficiency_kept is None  # ended before the oldest sample: not weighed
    metrics.prune(tw.now, days=30)
    assert efficiency_of_attempts([old.pk])[old.pk].as_data() == before[old.pk]


def test_a_running_attempts_efficiency_is_not_kept(tw, ticks):
    """Its figure grows: only an ended attempt's is kept (one placed before the cutoff, still
    running, loses its pruned minutes: docs/jobs.md)."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0, microsecond=0) - timedelta(days=40)
    a = _held(tw, [gpu], placed=minute)
    _sampled(gpu, minute, [50])
    metrics.prune(tw.now, days=30)
    assert Attempt.objects.get(pk=a.pk).efficiency_kept is None
