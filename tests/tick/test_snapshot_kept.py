"""The snapshot's kept pending workloads (``scheduler.snapshot._KeptPending``): a snapshot built
with what the last one kept equals one built from scratch, after random writes through the
service paths that change workloads, attempts, hosts and budgets (the oracle: ``forget_kept``
then ``load_snapshot``)."""

from __future__ import annotations

import contextlib
import random
from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.services import do_set_hold, do_set_shares
from scheduler import lifecycle
from scheduler.models import Attempt, Host, Workload
from scheduler.services import (
    do_cancel_workload,
    do_create_cluster,
    do_register_host,
    do_set_host_state,
    do_submit_workload,
)
from scheduler.snapshot import forget_kept, load_snapshot
from scheduler.tick import run_tick
from tests.conftest import connected


def _both(cluster_id, now):
    kept = load_snapshot(cluster_id, now)
    forget_kept()
    fresh = load_snapshot(cluster_id, now)
    return kept, fresh


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kept_snapshot_equals_one_built_from_scratch_after_random_writes(
    seed, org_tree, researcher, pushed, monkeypatch
):
    from scheduler import tasks

    monkeypatch.setattr(tasks, "request_tick", lambda cid: None)
    rng = random.Random(seed)
    cluster = do_create_cluster(f"kept-{seed}")
    hosts = [
        do_register_host(cluster, f"k{seed}h{n}", [(i, f"GPU-k{seed}h{n}-{i}", "H100", 80000) for i in range(4)])[0]
        for n in range(3)
    ]
    connected(*hosts)
    budgets = [org_tree["nlp/olmo"]]
    now = timezone.now()
    forget_kept()
    reused = 0

    def submit(**kw):
        return do_submit_workload(
            researcher,
            name=f"w{rng.randrange(10**6)}",
            budget=rng.choice(budgets),
            cluster=cluster,
            gpu_model="H100",
            gpu_count=rng.choice([1, 1, 2, 4]),
            image="",
            command=["true"],
            env={},
            min_runtime_s=rng.choice([0, 600, 3600]),
            **kw,
        )

    def open_attempt():
        rows = list(Attempt.objects.filter(workload__cluster=cluster, ended_at__isnull=True).order_by("pk"))
        return rng.choice(rows) if rows else None

    def step(kind: str) -> None:
        nonlocal now
        now += timedelta(seconds=rng.randrange(1, 120))
        if kind == "submit":
            submit(cpus=rng.choice([None, 4]), memory_bytes=rng.choice([None, 2**30]))
        elif kind == "submit_after":
            others = list(Workload.objects.filter(cluster=cluster).values_list("pk", flat=True))
            submit(after=[str(rng.choice(others))] if others else [])
        elif kind == "array":
            submit(array="0-2%1")
        elif kind == "cancel":
            live = list(Workload.objects.filter(cluster=cluster).exclude(state__in=Workload.FINAL_STATES))
            if live:
                do_cancel_workload(researcher, rng.choice(live))
        elif kind == "tick":
            run_tick(cluster.pk, now=now)
        elif kind == "started":
            attempt = open_attempt()
            if attempt is not None:
                lifecycle.attempt_started(attempt.host, attempt.wire_id, now=now)
        elif kind == "exited":
            attempt = open_attempt()
            if attempt is not None:
                lifecycle.attempt_exited(attempt.host, attempt.wire_id, rng.choice([0, 1, None]), now=now)
        elif kind == "host":
            host = Host.objects.get(pk=rng.choice(hosts).pk)
            do_set_host_state(None, host, rng.choice(["cordoned", "draining", "active", "active"]))
        elif kind == "hold":
            budget = org_tree["nlp/olmo"]
            budget.refresh_from_db()
            do_set_hold(budget, not budget.hold)
        elif kind == "shares":
            budget = org_tree[rng.choice(["nlp", "vision"])]
            budget.refresh_from_db()
            do_set_shares(None, budget, rng.randrange(1, 5))

    kinds = ["submit"] * 4 + ["submit_after", "array", "cancel", "tick", "tick", "started", "exited", "host"]
    kinds += ["hold", "shares"]
    previous = None
    for _ in range(60):
        step(rng.choice(kinds))
        (kept, kept_index), (fresh, fresh_index) = _both(cluster.pk, now)
        assert kept == fresh
        assert kept_index == fresh_index
        if previous is not None:
            ids = {id(w) for w in previous.pending}
            reused += sum(id(w) in ids for w in kept.pending)
        previous = fresh
    assert reused > 0  # the kept path ran, not only the one from scratch


