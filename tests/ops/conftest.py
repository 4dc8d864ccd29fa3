"""A small live world for the ops tests: budgets, workloads submitted, a real tick, starts confirmed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import User
from scheduler import histograms, lifecycle
from scheduler.models import Attempt, Cluster
from scheduler.prom import record_tick
from scheduler.pyramid import hour_of, rollup_hour
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


@pytest.fixture
def live_world(
    researcher: User,
    cluster: Cluster,
    submit_kwargs: Callable[..., dict[str, Any]],
    django_capture_on_commit_callbacks: Any,
) -> Cluster:
    """Three workloads submitted to nlp/olmo (two fit), one tick, both starts confirmed, an hour rolled up."""
    histograms.reset()
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(3):
            do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
        result = run_tick(cluster.pk)
        record_tick(cluster.pk, result.seconds)
        for attempt in Attempt.objects.filter(workload__cluster=cluster).select_related("host"):
            lifecycle.attempt_started(attempt.host, attempt.pk)
    now = timezone.now()
    rollup_hour(cluster, hour_of(now) - timedelta(hours=1), now)
    return cluster


def scrape_text(client: Client) -> str:
    """A fresh scrape (not the exposition a process keeps a few seconds without a token)."""
    from scheduler import health

    health.METRICS.forget()
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.content
    return answer.content.decode()
