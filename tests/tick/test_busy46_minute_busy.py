"""busy46: a GPU-minute's busy seconds are 60 s × the minute's mean, bounded by the seconds the GPU
was held in it (``scheduler.pyramid.minute_busy``), for an attempt's own partly held minutes and
for the pyramid's hours alike (docs/jobs.md "Efficiency"). Before, the minute's mean was weighed by
the seconds held, so the free seconds' 0 % diluted every job's first and last minute."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from scheduler.efficiency import efficiency_of_attempts
from scheduler.models import GPU, Attempt, GpuMinuteSample, Host
from scheduler.pyramid import compute_hour, hour_of, minute_busy

_hosts = itertools.count()


def _held(tw, gpus, workload=None, *, placed, ended=None):
    attempt = tw.attempt(workload or tw.workload(gpus=len(gpus)), gpus)
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=placed, started_at=placed, ended_at=ended)
    if ended is not None:
        attempt.gpu_links.update(open=False)
    attempt.refresh_from_db()
    return attempt


def _sampled(gpu, minute, readings):
    """One minute of ``gpu`` from the agent's samples (every 15 s: four readings, in percent)."""
    GpuMinuteSample.objects.create(
        gpu=gpu,
        minute=minute,
        samples=len(readings),
        utilization_samples=len(readings),
        utilization_sum=float(sum(readings)),
    )


def test_the_rule():
    assert minute_busy(60, 0.4, 4) == pytest.approx(24)  # a minute held whole: 60 s × its mean
    assert minute_busy(15, 0.25, 4) == pytest.approx(15)  # busy the 15 s it was held, free the rest
    assert minute_busy(10, 0.5, 4) == pytest.approx(10)  # never more than the seconds held
    assert minute_busy(30, 0.1, 10) == pytest.approx(6)  # idle part of its seconds
    assert minute_busy(10, 0.5, 2, sampled=10) == pytest.approx(5)  # the minute in progress: 10 s so far


def test_a_90_s_job_busy_all_along_reads_100_percent(tw, ticks):
    """A 90 s job at 100 % from :45 to 2:15, its GPU sampled every 15 s and free around it: its first
    and last minutes each read 25 % (one busy sample of four), which weighed by the 15 s held made
    it 75 %; their busy seconds (15 s each) are all of the seconds held: 100 %."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0, microsecond=0) - timedelta(minutes=10)
    _sampled(gpu, minute, [0, 0, 0, 100])
    _sampled(gpu, minute + timedelta(minutes=1), [100, 100, 100, 100])
    _sampled(gpu, minute + timedelta(minutes=2), [100, 0, 0, 0])
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=45), ended=minute + timedelta(minutes=2, seconds=15))
    data = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert data["utilization"] == 1.0 and data["not_measured"] == 0.0
    # placed at :40 instead (to 2:10): of its first 20 s the 15 s samples read one, all its
    # first minute's busy readings; of its last 10 s one: 90 of 90 s (util47: 85 s, 94 %, when the
    # 20 s were taken for 1⅓ readings; busy46 before: 67.5 s, 75 %)
    GpuMinuteSample.objects.filter(gpu=gpu).delete()
    _sampled(gpu, minute, [0, 0, 0, 100])
    _sampled(gpu, minute + timedelta(minutes=1), [100, 100, 100, 100])
    _sampled(gpu, minute + timedelta(minutes=2), [100, 0, 0, 0])
    Attempt.objects.filter(pk=a.pk).update(
        placed_at=minute + timedelta(seconds=40), ended_at=minute + timedelta(minutes=2, seconds=10)
    )
    e = efficiency_of_attempts([a.pk])[a.pk]
    assert (e.measured, e.utilized) == (90, pytest.approx(90))


def test_a_running_jobs_minute_in_progress_reads_its_samples_so_far(tw, ticks):
    """10 s into the current minute at 50 %: 5 busy seconds of the 10 held, not 60 s × 50 %."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0, microsecond=0) - timedelta(minutes=5)
    now = minute + timedelta(minutes=2, seconds=10)
    _sampled(gpu, minute + timedelta(minutes=1), [50, 50, 50, 50])
    _sampled(gpu, minute + timedelta(minutes=2), [50])
    a = _held(tw, [gpu], placed=minute + timedelta(minutes=1))
    e = efficiency_of_attempts([a.pk], now)[a.pk]
    assert (e.measured, e.utilized) == (70, pytest.approx(35))


