"""The tick's wall-time stops (``lifecycle.stop_timed_out``) read in single-table statements whose
plans do not hang on statistics (lat32): the same attempts as the plain join (its oracle), and one
query when no live workload of the cluster has a limit (most ticks)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler import lifecycle
from scheduler.models import GPU, Attempt, Cluster, Workload


@pytest.mark.parametrize("seed", range(12))
def test_the_attempts_stopped_for_their_wall_time_are_the_plain_joins(tw, pushed, seed):
    rng = random.Random(seed)
    tw.host("h1", 8)
    tw.host("h2", 8)
    other = Cluster.objects.create(name="c2")
    free = list(GPU.objects.order_by("host__name", "index"))
    rng.shuffle(free)
    for _ in range(rng.randint(0, 12)):
        limit = rng.choice([None, 30, 60, 600])
        w = tw.workload(max_runtime_s=limit)
        if rng.random() < 0.15:
            Workload.objects.filter(pk=w.pk).update(cluster=other)  # another cluster's: never this tick's
        if not free or rng.random() < 0.2:
            continue  # pending
        a = tw.attempt(w, [free.pop()], started_ago=rng.choice([None, 10, 45, 120, 900]))
        if rng.random() < 0.2:
            Attempt.objects.filter(pk=a.pk).update(stop_requested_at=tw.now, stop_reason="preempted")
            Workload.objects.filter(pk=w.pk).update(state=Workload.State.PREEMPTING)
        if rng.random() < 0.2:  # ended and requeued, or ended for good
            Attempt.objects.filter(pk=a.pk).update(ended_at=tw.now, end_reason="preempted")
            a.gpu_links.update(open=False)
            Workload.objects.filter(pk=w.pk).update(state=rng.choice([Workload.State.PENDING, Workload.State.FAILED]))
    expected = lifecycle.timed_out_plain(tw.cluster.pk, tw.now)

    stopped = lifecycle.stop_timed_out(tw.cluster.pk, tw.now)

    assert sorted(stopped) == [a for a, _w in expected]
    assert set(
        Attempt.objects.filter(stop_reason=Attempt.EndReason.TIMEOUT, stop_requested_at=tw.now).values_list(
            "pk", flat=True
        )
    ) == {a for a, _w in expected}
    assert lifecycle.timed_out_plain(tw.cluster.pk, tw.now) == []


def test_no_live_workload_with_a_limit_is_one_query(tw, pushed):
    tw.host("h1", 4)
    gpus = list(GPU.objects.order_by("index"))
    for g in gpus:
        tw.attempt(tw.workload(), [g], started_ago=10_000)  # long past any limit, but none has one
    tw.workload(max_runtime_s=60)  # pending: not live
    with CaptureQueriesContext(connection) as ctx:
        assert lifecycle.stop_timed_out(tw.cluster.pk, tw.now) == []
    assert len(ctx.captured_queries) == 1
    sql = ctx.captured_queries[0]["sql"]
    assert "JOIN" not in sql.upper(), sql


def test_a_live_workload_past_its_limit_is_stopped_in_a_bounded_number_of_queries(tw, pushed):
    tw.host("h1", 4)
    gpus = list(GPU.objects.order_by("index"))
    attempts = [tw.attempt(tw.workload(max_runtime_s=60), [g], started_ago=120) for g in gpus]
    with CaptureQueriesContext(connection) as ctx:
        stopped = lifecycle.stop_timed_out(tw.cluster.pk, tw.now + timedelta(seconds=1))
    assert sorted(stopped) == sorted(a.pk for a in attempts)
    reads = [q["sql"] for q in ctx.captured_queries[:2]]
    assert all("JOIN" not in q.upper() for q in reads), reads
    # the two reads, the two locks, the two updates, the events, the push's hosts
    assert len(ctx.captured_queries) <= 8


def _counting_locks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from scheduler import tick

    taken: list[int] = []
    real = tick._locked_transaction

    def counting(cluster_id: int):  # type: ignore[no-untyped-def]
        taken.append(cluster_id)
        return real(cluster_id)

    monkeypatch.setattr(tick, "_locked_transaction", counting)
    return taken


def test_a_tick_with_no_stop_drain_or_dependency_due_opens_only_the_decisions_transaction(tw, pushed, monkeypatch):
    """The limits', drains' and dependencies' steps read first without the lock (trim48: each
    idle one was a transaction of its own, four round trips to the database, on every tick)."""
    from scheduler import tick

    tw.host("h1", 4)
    g = list(GPU.objects.order_by("index"))
    tw.attempt(tw.workload(max_runtime_s=600), [g[0]], started_ago=120)  # a limit, not reached
    taken = _counting_locks(monkeypatch)
    with CaptureQueriesContext(connection) as ctx:  # drains due, live limits, unmet dependencies: one read
        assert tick._steps_due(tw.cluster.pk, tw.now) == (False, True, False)
    assert len(ctx.captured_queries) == 1

    assert tick.run_tick(tw.cluster.pk, now=tw.now).status == "ran"
    assert taken == [tw.cluster.pk]

    later = tw.now + timedelta(seconds=600)  # now the limit is reached: its step runs, locked
    assert tick.run_tick(tw.cluster.pk, now=later).status == "ran"
    assert taken == [tw.cluster.pk] * 3
    assert Attempt.objects.filter(stop_reason=Attempt.EndReason.TIMEOUT).count() == 1
