"""Estimated starts and quotes on the live database (DESIGN.md §3.8).

The forward simulation itself is pure (:mod:`scheduler.sim.estimate`); this module reads the
snapshot, measures how many pending workloads carry an estimate and answers quotes.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.models import Workload

NOT_ESTIMABLE = ("held", "budget_capped", "unschedulable", "dependency")
"""Reasons (§3.8) under which no estimate is expected: nothing starts them in the forward
simulation until a person or another workload acts."""


@dataclass(frozen=True)
class Coverage:
    """Pending allocated workloads that should carry an estimate, and how many do."""

    counted: int
    estimated: int

    @property
    def fraction(self) -> float | None:
        return self.estimated / self.counted if self.counted else None


def estimate_coverage(cluster_id: int | None = None) -> Coverage:
    """How many pending allocated workloads (``M > 0``) carry an estimated start, not counting
    those held, capped, unschedulable or waiting on a dependency (§3.8). One aggregate query."""
    from django.db.models import Count, Q

    qs = Workload.objects.filter(state=Workload.State.PENDING, min_runtime_s__gt=0).exclude(
        pending_reason__in=NOT_ESTIMABLE
    )
    if cluster_id is not None:
        qs = qs.filter(cluster_id=cluster_id)
    row = qs.aggregate(counted=Count("id"), estimated=Count("id", filter=Q(estimated_start__isnull=False)))
    return Coverage(row["counted"], row["estimated"])
