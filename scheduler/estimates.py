"""Estimated starts and quotes on the live database (DESIGN.md §3.8).

The forward simulation itself is pure (:mod:`scheduler.sim.estimate`); this module reads the
snapshot, measures how many pending workloads carry an estimate and answers quotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

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


def store_estimates(cluster_id: int, now: datetime) -> int:
    """Store an estimated start on every pending workload of ``cluster_id`` (None: none within
    one window) from one forward simulation of the snapshot at ``now`` (§3.8); returns how many
    rows changed. A reservation the last tick stored (and the page shows) caps the estimate too.
    Safe to run twice: it only overwrites estimates."""
    from scheduler.sim.estimate import cap_by_reservations, estimate_starts
    from scheduler.snapshot import load_snapshot

    snap, _ = load_snapshot(cluster_id, now)
    found = estimate_starts(snap, grace=int(settings.FAIRWAY["GRACE_PERIOD_S"]), budget_s=10.0)
    rows = list(
        Workload.objects.filter(cluster_id=cluster_id, state=Workload.State.PENDING).only(
            "id", "estimated_start", "pending_detail"
        )
    )
    stored = {}
    for w in rows:
        reserved = (w.pending_detail or {}).get("reserved_start")
        if isinstance(reserved, int | float):
            stored[str(w.pk)] = int(reserved)
    found = cap_by_reservations(found, stored)
    changed = []
    for w in rows:
        at = found.get(str(w.pk))
        value = datetime.fromtimestamp(at, tz=UTC) if at is not None else None
        if w.estimated_start != value:
            w.estimated_start = value
            changed.append(w)
    Workload.objects.bulk_update(changed, ["estimated_start"], batch_size=500)
    return len(changed)
