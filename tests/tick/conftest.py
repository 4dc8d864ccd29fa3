"""Fixtures of the tick and lifecycle tests: a small cluster built straight from the models.

``tw`` ("tick world"): cluster ``c1`` with budget tree ``org → (alpha, beta)``, a
researcher, and factories for hosts, workloads and attempts.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from budgets.models import Budget
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload

_seq = itertools.count(1)


class TickWorld:
    def __init__(self) -> None:
        self.now = timezone.now().replace(microsecond=0)
        self.cluster = Cluster.objects.create(name="c1")
        self.org = Budget.objects.create(name="org", shares=1)
        self.alpha = Budget.objects.create(name="alpha", parent=self.org, shares=1)
        self.beta = Budget.objects.create(name="beta", parent=self.org, shares=1)
        from accounts.models import User

        self.user = User.objects.create_user("rita", password="x")  # noqa: S106 -- fixture

    def host(self, name: str = "h1", gpus: int = 2, model: str = "H100", **fields: Any) -> Host:
        host = Host.objects.create(
            cluster=self.cluster, name=name, token_hash=f"hash-{name}", last_heartbeat=self.now, **fields
        )
        GPU.objects.bulk_create([GPU(host=host, index=i, uuid=f"GPU-{name}-{i}", model=model) for i in range(gpus)])
        return host

    def workload(
        self,
        budget: Budget | None = None,
        gpus: int = 1,
        min_runtime: int = 3600,
        state: str = Workload.State.PENDING,
        submitted_at: datetime | None = None,
        **fields: Any,
    ) -> Workload:
        seq = next(_seq)
        return Workload.objects.create(
            name=f"w{seq}",
            owner=self.user,
            budget=budget or self.alpha,
            cluster=self.cluster,
            gpu_model="H100",
            gpu_count=gpus,
            command=["true"],
            env={"TOKEN": {"value": "s3cret", "secret": True}},
            min_runtime_s=min_runtime,
            submitted_at=submitted_at or self.now - timedelta(seconds=60),
            seq=seq + 10_000_000,
            state=state,
            **fields,
        )

    def attempt(
        self,
        workload: Workload,
        gpus: list[GPU],
        started_ago: int | None = 60,
        **fields: Any,
    ) -> Attempt:
        number = Attempt.objects.filter(workload=workload).count() + 1
        started = self.now - timedelta(seconds=started_ago) if started_ago is not None else None
        attempt = Attempt.objects.create(
            workload=workload,
            number=number,
            host=gpus[0].host,
            allocated=workload.min_runtime_s > 0,
            placed_at=(started or self.now) - timedelta(seconds=1),
            started_at=started,
            protected_until=started + timedelta(seconds=workload.min_runtime_s)
            if started and workload.min_runtime_s
            else None,
            **fields,
        )
        AttemptGPU.objects.bulk_create([AttemptGPU(attempt=attempt, gpu=g, open=True) for g in gpus])
        Workload.objects.filter(pk=workload.pk).update(
            state=Workload.State.RUNNING if started else Workload.State.STARTING
        )
        return attempt


@pytest.fixture
def tw(db: None) -> TickWorld:
    return TickWorld()


@pytest.fixture
def pushed(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Record gateway pushes instead of sending them."""
    calls: list[list[int]] = []
    from scheduler import gateway

    monkeypatch.setattr(gateway, "push_desired_state", lambda ids: calls.append(sorted(ids)))
    return calls


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record tick requests instead of sending them."""
    calls: list[int] = []
    from scheduler import tasks

    monkeypatch.setattr(tasks, "request_tick", lambda cid: calls.append(cid))
    return calls
