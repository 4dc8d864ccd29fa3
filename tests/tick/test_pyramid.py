"""The four-metric pyramid (DESIGN.md §8): hourly roll-up, the API, the clock's hourly request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from scheduler.models import GPU, Attempt, ClusterHourlyMetrics, GpuMinuteSample, Host
from scheduler.pyramid import (
    CATCH_UP_HOURS,
    compute_hour,
    hour_of,
    rollup_hour,
    rollup_missing_hours,
    rollup_previous_hour,
)


@pytest.fixture
def hour_world(tw):
    """One past hour H of cluster c1, in GPU-seconds.

    h1 (active, 4 GPUs, last heartbeat in H): gpu0 allocated all hour at 50 % (latest sample
    only, taken in H); gpu1 unallocated H+30..H+45 min at 80 % (minute samples; a sample outside
    the attempt is ignored); gpu2 idle; gpu3 unhealthy. h2 (cordoned, 2 GPUs, last heartbeat
    now): gpu0 allocated all hour, its latest sample (90 %) taken after H: not measured in H.
    h3 (1 GPU) removed at H+15 min.
    """
    hour = hour_of(tw.now) - timedelta(hours=2)
    h1 = tw.host("h1", gpus=4)
    h2 = tw.host("h2", gpus=2, state=Host.State.CORDONED)
    h3 = tw.host("h3", gpus=1, removed_at=hour + timedelta(minutes=15))
    Host.objects.filter(pk__in=[h1.pk, h2.pk, h3.pk]).update(created_at=hour - timedelta(days=1))
    Host.objects.filter(pk=h1.pk).update(last_heartbeat=hour + timedelta(minutes=59))
    g1 = list(h1.gpus.order_by("index"))
    g2 = list(h2.gpus.order_by("index"))
    GPU.objects.filter(pk=g1[0].pk).update(last_sample={"utilization_pct": 50})
    GPU.objects.filter(pk=g1[1].pk).update(last_sample={"utilization_pct": 5})
    GPU.objects.filter(pk=g1[3].pk).update(health=GPU.Health.UNHEALTHY)
    GPU.objects.filter(pk=g2[0].pk).update(last_sample={"utilization_pct": 90})
    long = tw.attempt(tw.workload(), [g1[0]])
    Attempt.objects.filter(pk=long.pk).update(placed_at=hour - timedelta(hours=3))
    short = tw.attempt(tw.workload(min_runtime=0), [g1[1]])
    Attempt.objects.filter(pk=short.pk).update(
        placed_at=hour + timedelta(minutes=30), ended_at=hour + timedelta(minutes=45), end_reason="preempted"
    )
    cordoned = tw.attempt(tw.workload(), [g2[0]])
    Attempt.objects.filter(pk=cordoned.pk).update(placed_at=hour - timedelta(minutes=5))
    GpuMinuteSample.objects.bulk_create(
        [
            GpuMinuteSample(
                gpu=g1[1], minute=hour + timedelta(minutes=m), samples=2, utilization_samples=2, utilization_sum=160.0
            )
            for m in range(30, 45)
        ]
        + [
            GpuMinuteSample(
                gpu=g1[1], minute=hour + timedelta(minutes=50), samples=1, utilization_samples=1, utilization_sum=100.0
            )
        ]
    )
    return tw, hour


def test_an_hour_in_gpu_seconds(hour_world):
    tw, hour = hour_world
    t = compute_hour(tw.cluster, hour, tw.now)
    assert t["registered"] == pytest.approx(6 * 3600 + 900)
    # h1: gpu0-2 healthy on an active host; h2 cordoned: only its occupied hour; h3 removed
    assert t["available"] == pytest.approx(3 * 3600 + 3600)
    assert t["allocated"] == pytest.approx(2 * 3600)
    assert t["unallocated"] == pytest.approx(900)
    assert t["utilized"] == pytest.approx(3600 * 0.5 + 900 * 0.8)
    assert t["measured"] == pytest.approx(3600 + 900)  # h2's hour was not measured: not 0 %
    assert t["registered"] >= t["available"] >= t["allocated"] + t["unallocated"] >= t["measured"] >= t["utilized"]


def test_rollup_is_an_idempotent_upsert_and_the_api_returns_the_fractions(hour_world):
    tw, hour = hour_world
    rollup_hour(tw.cluster, hour, tw.now)
    rollup_hour(tw.cluster, hour, tw.now)
    assert ClusterHourlyMetrics.objects.count() == 1
    client = APIClient()
    client.force_authenticate(tw.user)
    since = (hour - timedelta(hours=1)).isoformat()
    until = (hour + timedelta(hours=1)).isoformat()  # the stored hour only (no current, partial one)
    answer = client.get("/api/v1/metrics/pyramid/", {"cluster": "c1", "since": since, "until": until})
    assert answer.status_code == 200, answer.content
    [c1] = answer.json()
    assert c1["cluster"] == "c1"
    assert len(c1["hours"]) == 1
    total = c1["total"]
    reg = 6 * 3600 + 900
    assert total["availability"] == pytest.approx(4 * 3600 / reg, abs=1e-5)
    assert total["occupancy"] == pytest.approx((7200 + 900) / reg, abs=1e-5)
    # The mean over the measured occupied time (2,520 of 4,500 GPU-s), times the occupancy.
    assert total["utilization_of_occupied"] == pytest.approx(2520 / 4500, abs=1e-5)
    assert total["utilization"] == pytest.approx(2520 / 4500 * 8100 / reg, abs=1e-5)
    assert total["utilization_measured"] == pytest.approx(4500 / 8100, abs=1e-5)
    # try41: the 20 % of registered time came with no word of the 56 % mean over the occupied time
    assert total["utilization_text"] == (
        "20% (occupied GPU-time at 56% mean utilization, measured over 56% of the occupied GPU-time)"
    )
    assert total["impact"] == pytest.approx(7200 / 8100, abs=1e-5)
    assert total["availability"] >= total["occupancy"] >= total["utilization"]
    assert c1["hours"][0]["occupancy"] == total["occupancy"]
    assert client.get("/api/v1/metrics/pyramid/", {"since": "yesterday"}).status_code == 400
    assert client.get("/api/v1/metrics/pyramid/", {"since": "2026-01-02", "until": "2026-01-01"}).status_code == 400
    assert client.get("/api/v1/metrics/pyramid/", {"until": "0001-01-01"}).status_code == 400
    assert APIClient().get("/api/v1/metrics/pyramid/").status_code == 401


def test_rollup_previous_hour_writes_each_cluster_once(hour_world):
    tw, hour = hour_world
    assert rollup_previous_hour(hour + timedelta(hours=1, minutes=2)) == 1
    row = ClusterHourlyMetrics.objects.get()
    assert row.hour == hour
    assert row.utilized_gpu_s <= row.allocated_gpu_s + row.unallocated_gpu_s <= row.available_gpu_s


def test_clock_asks_for_the_rollup_once_an_hour(db, monkeypatch):
    from scheduler import tasks
    from scheduler.clock import Clock

    sent: list[int] = []
    monkeypatch.setattr(tasks.rollup_pyramid, "send", lambda: sent.append(1))
    clock = Clock(interval=1.0)
    clock.beat(sweep=False)
    clock.beat(sweep=False)
    assert sent == [1]


def test_hours_whose_rollup_was_lost_are_caught_up_once(hour_world):
    """fix30: a failed roll-up's retry is a delayed dramatiq message, dropped with the worker's
    Redis connection (docs/deploy.md, "Lost delayed messages"), and the clock asked only once an
    hour for the hour just ended: that hour stayed without its row. The roll-up now writes every
    complete hour of the last ``CATCH_UP_HOURS`` that has no row, and only those."""
    tw, hour = hour_world
    current = hour_of(tw.now)
    # Given hosts there for the last 5 complete hours, the oldest of them rolled up, the rest lost
    Host.objects.update(created_at=current - timedelta(hours=5))
    kept = rollup_hour(tw.cluster, current - timedelta(hours=5), tw.now - timedelta(hours=4))
    # When the next roll-up runs
    assert rollup_missing_hours(tw.now) == 4
    # Then every complete hour has its row, the one stored is untouched, the missed one is right
    rows = {r.hour: r for r in ClusterHourlyMetrics.objects.filter(cluster=tw.cluster)}
    assert sorted(rows) == [current - timedelta(hours=n) for n in range(5, 0, -1)]
    assert rows[kept.hour].computed_at == kept.computed_at
    assert rows[hour].registered_gpu_s == pytest.approx(compute_hour(tw.cluster, hour, tw.now)["registered"])
    # Run again (a second clock, a redelivered message): nothing left to write
    assert rollup_missing_hours(tw.now) == 0
    assert ClusterHourlyMetrics.objects.count() == 5
    # Hours further back than CATCH_UP_HOURS are left alone; none before the hosts came
    Host.objects.update(created_at=current - timedelta(hours=CATCH_UP_HOURS + 10))
    assert rollup_missing_hours(tw.now) == CATCH_UP_HOURS - 5
    assert min(ClusterHourlyMetrics.objects.values_list("hour", flat=True)) == current - timedelta(hours=CATCH_UP_HOURS)


def test_the_rollup_actor_catches_up(hour_world):
    from scheduler import tasks

    tw, hour = hour_world
    tasks.rollup_pyramid()
    assert ClusterHourlyMetrics.objects.filter(hour=hour).exists()
    assert ClusterHourlyMetrics.objects.filter(hour=hour + timedelta(hours=1)).exists()


def test_the_clock_asks_for_the_rollup_again_until_it_was_sent_and_every_few_minutes(db, monkeypatch):
    """A send refused (Redis out at the hour) is tried again at the next beat, and the sweeps ask
    every ``ROLLUP_EVERY_S`` too, so a roll-up (or its retry) lost in the worker is made up."""
    from scheduler import tasks
    from scheduler.clock import Clock

    sent: list[int] = []

    def refuse() -> None:
        raise ConnectionError("redis down")

    monkeypatch.setattr(tasks, "ROLLUP_EVERY_S", 0.0)  # every sweep asks
    monkeypatch.setattr(tasks.rollup_pyramid, "send", refuse)
    clock = Clock(interval=1.0)
    with pytest.raises(ConnectionError):
        clock.beat(sweep=False)
    monkeypatch.setattr(tasks.rollup_pyramid, "send", lambda: sent.append(1))
    clock.beat(sweep=False)
    assert sent == [1]
    clock.beat(sweep=False)
    assert sent == [1]  # a beat without the sweeps: once an hour
    for name in ("sweep_hosts", "start_timeouts", "prune_gpu_metrics", "resend_stale_notifications"):
        monkeypatch.setattr(getattr(tasks, name), "send", lambda: None)
    clock.beat(sweep=True)
    clock.beat(sweep=True)
    assert sent == [1, 1, 1]


@pytest.mark.parametrize(
    ("measured", "words"),
    [
        (0.3, "less than 1%"),  # the demo's week: a few live minutes after an imported week
        (1.0, "1%"),
        (50.4, "50%"),
        (56.0, "56%"),
        (99.6, "more than 99%"),
        (100.0, None),  # measured throughout: no parenthesis
    ],
)
def test_utilization_never_says_it_was_measured_over_0_or_100_percent(measured, words):
    """tryout22: the demo's 7-day pyramid read "72% (measured over 0% of the occupied GPU-time)":
    measured over 0.2 %, rounded to none. A part strictly between none and all never reads as
    either."""
    from scheduler.pyramid import Pyramid

    text = Pyramid(
        registered=100.0, available=100.0, allocated=100.0, measured=measured, utilized=measured / 2
    ).utilization_text()
    assert "over 0%" not in text and "for 0%" not in text and "over 100%" not in text
    if measured < 50:  # under half measured: no figure, the part said (import48)
        assert text.startswith(f"not measured (utilization samples for {words} of the occupied GPU-time")
        return
    mean = "50% (occupied GPU-time at 50% mean utilization"
    assert text == (f"{mean})" if words is None else f"{mean}, measured over {words} of the occupied GPU-time)")