def test_the_pyramids_hour_reads_a_jobs_edges_by_their_busy_share(tw, ticks):
    """One GPU, free but for two jobs busy while they ran, sampled every 15 s: one from :10:30 to
    :20:30, the next from :20:40 to :30:00. Minute :10 reads 50 % (30 s busy of the 30 held);
    minute :20 reads 75 %: its three busy readings are as many as the 50 s both jobs held could
    take (⌊4 × 50 / 60⌋), so all 50 s busy, counted once. The hour's utilized time is the GPU's
    busy time, all of the 1,160 s held (util47: 1,155 s, minute :20 read 60 s × 75 %; busy46
    before: 1,132.5 s)."""
    hour = hour_of(tw.now) - timedelta(hours=2)
    host = tw.host("h1", 1)
    Host.objects.filter(pk=host.pk).update(created_at=hour - timedelta(days=1), last_heartbeat=tw.now)
    gpu = GPU.objects.get(host=host)
    _held(tw, [gpu], placed=hour + timedelta(minutes=10, seconds=30), ended=hour + timedelta(minutes=20, seconds=30))
    _held(tw, [gpu], placed=hour + timedelta(minutes=20, seconds=40), ended=hour + timedelta(minutes=30))
    for m in range(60):
        readings = [100 if 10 * 60 + 30 <= m * 60 + s < 30 * 60 else 0 for s in (0, 15, 30, 45)]
        if m * 60 + 30 == 20 * 60 + 30:
            readings[2] = 0  # the 10 s between the two jobs
        _sampled(gpu, hour + timedelta(minutes=m), readings)
    t = compute_hour(tw.cluster, hour, tw.now)
    held = 600 + 560
    assert t["allocated"] + t["unallocated"] == held
    assert t["measured"] == held
    # :10 → 30 s; :11–:19 and :21–:29 → 60 s each; :20 → the 30 + 20 s held
    assert t["utilized"] == pytest.approx(30 + 18 * 60 + 50)
    assert t["utilized"] <= t["measured"] <= t["allocated"] + t["unallocated"]


class _Undone(Exception):
    pass


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cuts=st.lists(st.integers(0, 3600), min_size=2, max_size=8, unique=True),
    means=st.dictionaries(st.integers(0, 59), st.tuples(st.floats(-5, 110), st.integers(1, 4)), max_size=60),
)
def test_the_pyramids_hour_is_each_minutes_busy_time(tw, cuts, means):
    """One GPU held by attempts one after another (back to back in one minute, or not), its minutes
    sampled or not: the hour's measured time is the seconds held of the sampled minutes, and its
    utilized time, minute by minute, the busy seconds of the seconds held of it by all of them
    together (``minute_busy``: 60 s × the minute's mean when held whole, util47 in part)."""
    try:
        with transaction.atomic():
            hour = hour_of(tw.now) - timedelta(hours=3)
            host = tw.host(f"b{next(_hosts)}", 1)
            Host.objects.filter(pk=host.pk).update(created_at=hour - timedelta(days=1), last_heartbeat=tw.now)
            gpu = GPU.objects.get(host=host)
            points = sorted(cuts)
            pairs = zip(points[::2], points[1::2], strict=False)  # one after another, none overlapping
            spans = [(hour + timedelta(seconds=a), hour + timedelta(seconds=b)) for a, b in pairs]
            for a0, a1 in spans:
                _held(tw, [gpu], placed=a0, ended=a1)
            for m, (mean, n) in means.items():
                GpuMinuteSample.objects.create(
                    gpu=gpu,
                    minute=hour + timedelta(minutes=m),
                    samples=n,
                    utilization_samples=n,
                    utilization_sum=n * mean,
                )
            measured = utilized = 0.0
            for m, (mean, n) in means.items():
                start, end = hour + timedelta(minutes=m), hour + timedelta(minutes=m + 1)
                held = sum(max(0.0, (min(a1, end) - max(a0, start)).total_seconds()) for a0, a1 in spans)
                measured += held
                utilized += minute_busy(held, min(100.0, max(0.0, mean)) / 100, n)
            t = compute_hour(tw.cluster, hour, tw.now)
            assert t["measured"] == pytest.approx(measured)
            assert t["utilized"] == pytest.approx(utilized, abs=1e-6)
            assert t["utilized"] <= t["measured"] + 1e-6 <= t["allocated"] + t["unallocated"] + 2e-6
            raise _Undone
    except _Undone:
        pass
