"""Idle GPUs (scheduler/idle.py, docs/jobs.md "Idle GPUs"): the rule, and the owner told once a stretch."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from scheduler import clock, idle, notifications, tasks
from scheduler.models import GPU, Attempt, GpuMinuteSample, Notification, NotificationSettings, WorkloadEvent


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}


def _gpus(tw, name="h1", n=2):
    return list(GPU.objects.filter(host=tw.host(name, n)).order_by("index"))


def _minute(tw, ago_min: int):
    return tw.now.replace(second=0) - timedelta(minutes=ago_min)


def _fill(tw, gpu, util: float, from_ago: int, to_ago: int = 0) -> None:
    """Minute samples of ``gpu`` at ``util`` % from ``from_ago`` minutes ago to ``to_ago`` (both in)."""
    GpuMinuteSample.objects.bulk_create(
        [
            GpuMinuteSample(gpu=gpu, minute=_minute(tw, m), samples=4, utilization_samples=4, utilization_sum=4 * util)
            for m in range(to_ago, from_ago + 1)
        ]
    )


def _running(tw, gpus, started_min_ago=200, **fields):
    return tw.attempt(tw.workload(gpus=len(gpus), **fields), gpus, started_ago=started_min_ago * 60)


def test_all_gpus_under_the_threshold_for_the_period_is_idle(tw, ticks):
    gpus = _gpus(tw)
    a = _running(tw, gpus)
    _fill(tw, gpus[0], 30.0, 150, 91)  # busy, then idle from 90 minutes ago
    _fill(tw, gpus[0], 0.5, 90)
    _fill(tw, gpus[1], 0.0, 150)  # idle all along: the attempt is idle since the later GPU
    found = idle.idle_attempts(now=tw.now)
    assert list(found) == [a.pk]
    i = found[a.pk]
    assert i.since == _minute(tw, 90)
    assert i.gpus == 2 and i.gpu_hours == pytest.approx(2 * i.seconds / 3600)
    assert i.text.startswith("idle for 1h 30m (GPUs < 1 % since ")


def test_threshold_edges(tw, ticks, settings):
    """Under the threshold is idle; at it is busy; the period counts from the minute after the busy one."""
    gpus = _gpus(tw, n=1)
    a = _running(tw, gpus)
    _fill(tw, gpus[0], 1.0, 61, 61)  # exactly 1 %: busy
    _fill(tw, gpus[0], 0.99, 60)  # idle since the minute after: 60 minutes ago
    now = _minute(tw, 0)
    assert idle.idle_attempts(now=now)[a.pk].since == _minute(tw, 60)  # exactly the period
    assert idle.idle_attempts(now=now - timedelta(seconds=1)) == {}  # a second short of it
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 0.5}
    assert idle.idle_attempts(now=tw.now) == {}  # 0.99 % is busy under a 0.5 % threshold
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 0}
    assert idle.idle_attempts(now=tw.now) == {}  # 0: off


def test_one_busy_gpu_makes_it_busy(tw, ticks):
    gpus = _gpus(tw)
    _running(tw, gpus)
    _fill(tw, gpus[0], 0.0, 150)
    _fill(tw, gpus[1], 0.0, 150, 1)
    _fill(tw, gpus[1], 55.0, 0, 0)  # busy in the current minute
    assert idle.idle_attempts(now=tw.now) == {}


def test_missing_or_stale_samples_are_not_idle(tw, ticks):
    """Unknown is not idle: a GPU never reported, or silent for minutes, makes the attempt not idle."""
    gpus = _gpus(tw)
    a = _running(tw, gpus)
    _fill(tw, gpus[0], 0.0, 150)
    assert idle.idle_attempts(now=tw.now) == {}  # gpus[1] has no sample at all
    _fill(tw, gpus[1], 0.0, 150, 10)  # silent for the last 10 minutes
    assert idle.idle_attempts(now=tw.now) == {}
    _fill(tw, gpus[1], 0.0, 9, 2)  # its latest sample began 2 minutes ago: reported (no gap: brk56)
    assert a.pk in idle.idle_attempts(now=tw.now)


def test_samples_before_the_start_do_not_count(tw, ticks):
    """The GPU's idle minutes before this attempt started (another's work, or none) are not its idleness."""
    gpus = _gpus(tw, n=1)
    _fill(tw, gpus[0], 0.0, 300)
    a = _running(tw, gpus, started_min_ago=45)
    assert idle.idle_attempts(now=tw.now) == {}  # idle since its start: 44 minutes, under the hour
    assert idle.idle_attempts(now=tw.now + timedelta(minutes=20)) == {}  # its samples stop: not reported
    _fill(tw, gpus[0], 0.0, -1, -17)  # reported again, each minute to 17 minutes on (a gap breaks it: brk56)
    found = idle.idle_attempts(now=tw.now + timedelta(minutes=17))
    assert a.pk in found and found[a.pk].since >= a.started_at  # = when it started on a whole minute


def test_unallocated_work_is_idle_too_and_ended_or_unstarted_is_not(tw, ticks):
    gpus = _gpus(tw, n=3)
    free = _running(tw, gpus[:1], min_runtime=0)
    starting = tw.attempt(tw.workload(), gpus[1:2], started_ago=None)
    ended = _running(tw, gpus[2:])
    Attempt.objects.filter(pk=ended.pk).update(ended_at=tw.now, end_reason="succeeded")
    for g in gpus:
        _fill(tw, g, 0.0, 150)
    found = idle.idle_attempts(now=tw.now)
    assert set(found) == {free.pk}
    assert starting.pk not in found


def test_idle_of_workloads_and_ids(tw, ticks):
    gpus = _gpus(tw)
    a = _running(tw, gpus[:1])
    b = _running(tw, gpus[1:])
    _fill(tw, gpus[0], 0.0, 150)
    _fill(tw, gpus[1], 50.0, 150)
    assert idle.idle_workload_ids(now=tw.now) == {a.workload_id}
    assert set(idle.idle_of_workloads([a.workload_id, b.workload_id], now=tw.now)) == {a.workload_id}


def test_the_query_count_does_not_grow_with_the_attempts(tw, ticks, django_assert_num_queries):
    gpus = _gpus(tw, n=8)
    for g in gpus:
        _running(tw, [g])
        _fill(tw, g, 0.0, 90)
    with django_assert_num_queries(2):  # every GPU's latest minute; the quiet ones' stretches
        assert len(idle.idle_attempts(now=tw.now)) == 8
    _fill(tw, gpus[0], 30.0, -1, -1)  # busy now: its attempt is not read further
    with django_assert_num_queries(2):
        assert len(idle.idle_attempts(now=tw.now + timedelta(minutes=1))) == 7
    for g in gpus:
        GpuMinuteSample.objects.filter(gpu=g, minute=_minute(tw, -1)).delete()
        _fill(tw, g, 30.0, -1, -1)
    with django_assert_num_queries(1):  # none quiet now: one query
        assert idle.idle_attempts(now=tw.now + timedelta(minutes=1)) == {}


@pytest.fixture
def told(tw, settings, monkeypatch):
    """The owner asks for idle by email and webhook; deliveries recorded instead of sent."""
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["hooks.example"]}
    NotificationSettings.objects.create(
        user=tw.user, email_kinds=["idle"], webhook_kinds=["idle"], webhook_url="http://hooks.example/x"
    )
    keys: list[str] = []
    monkeypatch.setattr(tasks.deliver_notification, "send", lambda key: keys.append(key))
    return keys


def test_the_owner_is_told_once_and_again_only_after_busy(tw, ticks, told, django_capture_on_commit_callbacks):
    gpus = _gpus(tw, n=1)
    a = _running(tw, gpus)
    _fill(tw, gpus[0], 0.0, 150)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.tell_idle(tw.now) == 1
        assert idle.tell_idle(tw.now + timedelta(minutes=5)) == 0  # the same stretch: told already
    event = WorkloadEvent.objects.get(kind="idle")
    assert event.workload_id == a.workload_id and event.data["attempt_id"] == a.pk
    assert "GPU-h held idle" in event.message and "UTC" in event.message  # left60: as charged
    assert sorted(told) == [f"event-{event.pk}-email", f"event-{event.pk}-webhook"]
    n = Notification.objects.select_related("event__workload").get(channel="email")
    subject, text = notifications.render(n)
    assert "idle" in subject and "idle for 2h 30m" in text

    # Silent for a while (unknown): not idle, and no new stretch when it is reported idle again.
    GpuMinuteSample.objects.filter(minute__gte=_minute(tw, 10)).delete()
    assert idle.tell_idle(tw.now) == 0
    _fill(tw, gpus[0], 0.0, 10)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.tell_idle(tw.now) == 0

    # Busy in between: a new stretch, told again once it lasts the period.
    GpuMinuteSample.objects.filter(minute=_minute(tw, 70)).update(utilization_sum=400.0)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.tell_idle(tw.now) == 1
        assert idle.tell_idle(tw.now) == 0
    assert WorkloadEvent.objects.filter(kind="idle").count() == 2
    assert len(told) == 4


def test_an_owner_who_did_not_ask_gets_the_event_only(tw, ticks, monkeypatch, django_capture_on_commit_callbacks):
    keys: list[str] = []
    monkeypatch.setattr(tasks.deliver_notification, "send", lambda key: keys.append(key))
    NotificationSettings.objects.create(user=tw.user, email_kinds=["failed"])
    gpus = _gpus(tw, n=1)
    _running(tw, gpus)
    _fill(tw, gpus[0], 0.0, 150)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.tell_idle(tw.now) == 1
    assert keys == [] and not Notification.objects.exists()


def test_the_clock_asks_for_the_check_each_minute_and_never_when_off(db, monkeypatch, settings):
    sent: list[str] = []
    monkeypatch.setattr(tasks.check_idle, "send", lambda: sent.append("idle"))
    for actor in (tasks.sweep_hosts, tasks.start_timeouts, tasks.prune_gpu_metrics):
        monkeypatch.setattr(actor, "send", lambda: None)
    c = clock.Clock(interval=1.0)
    c.beat(sweep=True)
    c.beat(sweep=True)
    assert sent == ["idle"]
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_AFTER_S": 0}
    clock.Clock(interval=1.0).beat(sweep=True)
    assert sent == ["idle"]


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("FAIRWAY_IDLE_UTIL_PCT", "101", "must be <= 100"),
        ("FAIRWAY_IDLE_UTIL_PCT", "nan", "not a finite number"),
        ("FAIRWAY_IDLE_UTIL_PCT", "-1", "must be >= 0"),
        ("FAIRWAY_IDLE_AFTER_S", "-1", "must be >= 0"),
        ("FAIRWAY_IDLE_AFTER_S", "1h", "is not an integer"),
    ],
)
def test_the_settings_refuse_bad_values(monkeypatch, name, value, words):
    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured, match=f"{name}.*{words}"):
        load_settings(monkeypatch, **{name: value})
    assert (
        load_settings(monkeypatch, FAIRWAY_IDLE_AFTER_S="0", FAIRWAY_IDLE_UTIL_PCT="0.5")["FAIRWAY"]["IDLE_AFTER_S"]
        == 0
    )


def test_a_gap_in_the_samples_breaks_the_stretch(tw, ticks):
    """brk56: unknown is not idle in the middle of a stretch either. Busy, then 59 minutes without a
    sample (the agent down, the work running), then one quiet minute: it read "idle for 1h" from
    two samples; the stretch starts after the last gap longer than ``REPORTED_S``."""
    gpus = _gpus(tw, n=1)
    a = _running(tw, gpus)
    _fill(tw, gpus[0], 50.0, 150, 61)  # busy until 61 minutes ago
    _fill(tw, gpus[0], 0.0, 60, 60)  # one quiet minute, then nothing for 59 minutes
    _fill(tw, gpus[0], 0.0, 0, 0)  # a quiet minute now
    assert idle.idle_attempts(now=tw.now) == {}
    _fill(tw, gpus[0], 0.0, -1, -59)  # reported quiet for the hour after
    found = idle.idle_attempts(now=tw.now + timedelta(minutes=60))
    assert found[a.pk].since == _minute(tw, 0)
    GpuMinuteSample.objects.filter(minute=_minute(tw, -30)).delete()  # a gap within REPORTED_S: no break
    GpuMinuteSample.objects.filter(minute=_minute(tw, -31)).delete()
    assert idle.idle_attempts(now=tw.now + timedelta(minutes=60))[a.pk].since == _minute(tw, 0)


def test_minutes_nobody_read_in_a_stretch_are_a_gap_too(tw, ticks):
    """idle58 (the oracle, scheduler/idle_reference.py): a minute whose utilization no heartbeat read
    (``null``, nvml56) is unknown like a minute without a sample. Quiet, then 3 minutes read by
    nobody, then quiet: over 3 minutes between two read minutes start the stretch again, as
    3 minutes without any sample do; the gap check counted the unread rows as samples."""
    gpus = _gpus(tw, n=1)
    a = _running(tw, gpus)
    _fill(tw, gpus[0], 0.0, 150, 64)
    GpuMinuteSample.objects.bulk_create(
        [GpuMinuteSample(gpu=gpus[0], minute=_minute(tw, m), samples=3, utilization_samples=0) for m in (63, 62, 61)]
    )
    _fill(tw, gpus[0], 0.0, 60)
    assert idle.idle_attempts(now=_minute(tw, 0))[a.pk].since == _minute(tw, 60)  # not 150 minutes
