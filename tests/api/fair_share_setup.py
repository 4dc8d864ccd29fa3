"""One cluster state for the why-pending tests: vision/sam runs two 8-GPU workloads on the A100s,
nlp/olmo has a day of 20 GPUs of usage this week, so an 8-GPU olmo workload waits (``fair_share``:
rule 2 forbids taking vision's work)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from budgets.models import UsageEntry
from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def vision_runs_while_olmo_has_used_more(
    outsider: Any,
    cluster: Any,
    org_tree: dict[str, Any],
    submit_kwargs: Callable[..., dict[str, Any]],
    *,
    started: bool,
) -> list[Workload]:
    """Write olmo's usage, submit vision's two workloads and tick them onto the A100s; ``started``:
    the agent confirms them (protected until ``M`` after), else they stay starting. Call inside
    ``django_capture_on_commit_callbacks(execute=True)``; returns vision's workloads."""
    now = timezone.now()
    UsageEntry.objects.create(
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        start=now - timedelta(days=2),
        end=now - timedelta(days=1),
        gpus=20,
    )
    rivals = [
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8)) for _ in range(2)
    ]
    run_tick(cluster.pk)
    if started:
        for attempt in Attempt.objects.filter(workload__cluster=cluster).select_related("host"):
            lifecycle.attempt_started(attempt.host, attempt.pk)
    return rivals


def olmo_waits_for_visions_protection(
    researcher: Any,
    outsider: Any,
    cluster: Any,
    org_tree: dict[str, Any],
    submit_kwargs: Callable[..., dict[str, Any]],
    now: datetime | None = None,
) -> Workload:
    """vision/sam holds both A100 hosts with work started 50 minutes before ``now`` (default: the
    present; M = 1 h, protected 10 more minutes); nlp/olmo, further below its share, submits an
    8-GPU workload that waits with a reservation for that protection's end (``protected_work``).
    No estimate run yet."""
    now = now or timezone.now()
    for _ in range(2):
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8))
    run_tick(cluster.pk)
    for a in Attempt.objects.select_related("host"):
        assert lifecycle.attempt_started(a.host, a.pk, now=now - timedelta(minutes=50))
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    return waiting