def test_a_changed_reason_is_read_again_not_kept(tw, pushed):
    tw.host("h1", gpus=1)
    waiting = tw.workload(gpus=2)
    forget_kept()
    _snap, index = load_snapshot(tw.cluster, tw.now)
    assert index.pending_reason[waiting.pk] == ("", {})
    Workload.objects.filter(pk=waiting.pk).update(pending_reason="hardware", pending_detail={"gpus": 2})
    Workload.objects.filter(pk=waiting.pk).update(gpu_count=1)
    snap, index = load_snapshot(tw.cluster, tw.now)
    assert index.pending_reason[waiting.pk] == ("hardware", {"gpus": 2})
    assert [w.gpus for w in snap.pending] == [1]


def test_the_collector_is_paused_while_a_snapshot_is_built_and_resumed_after(tw, monkeypatch):
    import gc

    from scheduler import snapshot

    seen: list[bool] = []
    real = snapshot._load_snapshot
    monkeypatch.setattr(snapshot, "_load_snapshot", lambda *a, **kw: seen.append(gc.isenabled()) or real(*a, **kw))
    assert gc.isenabled()
    load_snapshot(tw.cluster, tw.now)
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:  # paused by someone else: left paused
        load_snapshot(tw.cluster, tw.now)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_tick_keeps_the_collector_paused_through_its_policy_and_apply(tw, pushed, monkeypatch):
    """run_tick: no collection between the snapshot and the writes (a full one walked the snapshot
    in the policy: 0.1–0.25 s at 19,152 pending); resumed after, and after a failure too."""
    import gc

    from scheduler import tick

    tw.host("h1", 2)
    tw.workload(gpus=1)
    tw.workload(gpus=4)
    seen: list[tuple[str, bool]] = []
    schedule, apply = tick.schedule, tick._apply
    monkeypatch.setattr(tick, "schedule", lambda s: seen.append(("policy", gc.isenabled())) or schedule(s))
    monkeypatch.setattr(tick, "_apply", lambda *a, **kw: seen.append(("apply", gc.isenabled())) or apply(*a, **kw))
    assert gc.isenabled()
    assert tick.run_tick(tw.cluster.pk, now=tw.now).starts
    assert seen == [("policy", False), ("apply", False)]
    assert gc.isenabled()

    def fails(_snapshot):
        raise RuntimeError("policy failed")

    monkeypatch.setattr(tick, "schedule", fails)
    with pytest.raises(RuntimeError, match="policy failed"):
        tick.run_tick(tw.cluster.pk, now=tw.now)
    assert gc.isenabled()


