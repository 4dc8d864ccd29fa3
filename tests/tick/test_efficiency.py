"""Job efficiency (scheduler.efficiency, docs/jobs.md "Efficiency"): the rule, and its agreement
with the pyramid's utilization on the same samples."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from scheduler.efficiency import efficiency_of_attempts, workload_efficiency
from scheduler.models import GPU, Attempt, GpuMinuteSample, Host
from scheduler.pyramid import Pyramid, compute_hour, hour_of, minute_busy, minute_utilization

_hosts = itertools.count()


def _held(tw, gpus, workload=None, *, placed, ended=None, **fields):
    attempt = tw.attempt(workload or tw.workload(gpus=len(gpus)), gpus, **fields)
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=placed, started_at=placed, ended_at=ended)
    if ended is not None:
        attempt.gpu_links.update(open=False)
    attempt.refresh_from_db()
    return attempt


def _sample(gpu, minute, util, samples=2, memory=0):
    GpuMinuteSample.objects.create(
        gpu=gpu,
        minute=minute,
        samples=samples,
        utilization_samples=samples,
        utilization_sum=samples * util,
        memory_used_max_mb=memory,
    )


def test_no_samples_is_not_measured_never_zero(tw, ticks):
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    start = tw.now.replace(second=0) - timedelta(hours=2)
    a = _held(tw, [gpu], placed=start, ended=start + timedelta(hours=1))
    data = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert data["gpu_hours"] == 1.0
    assert data["utilization"] is None and data["idle"] is None and data["memory_peak_mb"] is None
    assert data["not_measured"] == 1.0 and data["running"] is False


def test_the_minutes_held_are_measured_by_the_seconds_held(tw, ticks):
    host = tw.host("h1", 2)
    g0, g1 = GPU.objects.filter(host=host).order_by("index")
    GPU.objects.filter(host=host).update(memory_mb=80_000)
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    # held from the middle of the first minute to 2 min 30 s: 150 s per GPU
    a = _held(tw, [g0, g1], placed=minute + timedelta(seconds=30), ended=minute + timedelta(minutes=3, seconds=0))
    _sample(g0, minute, 100.0, memory=10_000)  # the minute it was placed in: 30 s of it (util46)
    _sample(g1, minute, 0.0)  # 30 s at 0 %: idle
    _sample(g0, minute + timedelta(minutes=1), 40.0, memory=60_000)  # 60 s at 40 %
    # g1's second minute has no sample: not measured
    _sample(g0, minute + timedelta(minutes=2), 20.0)  # 60 s
    _sample(g1, minute + timedelta(minutes=2), 0.5)  # 60 s, idle (< 1 %)
    _sample(g0, minute + timedelta(minutes=3), 99.0, memory=79_000)  # after the end: ignored
    _sample(g0, minute - timedelta(minutes=1), 99.0, memory=79_000)  # before: ignored
    e = efficiency_of_attempts([a.pk])[a.pk]
    assert e.held == 2 * 150
    assert e.measured == 30 + 60 + 60 + 30 + 60
    assert e.utilized == pytest.approx(30 * 1.0 + 60 * 0.4 + 60 * 0.2 + 60 * 0.005)
    data = e.as_data()
    assert data["utilization"] == pytest.approx(round((30 + 24 + 12 + 0.3) / 240, 4))
    assert data["not_measured"] == pytest.approx(60 / 300)
    assert data["idle"] == pytest.approx(round(90 / 240, 4))  # 30 s and 60 s of g1 under 1 %
    assert (data["memory_peak_mb"], data["memory_total_mb"]) == (60_000, 80_000)
    assert data["gpus"] == 2 and data["idle_threshold_pct"] == 1.0


def test_the_peak_memory_is_of_the_minutes_it_held_alone(tw, ticks):
    """left59: samples are per GPU per minute, not per attempt: a short job placed right after a
    79 GB one read "79 of 80 GB", the previous job's memory in the minute they shared. The peak is
    of the minutes no other attempt held the GPU in; with none, not measured (docs/jobs.md)."""
    from fairway_cli.words import NOT_MEASURED, efficiency_lines

    host = tw.host("h1", 1)
    gpu = GPU.objects.get(host=host)
    GPU.objects.filter(host=host).update(memory_mb=80_000)
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    _sample(gpu, minute, 90.0, memory=79_000)  # the 79 GB job ended at minute + 20 s
    _sample(gpu, minute + timedelta(minutes=1), 30.0, memory=2_000)
    _sample(gpu, minute + timedelta(minutes=2), 30.0, memory=3_000)
    _held(tw, [gpu], placed=minute - timedelta(minutes=30), ended=minute + timedelta(seconds=20))
    short = _held(tw, [gpu], placed=minute + timedelta(seconds=25), ended=minute + timedelta(seconds=50))
    data = efficiency_of_attempts([short.pk])[short.pk].as_data()
    assert data["memory_peak_mb"] is None  # its one minute was the 79 GB job's too
    assert dict(efficiency_lines(data))["Peak GPU memory"] == NOT_MEASURED
    short.gpu_links.all().delete()  # one attempt at a time on the GPU
    longer = _held(tw, [gpu], placed=minute + timedelta(seconds=25), ended=minute + timedelta(minutes=1, seconds=50))
    assert efficiency_of_attempts([longer.pk])[longer.pk].memory_peak_mb == 2_000  # not the shared minute's


def test_an_attempt_inside_one_minute(tw, ticks):
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=5)
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=10), ended=minute + timedelta(seconds=40))
    _sample(gpu, minute, 50.0)
    e = efficiency_of_attempts([a.pk])[a.pk]
    # no other attempt held the GPU in that minute: its samples are its own (util46), and its busy
    # seconds are 60 s × 50 %, all of the 30 s held (busy46: the free 30 s read 0 %, not its figure)
    assert (e.held, e.measured, e.utilized) == (30, 30, pytest.approx(30))
    assert e.as_data()["utilization_why"] is None


def test_the_idle_threshold_setting_decides_an_idle_minute(tw, ticks, settings):
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=5)
    a = _held(tw, [gpu], placed=minute, ended=minute + timedelta(minutes=2))
    _sample(gpu, minute, 3.0)
    _sample(gpu, minute + timedelta(minutes=1), 30.0)
    assert efficiency_of_attempts([a.pk])[a.pk].as_data()["idle"] == 0.0
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 5.0}
    data = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert data["idle"] == 0.5 and data["idle_threshold_pct"] == 5.0


def test_a_workload_adds_its_attempts_up_and_a_running_one_counts_to_now(tw, ticks):
    g0, g1 = GPU.objects.filter(host=tw.host("h1", 2)).order_by("index")
    GPU.objects.filter(pk=g0.pk).update(memory_mb=40_000)
    GPU.objects.filter(pk=g1.pk).update(memory_mb=80_000)
    w = tw.workload(gpus=1)
    start = tw.now.replace(second=0) - timedelta(hours=1)
    first = _held(tw, [g0], w, placed=start, ended=start + timedelta(minutes=10))
    second = _held(tw, [g1], w, placed=start + timedelta(minutes=20))
    for m in range(10):
        _sample(g0, start + timedelta(minutes=m), 80.0, memory=30_000)
    for m in range(20, 30):
        _sample(g1, start + timedelta(minutes=m), 20.0, memory=50_000)
    with CaptureQueriesContext(connection) as queries:
        found = workload_efficiency(w, now=start + timedelta(hours=1))
    assert len(queries) == 1
    assert set(found.attempts) == {first.pk, second.pk}
    assert found.attempts[second.pk].running and not found.attempts[first.pk].running
    total = found.total.as_data()
    assert total["gpu_hours"] == pytest.approx(round((600 + 40 * 60) / 3600, 4))
    assert total["utilization"] == pytest.approx(0.5)  # 600 s at 80 %, 600 s at 20 %
    assert total["not_measured"] == pytest.approx(round(1 - 1200 / 3000, 4))
    assert (total["memory_peak_mb"], total["memory_total_mb"]) == (50_000, 80_000)
    assert total["running"] is True
    with CaptureQueriesContext(connection) as again:
        workload_efficiency(w)
    assert len(again) == 0  # kept on the object


def test_an_unallocated_attempt_counts_as_any_other(tw, ticks):
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    start = tw.now.replace(second=0) - timedelta(hours=1)
    a = _held(tw, [gpu], tw.workload(min_runtime=0), placed=start, ended=start + timedelta(minutes=2))
    assert a.allocated is False
    _sample(gpu, start, 60.0)
    _sample(gpu, start + timedelta(minutes=1), 20.0)
    assert efficiency_of_attempts([a.pk])[a.pk].as_data()["utilization"] == pytest.approx(0.4)


def test_an_attempt_without_gpus_is_absent(tw, ticks):
    assert efficiency_of_attempts([]) == {}
    assert efficiency_of_attempts([987654]) == {}


def test_agrees_with_the_pyramids_utilization_on_the_same_samples(tw, ticks):
    """One hour, three GPUs, attempts placed and ended mid-minute, allocated and not, partly
    sampled: the efficiency of all of them is the pyramid's occupied time and mean utilization."""
    hour = hour_of(tw.now) - timedelta(hours=2)
    host = tw.host("h1", 3)
    Host.objects.filter(pk=host.pk).update(created_at=hour - timedelta(days=1), last_heartbeat=tw.now)
    g = list(GPU.objects.filter(host=host).order_by("index"))
    attempts = [
        _held(tw, [g[0], g[1]], placed=hour + timedelta(minutes=3, seconds=17), ended=hour + timedelta(minutes=41)),
        _held(
            tw,
            [g[2]],
            tw.workload(min_runtime=0),
            placed=hour + timedelta(minutes=5, seconds=45),
            ended=hour + timedelta(minutes=50, seconds=5),
        ),
        _held(tw, [g[0]], placed=hour + timedelta(minutes=41), ended=hour + timedelta(minutes=59, seconds=59)),
        # in the minute the one before it on g[2] ended in (:50, 5 s and 30 s of it)
        _held(
            tw, [g[2]], placed=hour + timedelta(minutes=50, seconds=30), ended=hour + timedelta(minutes=55, seconds=10)
        ),
    ]
    for i, gpu in enumerate(g):
        for m in range(60):
            if (m + i) % 7:  # some minutes without a sample
                _sample(gpu, hour + timedelta(minutes=m), float((m * 13 + i * 29) % 101), samples=1 + m % 3)
    shared = GpuMinuteSample.objects.get(gpu=g[2], minute=hour + timedelta(minutes=50))
    GpuMinuteSample.objects.filter(pk=shared.pk).update(utilization_sum=40.0 * shared.utilization_samples)
    t = compute_hour(tw.cluster, hour, tw.now)
    pyramid = Pyramid(measured=t["measured"], utilized=t["utilized"], allocated=t["allocated"])
    pyramid.unallocated = t["unallocated"]
    total = efficiency_of_attempts([a.pk for a in attempts])
    held = sum(e.held for e in total.values())
    measured = sum(e.measured for e in total.values())
    utilized = sum(e.utilized for e in total.values())
    assert held == pytest.approx(t["allocated"] + t["unallocated"])
    # The same minutes, read alike (busy46, util47: each one's busy seconds, minute_busy), but the
    # one two attempts held on g[2]: both jobs' samples, so neither's (util63), while the hour counts
    # its 35 s held and its busy seconds once: its three readings at 40 %, 1.2 busy readings, more
    # than one, so two of them fell in the 35 s (x = 3 × 35 / 60 = 1.75): 35 s × 1.2 / 2 = 21 s
    assert measured == pytest.approx(t["measured"] - 35)
    assert utilized == pytest.approx(t["utilized"] - 21)


