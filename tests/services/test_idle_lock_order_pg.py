"""The idle check's lock order (docs/locking.md): ``tell_idle`` racing cancels, exit reports, a
second check and a tick on PostgreSQL: no deadlock, and each idle attempt told once. Real threads,
each with its own connection; skipped on SQLite (one writer, no row locks)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from scheduler import idle, lifecycle, notify
from scheduler.models import Attempt, AttemptGPU, GpuMinuteSample, Workload, WorkloadEvent
from scheduler.services import do_cancel_workload, do_submit_workload
from scheduler.tick import run_tick
from tests.services.test_lock_order_pg import _race

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
]

N = 12


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    monkeypatch.setattr(notify, "request_tick_on_commit", lambda cluster_id: None)
    monkeypatch.setattr(notify, "push_hosts_on_commit", lambda host_ids: None)
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}


def test_idle_checks_racing_cancels_exits_and_a_tick(researcher, submit_kwargs, hosts, cluster):
    now = timezone.now()
    gpus = [g for h in ("a100-1", "a100-2") for g in hosts[h].gpus.order_by("index")][:N]
    attempts = []
    for i, gpu in enumerate(gpus):
        workload = do_submit_workload(researcher, **submit_kwargs(name=f"w{i}", gpu_count=1))
        attempt = Attempt.objects.create(
            workload=workload, number=1, host=gpu.host, allocated=True,
            placed_at=now - timedelta(hours=3), started_at=now - timedelta(hours=3),
        )  # fmt: skip
        AttemptGPU.objects.create(attempt=attempt, gpu=gpu)
        Workload.objects.filter(pk=workload.pk).update(state=Workload.State.RUNNING)
        attempts.append(attempt)
    minute = now.replace(second=0, microsecond=0)
    GpuMinuteSample.objects.bulk_create(
        GpuMinuteSample(gpu=g, minute=minute - timedelta(minutes=m), samples=1, utilization_samples=1)
        for g in gpus
        for m in range(150)
    )
    assert len(idle.idle_attempts()) == N

    jobs: list[tuple[str, Any]] = [("idle-1", idle.tell_idle), ("idle-2", idle.tell_idle)]
    for a in attempts[::2]:
        jobs.append((f"cancel-{a.pk}", lambda a=a: do_cancel_workload(researcher, a.workload)))
    for a in attempts[1::4]:
        jobs.append((f"exit-{a.pk}", lambda a=a: lifecycle.attempt_exited(a.host, a.pk, 0, 1.0)))
    jobs.append(("tick", lambda: run_tick(cluster.pk)))
    assert _race(jobs) == []

    told = Counter(WorkloadEvent.objects.filter(kind="idle").values_list("data__attempt_id", flat=True))
    assert told and max(told.values()) == 1  # once each, whichever check came first
    idle.tell_idle()
    told = Counter(WorkloadEvent.objects.filter(kind="idle").values_list("data__attempt_id", flat=True))
    assert max(told.values()) == 1
