"""Accounting like Slurm's sacct: per workload and per finished attempt, what it waited, ran and cost.

Per workload (the workloads list and detail, ``fairway ls`` / ``show``): ``submitted_at``,
``started_at`` (first agent-confirmed start), ``wait_s`` (submission to first start; to now while
it has never started, or to its end when it ended unstarted), ``elapsed_s`` (the run time of all
its attempts, the open one up to now), ``charged_gpu_hours`` (allocated GPU-time charged: closed
attempts' ``charged_gpu_seconds`` plus GPUs × run so far of an open funded attempt) and
``preemptions`` (attempts ended ``preempted``). Computed from annotations: no query per row.

Per finished attempt (``GET /api/v1/workloads/history/``, ``fairway history``): one query.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, Q, QuerySet, Sum
from django.utils import timezone

from scheduler.models import Attempt, Workload

_RUN = ExpressionWrapper(F("attempts__ended_at") - F("attempts__started_at"), output_field=DurationField())


def with_accounting(queryset: QuerySet[Workload]) -> QuerySet[Workload]:
    """``queryset`` annotated with what :func:`accounting` reads (aggregates over one join)."""
    closed = Q(attempts__ended_at__isnull=False, attempts__started_at__isnull=False)
    open_ = Q(attempts__ended_at__isnull=True, attempts__started_at__isnull=False)
    return queryset.annotate(
        acct_first_start=Min("attempts__started_at"),
        acct_closed_run=Sum(_RUN, filter=closed),
        acct_charged=Sum("attempts__charged_gpu_seconds", filter=Q(attempts__ended_at__isnull=False)),
        acct_open_start=Max("attempts__started_at", filter=open_),
        acct_open_funded=Max(
            "attempts__started_at", filter=open_ & Q(attempts__allocated=True, attempts__unfunded=False)
        ),
        acct_preemptions=Count("attempts", filter=Q(attempts__end_reason=Attempt.EndReason.PREEMPTED)),
    )


def as_never_started(w: Workload) -> Workload:
    """``w``, known to have no attempt yet (just submitted), given the annotations of
    :func:`with_accounting` without a query: nothing started, run or charged."""
    w.acct_first_start = w.acct_open_start = w.acct_open_funded = None  # type: ignore[attr-defined]
    w.acct_closed_run = w.acct_charged = None  # type: ignore[attr-defined]
    w.acct_preemptions = 0  # type: ignore[attr-defined]
    return w


def _seconds(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, timedelta):
        return max(0, int(value.total_seconds()))
    return max(0, int(value) // 1_000_000)  # a backend that returns microseconds


def accounting(w: Workload, now: datetime | None = None) -> dict[str, Any]:
    """The accounting fields of one workload annotated by :func:`with_accounting` (see the module)."""
    now = now or timezone.now()
    first = getattr(w, "acct_first_start", None)
    wait = first - w.submitted_at if first is not None else (w.finished_at or now) - w.submitted_at
    elapsed = _seconds(getattr(w, "acct_closed_run", None))
    open_start = getattr(w, "acct_open_start", None)
    if open_start is not None:
        elapsed += _seconds(now - open_start)
    charged = int(getattr(w, "acct_charged", None) or 0)
    funded = getattr(w, "acct_open_funded", None)
    if funded is not None:
        charged += w.gpu_count * _seconds(now - funded)
    return {
        "started_at": first,
        "wait_s": max(0, int(wait.total_seconds())),
        "elapsed_s": elapsed,
        "charged_gpu_hours": round(charged / 3600, 4),
        "charged_gpu_seconds": charged,
        "preemptions": int(getattr(w, "acct_preemptions", 0) or 0),
    }


def finished_attempts(since: datetime, budget_ids: set[int] | None = None, cluster: str | None = None) -> list[Attempt]:
    """Attempts that ended at or after ``since``, newest first, with their workload, owner, budget,
    cluster and host: one query. ``budget_ids`` restricts to those budgets (a subtree)."""
    qs = (
        Attempt.objects.filter(ended_at__isnull=False, ended_at__gte=since)
        .select_related("workload__owner", "workload__cluster", "host")
        .order_by("-ended_at", "-id")
    )
    if budget_ids is not None:
        qs = qs.filter(workload__budget_id__in=budget_ids)
    if cluster:
        qs = qs.filter(workload__cluster__name=cluster)
    return list(qs)