def test_a_week_on_eight_gpus_is_two_queries(tw, ticks, capsys):
    """The cost the brief asked about: a workload that held 8 GPUs for a week, every minute sampled
    (80,640 rows), read in two queries (the whole minutes summed, then the partly held ones, util46);
    the time is printed (``-s``) for docs/jobs.md."""
    import time

    gpus = list(GPU.objects.filter(host=tw.host("big", 8)).order_by("index"))
    start = tw.now.replace(second=0) - timedelta(days=7, seconds=30)
    w = tw.workload(gpus=8)
    _held(tw, gpus, w, placed=start, ended=start + timedelta(days=7))
    GpuMinuteSample.objects.bulk_create(
        [
            GpuMinuteSample(
                gpu=g,
                minute=start + timedelta(minutes=m),
                samples=3,
                utilization_samples=3,
                utilization_sum=3.0 * (m % 100),
            )
            for g in gpus
            for m in range(7 * 24 * 60 + 1)
        ],
        batch_size=5000,
    )
    found = None
    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        found = efficiency_of_attempts(None, tw.now, workload_id=w.pk)
        took = time.perf_counter() - began
    assert len(queries) == 2
    (e,) = found.values()
    assert e.held == 8 * 7 * 86400 and e.measured == e.held
    with capsys.disabled():
        print(f"\nefficiency of a week on 8 GPUs ({connection.vendor}): {took * 1000:.0f} ms")


