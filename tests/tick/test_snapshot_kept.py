"""The snapshot's kept pending workloads (``scheduler.snapshot._KeptPending``): a snapshot built
with what the last one kept equals one built from scratch, after random writes through the
service paths that change workloads, attempts, hosts and budgets (the oracle: ``forget_kept``
then ``load_snapshot``)."""

from __future__ import annotations

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
    monkeypatch.setattr(snapshot, "_load_snapshot", lambda *a: seen.append(gc.isenabled()) or real(*a))
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