def _hardware_both(cluster_id, now):
    """The snapshot with the kept hardware, then one with every host and GPU row read (the oracle)."""
    from scheduler.snapshot import _hardware_plain, _load_snapshot

    kept = load_snapshot(cluster_id, now)
    fresh = _load_snapshot(cluster_id, now, str, _hardware_plain)
    return kept, fresh


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_kept_hardware_equals_every_row_read_after_random_writes(seed, org_tree, researcher, pushed, monkeypatch):
    """Hosts registered, relabelled, renamed, resized, drained, cordoned, drains scheduled, silent, removed; GPUs
    re-indexed, sick and well again, an inventory changed and approved; submissions, ticks (their
    nominations and host states), starts and exits: the snapshot that keeps the stable hardware
    between reads equals the one that reads every row."""
    from config.errors import ServiceError
    from scheduler import snapshot as snapshot_module
    from scheduler import tasks
    from scheduler.lifecycle import GpuReport, GpuSample
    from scheduler.models import GPU
    from scheduler.services import SubmissionError, do_remove_host

    monkeypatch.setattr(tasks, "request_tick", lambda cid: None)
    loads: list[int] = []
    real_stable = snapshot_module._stable_hardware
    monkeypatch.setattr(snapshot_module, "_stable_hardware", lambda *a: loads.append(1) or real_stable(*a))
    rng = random.Random(seed)
    cluster = do_create_cluster(f"hw-{seed}")
    other = do_create_cluster(f"hw-{seed}-other")
    made = [0]

    def register(where=None):
        made[0] += 1
        n = made[0]
        host = do_register_host(
            where or cluster,
            f"hw{seed}h{n}",
            [(i, f"GPU-hw{seed}h{n}-{i}", rng.choice(["H100"]), 80000) for i in range(rng.choice([1, 2, 4]))],
            labels=rng.choice([{}, {"rack": "a"}]),
        )[0]
        connected(host)
        return host

    for _ in range(3):
        register()
    register(other)
    now = timezone.now()

    def live_hosts():
        return list(Host.objects.filter(cluster=cluster, removed_at__isnull=True).order_by("pk"))

    def a_host():
        hosts = live_hosts()
        return rng.choice(hosts) if hosts else None

    def open_attempt():
        rows = list(Attempt.objects.filter(workload__cluster=cluster, ended_at__isnull=True).order_by("pk"))
        return rng.choice(rows) if rows else None

    def step(kind: str) -> None:
        nonlocal now
        now += timedelta(seconds=rng.randrange(1, 120))
        host = a_host()
        if kind == "register":
            register(rng.choice([cluster, cluster, other]))
        elif kind == "submit" and host is not None:
            with contextlib.suppress(SubmissionError):  # no host of that size left
                do_submit_workload(
                    researcher,
                    name=f"w{rng.randrange(10**6)}",
                    budget=org_tree["nlp/olmo"],
                    cluster=cluster,
                    gpu_model="H100",
                    gpu_count=rng.choice([1, 1, 2, 4]),
                    image="",
                    command=["true"],
                    env={},
                    min_runtime_s=rng.choice([0, 3600]),
                )
        elif kind == "tick":
            run_tick(cluster.pk, now=now)
        elif kind == "started":
            attempt = open_attempt()
            if attempt is not None:
                lifecycle.attempt_started(attempt.host, attempt.wire_id, now=now)
        elif kind == "exited":
            attempt = open_attempt()
            if attempt is not None:
                lifecycle.attempt_exited(attempt.host, attempt.wire_id, rng.choice([0, 1]), now=now)
        elif host is None:
            return
        elif kind == "state":
            state = rng.choice(["cordoned", "draining", "active", "active"])
            do_set_host_state(None, host, state, drain_now=state == "draining" and rng.random() < 0.5)
        elif kind == "schedule":  # a drain scheduled for later, or none (drain58: the policy reads it)
            Host.objects.filter(pk=host.pk).update(drain_at=rng.choice([None, now + timedelta(hours=1)]))
        elif kind == "relabel":
            if rng.random() < 0.5:
                Host.objects.filter(pk=host.pk).update(labels={"rack": rng.choice("abc")})
            else:
                host.labels = {"zone": rng.choice("xy")}
                host.save(update_fields=["labels"])
        elif kind == "rename":
            Host.objects.filter(pk=host.pk).update(name=f"{host.name}r")
        elif kind == "resize":
            Host.objects.filter(pk=host.pk).update(
                cpus=rng.choice([None, 32, 64]), memory_bytes=rng.choice([None, 2**36])
            )
        elif kind == "reindex":
            gpu = GPU.objects.filter(host=host).order_by("-index").first()
            if gpu is not None:
                GPU.objects.filter(pk=gpu.pk).update(index=gpu.index + 8)
        elif kind == "health":
            gpus = list(GPU.objects.filter(host=host).order_by("index"))
            samples = [
                GpuSample(index=g.index, health=rng.choice(["healthy", "healthy", "degraded", "unhealthy"]))
                for g in gpus
            ]
            lifecycle.record_heartbeat(host, samples, now=now)
        elif kind == "silent":  # the sweep takes it offline (charged up to its last heartbeat)
            Host.objects.filter(pk=host.pk).update(last_heartbeat=now - timedelta(hours=1))
            lifecycle.sweep_hosts(now=now)
        elif kind == "inventory":
            gpus = list(GPU.objects.registered().filter(host=host).order_by("index"))
            reports = [GpuReport(index=g.index, uuid=g.uuid, model=g.model) for g in gpus]
            if len(reports) > 1 and rng.random() < 0.5:  # one GPU fewer: approved, it leaves (left37)
                reports.pop()
            else:
                reports.append(GpuReport(index=len(gpus) + 20, uuid=f"GPU-new-{rng.randrange(10**9)}", model="H100"))
            lifecycle.host_hello(host, agent_version="1", gpus=reports, running=[], now=now)
            host.refresh_from_db()
            if host.pending_inventory is not None and rng.random() < 0.7:
                with contextlib.suppress(ServiceError):  # gpu_busy: the GPU to leave holds an attempt
                    lifecycle.do_approve_host_inventory(None, host)
        elif kind == "nominate":  # as a tick's nominations write them
            gpu = GPU.objects.filter(host=host).order_by("index").first()
            pending = list(Workload.objects.filter(cluster=cluster, state=Workload.State.PENDING).order_by("pk"))
            if gpu is not None:
                GPU.objects.filter(pk=gpu.pk).update(nominated_for=rng.choice([None, *pending]))
        elif kind == "remove" and not Attempt.objects.filter(gpu_links__gpu__host=host, ended_at__isnull=True).exists():
            do_remove_host(None, host)

    kinds = ["submit"] * 4 + ["tick"] * 3 + ["started", "exited", "state", "state", "schedule", "relabel", "rename"]
    kinds += ["resize", "reindex", "health", "health", "silent", "inventory", "nominate", "remove", "register"]
    for _ in range(70):
        step(rng.choice(kinds))
        (kept, kept_index), (fresh, fresh_index) = _hardware_both(cluster.pk, now)
        assert kept == fresh
        assert kept_index == fresh_index
    reads = len(loads)
    for _ in range(3):  # nothing written: the stable part is not read again
        _hardware_both(cluster.pk, now)
    assert len(loads) == reads
    assert reads < 70  # kept between some of the writes (those of no stable field)