class _Undone(Exception):
    pass


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spans=st.lists(
        st.tuples(st.integers(0, 600), st.integers(0, 600), st.booleans()), min_size=1, max_size=3
    ),  # placed (s after the base), held (s), still running
    samples=st.dictionaries(
        st.tuples(st.integers(0, 1), st.integers(-2, 22)),  # (GPU, minute after the base)
        st.tuples(st.floats(-10, 130), st.integers(1, 4), st.integers(0, 80_000)),  # mean, samples, memory
        max_size=40,
    ),
    pct=st.sampled_from([1.0, 30.0, 100.0]),
)
def test_the_one_query_is_the_readable_rule(tw, settings, spans, samples, pct):
    """The fast path (SQL sums of the wholly held minutes, the partly held ones in Python) against
    the oracle, minute by minute over the attempt's own minutes of the GPU (held whole, or in part
    with no other attempt's link on the GPU in it: util46): each sampled one is measured for the
    seconds held of it and utilized for its busy seconds (``minute_busy``: 60 s, so far in the
    minute in progress, × its mean when held whole; busy46, util47); idle by its busy share of the
    seconds held (util47); and the memory rule."""
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": pct}
    try:
        with transaction.atomic():
            host = tw.host(f"p{next(_hosts)}", 2)
            gpus = list(GPU.objects.filter(host=host).order_by("index"))
            GPU.objects.filter(host=host).update(memory_mb=80_000)
            base = tw.now.replace(second=0) - timedelta(hours=1)
            now = base + timedelta(minutes=15, seconds=7)
            for (g, m), (mean, n, memory) in samples.items():
                _sample(gpus[g], base + timedelta(minutes=m), mean, samples=n, memory=memory)
            attempts = []
            for i, (placed_s, held_s, running) in enumerate(spans):
                placed = base + timedelta(seconds=placed_s)
                ended = None if running and i == len(spans) - 1 else placed + timedelta(seconds=held_s)
                a = _held(tw, [gpus[i % 2]] if i < 2 else gpus, placed=placed, ended=ended)
                attempts.append(a)
            found = efficiency_of_attempts([a.pk for a in attempts], now)
            every = [
                (link.gpu_id, link.attempt_id, a.placed_at, a.ended_at) for a in attempts for link in a.gpu_links.all()
            ]

            def shared(link_gpu, attempt_id, m):  # another attempt's link on the GPU in minute m
                return any(
                    g == link_gpu and o != attempt_id and p0 < m + timedelta(minutes=1) and (p1 is None or p1 > m)
                    for g, o, p0, p1 in every
                )

            for a in attempts:
                a0, a1 = a.placed_at, a.ended_at or now
                held = measured = utilized = idle = 0.0
                peak = None
                own_any = False
                for link in a.gpu_links.all():
                    rows = {r.minute: r for r in GpuMinuteSample.objects.filter(gpu_id=link.gpu_id, samples__gt=0)}
                    if a1 <= a0:
                        continue
                    held += (a1 - a0).total_seconds()
                    # the minutes it held whole, and those held in part no other attempt held (util46)
                    mine = []
                    m = a0.replace(second=0, microsecond=0)
                    while m < a1:
                        whole = m >= a0 and m + timedelta(minutes=1) <= a1
                        if whole or not shared(link.gpu_id, a.pk, m):
                            mine.append(m)
                        m += timedelta(minutes=1)
                    own_any = own_any or bool(mine)
                    series = {
                        m: minute_utilization(rows[m].utilization_sum, rows[m].samples) for m in mine if m in rows
                    }
                    for m, mean in series.items():
                        h = (min(a1, m + timedelta(minutes=1)) - max(a0, m)).total_seconds()  # seconds held of it
                        # the seconds its samples cover: 60, or so far in the minute in progress
                        sampled = min(60.0, max(h, (now - m).total_seconds()))
                        measured += h
                        busy = minute_busy(h, mean, rows[m].samples, sampled)  # busy46, util47
                        utilized += busy
                        if busy < h * pct / 100:  # idle: its busy share of the seconds held (util47)
                            idle += h
                    # the same minutes' memory (left59: a shared one is another attempt's too)
                    peak = max(
                        [rows[m].memory_used_max_mb for m in mine if m in rows] + ([peak] if peak is not None else []),
                        default=None,
                    )
                e = found[a.pk]
                assert e.held == pytest.approx(held)
                assert e.measured == pytest.approx(measured)
                assert e.utilized == pytest.approx(utilized)
                assert e.idle == pytest.approx(idle)
                assert e.memory_peak_mb == peak
                why = None if measured > 0 or held <= 0 else ("no_sample" if own_any else "no_own_minute")
                assert e.utilization_why == why
            raise _Undone
    except _Undone:
        pass


