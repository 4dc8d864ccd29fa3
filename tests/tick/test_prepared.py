"""The tick's fixed-shape reads compiled once per connection (``scheduler.prepared``, dbtick49):
each one run prepared returns what its queryset built and run as usual returns (``.plain``, the
oracle), a tick in a steady state compiles none of them again, and a query whose shape depends
on its values is never prepared (it runs plain)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.sql.compiler import SQLCompiler

from budgets.models import UsageEntry
from scheduler import prepared, snapshot, tick
from scheduler.models import GPU, Attempt, Host, Workload, WorkloadDependency
from scheduler.prepared import _PLAIN, Prepared
from scheduler.snapshot import load_snapshot
from scheduler.tick import run_tick

READS = (*snapshot.PREPARED, tick._STEPS_DUE, tick._CLUSTER_EXISTS)


def _world(tw):
    h1 = tw.host("h1", gpus=4, labels={"rack": "a"}, cpus=64, memory_bytes=2**36)
    h2 = tw.host("h2", gpus=2, drain_at=tw.now + timedelta(hours=1))
    tw.host("h3", gpus=2, state=Host.State.OFFLINE)
    GPU.objects.filter(host=h2, index=1).update(health=GPU.Health.UNHEALTHY)
    gpus = list(GPU.objects.filter(host=h1).order_by("index"))
    running = tw.workload(gpus=2, max_runtime_s=7200)
    tw.attempt(running, gpus[:2], started_ago=300)
    stopping = tw.workload(budget=tw.beta, gpus=1, min_runtime=0)
    tw.attempt(stopping, gpus[2:3], stop_requested_at=tw.now - timedelta(seconds=5), stop_reason="preempted")
    closed = tw.workload(gpus=1, state=Workload.State.SUCCEEDED)
    tw.attempt(closed, gpus[3:4], started_ago=900, ended_at=tw.now - timedelta(seconds=100))
    failed = tw.workload(state=Workload.State.FAILED)
    for n in range(3):
        w = tw.workload(gpus=1 + n, cpus=4 if n else None, pending_reason="resources", pending_detail={"n": n})
        if n == 1:
            WorkloadDependency.objects.create(workload=w, after=failed, condition=WorkloadDependency.Condition.OK)
    GPU.objects.filter(pk=gpus[3].pk).update(nominated_for=w)
    UsageEntry.objects.create(
        budget=tw.alpha,
        cluster=tw.cluster,
        start=tw.now - timedelta(hours=2),
        end=tw.now - timedelta(hours=1),
        gpus=2,
        gpu_seconds=7200,
    )


def _values(read: Prepared, tw):
    return tuple({int: tw.cluster.pk}.get(kind) or tw.now - timedelta(days=7) for kind in read.kinds)


@pytest.mark.parametrize("read", READS, ids=lambda r: r.name)
def test_each_prepared_read_returns_the_plain_querysets_rows(read, tw):
    _world(tw)
    prepared.forget()
    values = _values(read, tw)
    plain = read.plain(*values)
    assert read(*values) == plain
    assert read(*values) == plain  # the second run reuses the compiled statement
    from django.db import connection

    assert connection._fairway_prepared[read.name] is not _PLAIN, "its shape must not depend on its values"
    if read.kinds:  # another cluster and time: still the plain answer (not the first run's values)
        other = tuple(v + 1 if isinstance(v, int) else v + timedelta(days=6) for v in values)
        assert read(*other) == read.plain(*other)


def test_the_snapshot_is_the_same_read_prepared_or_plain(tw, monkeypatch):
    _world(tw)
    prepared.forget()
    fast = load_snapshot(tw.cluster.pk, tw.now)
    monkeypatch.setattr(Prepared, "__call__", Prepared.plain)
    snapshot.forget_kept()
    assert load_snapshot(tw.cluster.pk, tw.now) == fast


def test_a_steady_tick_compiles_none_of_its_fixed_reads_again(tw, pushed, monkeypatch):
    _world(tw)
    Workload.objects.update(max_runtime_s=None)  # no wall-time limit: no timeouts' reads (their own IN list)
    run_tick(tw.cluster.pk, tw.now)
    run_tick(tw.cluster.pk, tw.now)
    compiled: list[str] = []
    as_sql = SQLCompiler.as_sql

    def counting(self, *args, **kwargs):
        compiled.append(self.query.model.__name__)
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counting)
    run_tick(tw.cluster.pk, tw.now + timedelta(seconds=1))
    # only the open attempts' GPU rows (an ``IN`` list of their ids: its shape follows their number)
    assert compiled == ["AttemptGPU"], compiled


def test_a_query_whose_shape_follows_its_values_runs_plain(tw):
    prepared.forget()
    sliced = Prepared("test_sliced", (int,), lambda n: Attempt.objects.values_list("pk")[:n])
    listed = Prepared("test_listed", (int,), lambda n: Workload.objects.filter(pk__in=range(n)).values_list("pk"))
    unused = Prepared("test_unused", (int,), lambda n: Workload.objects.values_list("pk"))
    for read in (sliced, listed, unused):
        assert read(3) == read.plain(3)
        from django.db import connection

        assert connection._fairway_prepared[read.name] is _PLAIN