def test_the_kept_hardware_reads_as_many_statements_as_every_row(tw, pushed, django_assert_num_queries):
    """Two statements for the hosts and GPUs either way: the full rows when the version changed,
    the volatile ones (hosts not active or draining now, GPUs not healthy or nominated) else."""
    from scheduler.snapshot import SnapshotIndex, _hardware_kept, _hardware_plain

    tw.host("h1", gpus=2)
    tw.host("h2", gpus=2)
    for read in (_hardware_plain, _hardware_kept, _hardware_kept):
        with django_assert_num_queries(2):
            read(tw.cluster.pk, SnapshotIndex(cluster_id=tw.cluster.pk))


def test_the_open_attempts_gpu_rows_are_read_with_one_array_parameter_on_postgresql(tw, pushed):
    """The snapshot reads its open attempts' GPU rows by their ids as one ``= ANY(%s)`` array on
    PostgreSQL (Django's ``__in`` compiles and adapts one placeholder per id: ~30 ms of CPU at 5,848
    open attempts), ``IN`` elsewhere; none at all when no attempt is open."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.models import AttemptGPU

    table = AttemptGPU._meta.db_table
    host = tw.host("h1", gpus=2)
    with CaptureQueriesContext(connection) as ctx:
        load_snapshot(tw.cluster, tw.now)
    assert not [q for q in ctx.captured_queries if f'FROM "{table}"' in q["sql"]]
    for gpu in host.gpus.order_by("index"):
        tw.attempt(tw.workload(gpus=1), gpus=[gpu])
    with CaptureQueriesContext(connection) as ctx:
        snap, _index = load_snapshot(tw.cluster, tw.now)
    (read,) = [q["sql"] for q in ctx.captured_queries if f'FROM "{table}"' in q["sql"]]
    if connection.vendor == "postgresql":
        assert "= ANY(" in read and " IN (" not in read, read
    else:
        assert " IN (" in read, read
    assert len(snap.attempts) == 2


def test_an_agents_hello_with_the_same_cpus_and_memory_keeps_the_hardware(tw, pushed, monkeypatch):
    """A reconnecting agent's hello rewrites its host's CPUs and memory only when they changed: the
    write forgets the hardware every process keeps (the tick's snapshot, submissions' checks)."""
    from scheduler import tasks
    from scheduler.hardware_memo import MEMO
    from scheduler.lifecycle import GpuReport

    monkeypatch.setattr(tasks, "request_tick", lambda cid: None)
    host = tw.host("h1", gpus=2)
    reports = [GpuReport(index=g.index, uuid=g.uuid, model=g.model) for g in host.gpus.order_by("index")]
    lifecycle.host_hello(host, agent_version="1", gpus=reports, running=[], cpus=32, memory=2**36, now=tw.now)
    token = MEMO.version()
    lifecycle.host_hello(host, agent_version="1", gpus=reports, running=[], cpus=32, memory=2**36, now=tw.now)
    assert MEMO.version() == token
    lifecycle.host_hello(host, agent_version="1", gpus=reports, running=[], cpus=64, memory=2**36, now=tw.now)
    assert MEMO.version() != token
    assert Host.objects.get(pk=host.pk).cpus == 64