def test_an_attempt_that_never_started_measures_none_of_its_gpus_minutes(tw, ticks):
    """try61: four failed_to_start attempts, held a second each, read 71 % on `fairway history`, `seff` and
    the page: the minute's utilization of the work before them. Nothing of theirs ran: not measured."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=20), ended=minute + timedelta(seconds=21))
    Attempt.objects.filter(pk=a.pk).update(started_at=None, end_reason="failed_to_start")
    _sample(gpu, minute, 71.0, memory=60_000)
    data = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert data["gpu_hours"] == round(1 / 3600, 4)  # held from its placing, as the pyramid counts it
    assert data["utilization"] is None and data["idle"] is None and data["not_measured"] == 1.0
    _sample(gpu, minute + timedelta(minutes=1), 71.0)
    started = _held(tw, [gpu], placed=minute + timedelta(minutes=1), ended=minute + timedelta(minutes=2))
    assert efficiency_of_attempts([started.pk])[started.pk].as_data()["utilization"] == 0.71


def test_a_finished_attempts_utilization_is_fixed_once_its_last_minute_is_over(tw, ticks):
    """util63: a finished attempt read 61 %, then 63 %, then 64 % on reloads: the minute it ended in
    took the next attempt's samples on the same GPU. util46: that minute is its own only if no
    other attempt held the GPU in it, which is settled once the minute is over. Read then, and
    again after the next attempt's samples (the heartbeat's own path), it is the same number."""
    from scheduler import metrics

    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    # placed at :30, ended at 3 min 20 s: minute+1 and minute+2 held whole, minute 30 s of it
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=30), ended=minute + timedelta(minutes=3, seconds=20))
    for m, util in ((0, 60.0), (1, 60.0), (2, 62.0), (3, 60.0)):
        metrics.record_samples(
            [(gpu.pk, "healthy", {"utilization_pct": util})], minute + timedelta(minutes=m, seconds=35)
        )
    # the next attempt on the same GPU, placed in the minute the first one ended in, busy at 100 %
    _held(tw, [gpu], placed=minute + timedelta(minutes=3, seconds=25))
    for s in (40, 50):
        metrics.record_samples(
            [(gpu.pk, "healthy", {"utilization_pct": 100.0})], minute + timedelta(minutes=3, seconds=s)
        )
    before = efficiency_of_attempts([a.pk], minute + timedelta(minutes=4))[a.pk].as_data()
    for m in (4, 5):
        metrics.record_samples(
            [(gpu.pk, "healthy", {"utilization_pct": 100.0})], minute + timedelta(minutes=m, seconds=5)
        )
    after = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert after == before
    # 30 s of a minute at 60 % (its one reading, at :35, fell in the 30 s held: 18 busy seconds,
    # util47; busy46 read 60 s × 60 %, 36 s, all 30), its two whole minutes at 60 % and 62 %; not
    # the minute the next one shared
    assert before["utilization"] == pytest.approx(round((18 + 36 + 37.2) / 150, 4))


def test_partly_held_minutes_shared_with_other_attempts_are_not_the_attempts(tw, ticks):
    """util63: the first and the last minute's samples are the GPU's, partly another attempt's, so
    they are not the attempt's: held, not measured. Its whole minutes are its own."""
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    _held(tw, [gpu], placed=minute - timedelta(minutes=5), ended=minute + timedelta(seconds=25))
    _held(tw, [gpu], placed=minute + timedelta(minutes=3, seconds=25), ended=minute + timedelta(minutes=6))
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=30), ended=minute + timedelta(minutes=3, seconds=20))
    _sample(gpu, minute, 90.0)  # the work before it, 30 s of it held
    _sample(gpu, minute + timedelta(minutes=1), 40.0)
    _sample(gpu, minute + timedelta(minutes=2), 60.0)
    _sample(gpu, minute + timedelta(minutes=3), 100.0)  # the work after it, 20 s of it held
    e = efficiency_of_attempts([a.pk])[a.pk]
    assert (e.held, e.measured, e.utilized) == (170, 120, pytest.approx(60))
    data = e.as_data()
    assert data["utilization"] == 0.5 and data["not_measured"] == pytest.approx(round(50 / 170, 4))
    assert data["utilization_why"] is None


