"""The tick as a whole: one per cluster at a time, bounded queries, and the real policy's contract."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from budgets.models import Budget, UsageEntry
from scheduler import tick
from scheduler.models import GPU, Attempt, Workload
from scheduler.policy import types as p
from scheduler.snapshot import load_snapshot
from scheduler.tick import run_tick


@pytest.mark.django_db(transaction=True)
def test_a_second_concurrent_tick_of_the_same_cluster_is_skipped(tw, monkeypatch, pushed):
    # Given a tick of c1 that is inside the policy (holding the cluster's lock)
    other = type(tw.cluster).objects.create(name="c2")
    inside, release = threading.Event(), threading.Event()
    real = tick.schedule

    def slow(snapshot: p.Snapshot) -> p.Decisions:
        if threading.current_thread().name == "first-tick":
            inside.set()
            assert release.wait(20)
        return real(snapshot)

    monkeypatch.setattr(tick, "schedule", slow)
    results: list[tick.TickResult] = []

    def first() -> None:
        try:
            results.append(run_tick(tw.cluster.pk))
        finally:
            connection.close()

    thread = threading.Thread(target=first, name="first-tick")
    thread.start()
    try:
        assert inside.wait(20)
        # When another tick of c1 starts, and one of c2
        second = run_tick(tw.cluster.pk)
        # (SQLite has one writer: clusters tick in parallel only on PostgreSQL)
        parallel = run_tick(other.pk) if connection.vendor == "postgresql" else None
    finally:
        release.set()
        thread.join(20)

    # Then c1's second tick is skipped at once, c2 ticks in parallel, and the first completes
    assert second.status == "skipped"
    assert parallel is None or parallel.status == "ran"
    assert [r.status for r in results] == ["ran"]


def _queries_of_a_tick(tw, pending: int) -> int:
    for _ in range(pending):
        tw.workload(gpus=1, min_runtime=600)
    with CaptureQueriesContext(connection) as ctx:
        result = run_tick(tw.cluster.pk, now=tw.now)
    assert result.status == "ran"
    Attempt.objects.all().delete()
    Workload.objects.all().delete()
    return len(ctx.captured_queries)


def test_tick_queries_do_not_grow_with_pending_workloads(tw, pushed):
    tw.host("h1", 2)
    tw.host("h2", 2)
    assert _queries_of_a_tick(tw, 10) == _queries_of_a_tick(tw, 100)


def test_snapshot_reads_the_cluster_in_a_fixed_number_of_queries(tw):
    # Given hosts, an archived budget, a running and a starting attempt, history and a nomination
    tw.host("h1", 2)
    tw.host("h2", 1, labels={"rack": "r1"})
    archived = Budget.objects.create(name="old", parent=tw.org, archived_at=tw.now)
    gpus = list(GPU.objects.order_by("host__name", "index"))
    done = tw.attempt(tw.workload(gpus=1), gpus[2:3], started_ago=500)
    Attempt.objects.filter(pk=done.pk).update(ended_at=tw.now - timedelta(seconds=400))
    done.gpu_links.update(open=False)
    running = tw.attempt(tw.workload(gpus=2), gpus[:2], started_ago=100)
    starting = tw.attempt(tw.workload(budget=tw.beta, gpus=1, min_runtime=0), gpus[2:], started_ago=None)
    Attempt.objects.filter(pk=starting.pk).update(stop_requested_at=tw.now)
    UsageEntry.objects.create(
        budget=archived,
        cluster=tw.cluster,
        start=tw.now - timedelta(hours=2),
        end=tw.now - timedelta(hours=1),
        gpus=4,
    )
    pending = tw.workload(gpus=1)
    GPU.objects.filter(pk=gpus[2].pk).update(nominated_for=pending)

    with CaptureQueriesContext(connection) as ctx:
        snap, index = load_snapshot(tw.cluster, tw.now)

    assert len(ctx.captured_queries) == 8
    now = int(tw.now.timestamp())
    assert snap.now == now and snap.window == 7 * 24 * 3600
    assert [(h.name, h.model, dict(h.gpu_health), dict(h.labels)) for h in snap.hosts] == [
        ("h1", "H100", {0: "healthy", 1: "healthy"}, {}),
        ("h2", "H100", {0: "healthy"}, {"rack": "r1"}),
    ]
    assert {b.key: (b.parent, b.archived) for b in snap.budgets} == {
        str(tw.org.pk): (None, False),
        str(tw.alpha.pk): (str(tw.org.pk), False),
        str(tw.beta.pk): (str(tw.org.pk), False),
        str(archived.pk): (str(tw.org.pk), True),
    }
    by_id = {a.id: a for a in snap.attempts}
    assert by_id[str(running.pk)].gpus == (("h1", 0), ("h1", 1))
    assert by_id[str(running.pk)].started_at == now - 100 and by_id[str(running.pk)].allocated
    assert by_id[str(starting.pk)].started_at is None and by_id[str(starting.pk)].stopping
    assert [w.id for w in snap.pending] == [str(pending.pk)]
    assert sorted((u.budget, u.end - u.start, u.gpus) for u in snap.usage) == sorted(
        [(str(tw.alpha.pk), 100, 1), (str(archived.pk), 3600, 4)]
    )
    assert snap.nominations == {str(pending.pk): (("h2", 0),)}
    assert index.host_id_by_name.keys() == {"h1", "h2"}


def test_the_snapshot_holds_its_own_clusters_open_attempts_only(tw):
    # Given c1 and c2 each running an attempt (the open attempts are read without a filter on the
    # cluster, which is kept in Python: lat32), and an attempt of c1 that ended
    tw.host("h1", 2)
    other = type(tw.cluster).objects.create(name="c2")
    theirs = tw.host("x1", 2)
    type(theirs).objects.filter(pk=theirs.pk).update(cluster=other)
    done = tw.attempt(tw.workload(gpus=1), list(GPU.objects.filter(host__name="h1"))[:1], started_ago=500)
    Attempt.objects.filter(pk=done.pk).update(ended_at=tw.now - timedelta(seconds=400))
    done.gpu_links.update(open=False)
    mine = tw.attempt(tw.workload(gpus=2), list(GPU.objects.filter(host__name="h1")), started_ago=100)
    foreign = tw.workload(gpus=2)
    Workload.objects.filter(pk=foreign.pk).update(cluster=other)
    tw.attempt(foreign, list(GPU.objects.filter(host__name="x1")), started_ago=100)

    with CaptureQueriesContext(connection) as ctx:
        snap, index = load_snapshot(tw.cluster, tw.now)

    assert [(a.id, a.gpus) for a in snap.attempts] == [(str(mine.pk), (("h1", 0), ("h1", 1)))]
    assert set(index.attempts) == {mine.pk}
    assert len(ctx.captured_queries) == 8
    # the two reads of open attempts join no workload filtered by cluster
    reads = [
        q["sql"]
        for q in ctx.captured_queries
        if 'ended_at" IS NULL' in q["sql"] or 'attempt_id" IN' in q["sql"] or 'attempt_id" = ANY(' in q["sql"]
    ]
    assert len(reads) == 2 and all("cluster_id" not in q.split(" WHERE ", 1)[1] for q in reads), reads


def test_a_protected_attempt_is_never_preempted(tw, pushed):
    # Given alpha (4 GPU-hours used) running an allocated attempt inside its minimum runtime on
    # the only host, and beta (nothing used: more deserving) waiting for the same GPUs
    tw.host("h1", 2)
    UsageEntry.objects.create(
        budget=tw.alpha,
        cluster=tw.cluster,
        start=tw.now - timedelta(hours=3),
        end=tw.now - timedelta(hours=1),
        gpus=2,
    )
    victim = tw.attempt(tw.workload(budget=tw.alpha, gpus=2, min_runtime=600), list(GPU.objects.all()), 100)
    waiting = tw.workload(budget=tw.beta, gpus=2, min_runtime=600)

    # When the tick runs inside the protection
    result = run_tick(tw.cluster.pk, now=tw.now)

    # Then nothing is stopped and beta's workload says it waits for protected work
    victim.refresh_from_db()
    waiting.refresh_from_db()
    assert result.stops == [] and victim.stop_requested_at is None
    assert waiting.state == Workload.State.PENDING and waiting.pending_reason == "protected_work"

    # And once the protection is over, the victim is preempted for it
    later = victim.protected_until + timedelta(seconds=1)
    result = run_tick(tw.cluster.pk, now=later)
    victim.refresh_from_db()
    assert result.stops == [victim.pk] and victim.stop_reason == "preempted"
    assert set(GPU.objects.values_list("nominated_for_id", flat=True)) == {waiting.pk}


def test_attempts_on_an_offline_host_are_charged_only_up_to_its_last_heartbeat(tw):
    host = tw.host("h1", 1, state="offline", state_before_offline="active")
    last = tw.now - timedelta(seconds=40)
    type(host).objects.filter(pk=host.pk).update(last_heartbeat=last)
    attempt = tw.attempt(tw.workload(gpus=1), list(GPU.objects.all()), started_ago=100)

    snap, _ = load_snapshot(tw.cluster, tw.now)

    (seen,) = snap.attempts
    assert seen.id == str(attempt.pk) and seen.charged_until == int(last.timestamp())