def test_an_attempt_in_minutes_other_attempts_shared_has_no_utilization(tw, ticks):
    """util63: a job seconds old read another job's minute. util46: a minute it held in part counts
    only if no other attempt held the GPU in it; until it has one, not measured yet, and why."""
    from fairway_cli.words import efficiency_lines, utilization_words

    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    _held(tw, [gpu], placed=minute - timedelta(minutes=3), ended=minute + timedelta(seconds=30))
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=40))
    _sample(gpu, minute, 90.0)  # both jobs' samples
    data = efficiency_of_attempts([a.pk], minute + timedelta(seconds=50))[a.pk].as_data()
    assert data["utilization"] is None and data["running"] is True
    assert data["utilization_why"] == "no_own_minute"
    words = utilization_words(None, data["utilization_why"], running=True)
    assert words == "not measured yet (so far its GPUs were shared with other jobs in every minute it held them)"
    assert dict(efficiency_lines(data))["GPU utilization"] == words
    # ended inside that minute: never one of its own
    Attempt.objects.filter(pk=a.pk).update(ended_at=minute + timedelta(seconds=55))
    done = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert done["utilization"] is None and done["utilization_why"] == "no_own_minute"
    assert dict(efficiency_lines(done))["GPU utilization"] == (
        "not measured (its GPUs were shared with other jobs in every minute it held them)"
    )
    # once it has held a minute of its own with a sample, that minute is its figure
    Attempt.objects.filter(pk=a.pk).update(ended_at=None)
    _sample(gpu, minute + timedelta(minutes=1), 80.0)
    grown = efficiency_of_attempts([a.pk], minute + timedelta(minutes=2))[a.pk].as_data()
    assert grown["utilization"] == 0.8 and grown["utilization_why"] is None
