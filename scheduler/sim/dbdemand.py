"""Load recorded demand from the database for the what-if (``manage.py simulate --from-db``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from scheduler.policy import GpuHealth, HostState
from scheduler.policy.pass_state import budgets_with_work
from scheduler.sim.simulate import SimulationError
from scheduler.sim.whatif import Demand, DemandJob


def actual_from_standing(result: dict[str, Any], cluster_name: str | None, since: timedelta, now: datetime) -> None:
    """Over the lookback window, the what-if's actual column (``result`` of ``whatif``) becomes the
    budgets' standing at ``now`` (``scheduler.reports.budget_standings``: the numbers of the budgets
    page, the API and the CLI), one computation of delivered, demand, entitlement and attainment;
    ``result["actual_is_standing"]`` says so. Other windows, or no single cluster: left as simulated.
    The admin what-if and ``manage.py simulate --from-db`` both call it (they disagreed: try32)."""
    from django.conf import settings

    from budgets.services import load_tree
    from scheduler.models import Cluster
    from scheduler.reports import budget_standings

    if since.total_seconds() != int(settings.FAIRWAY["LOOKBACK_WINDOW_S"]):
        return
    clusters = Cluster.objects.filter(name=cluster_name) if cluster_name else Cluster.objects.all()
    found = list(clusters[:2])
    if len(found) != 1:
        return
    standing = budget_standings(found[0], load_tree(), now)
    by_key = {str(b.budget_id): b for b in standing.budgets}
    for row in result["budgets"]:
        b = by_key.get(str(row["key"]))
        if b is None or row["actual"] is None:
            continue
        row["actual"].update(
            entitlement_gpu_h=b.entitlement_gpu_hours,
            demand_gpu_h=b.demand_gpu_hours,
            delivered_gpu_h=b.usage_gpu_hours,
            attainment=b.attainment,
        )
    result["actual_is_standing"] = True


def load_demand(cluster_name: str | None, since: timedelta, now: datetime) -> Demand:
    """Workloads of one cluster submitted in ``(now − since, now]``, their attempts, the hosts (all
    taken as active and healthy) and the budget tree with today's shares (caps and holds dropped)."""
    from scheduler.models import Cluster, Workload
    from scheduler.snapshot import epoch, load_snapshot

    clusters = list(Cluster.objects.order_by("name"))
    if cluster_name is not None:
        clusters = [c for c in clusters if c.name == cluster_name]
        if not clusters:
            raise SimulationError(f"no cluster named {cluster_name!r}")
    elif len(clusters) != 1:
        names = ", ".join(c.name for c in clusters) or "none"
        raise SimulationError(f"choose a cluster with --cluster (clusters: {names})")
    cluster = clusters[0]
    snap, _ = load_snapshot(cluster, now)
    hosts = [
        replace(h, state=HostState.ACTIVE, drain_now=False, gpu_health=dict.fromkeys(h.gpu_health, GpuHealth.HEALTHY))
        for h in snap.hosts
    ]
    budgets = [replace(b, hold=False, capped=False) for b in snap.budgets]
    lo = now - since
    t_now = epoch(now)
    jobs = []
    for w in Workload.objects.filter(cluster=cluster, submitted_at__gt=lo, submitted_at__lte=now).prefetch_related(
        "attempts"
    ):
        runs = tuple(
            sorted(
                (epoch(a.started_at), min(epoch(a.ended_at), t_now) if a.ended_at else t_now, a.allocated)
                for a in w.attempts.all()
                if a.started_at is not None and a.started_at <= now
            )
        )
        final = w.state in Workload.FINAL_STATES and w.finished_at is not None and w.finished_at <= now
        if final and not runs:
            continue  # canceled (or failed) before it ever ran: no work to replay
        jobs.append(
            DemandJob(
                id=w.pk,
                budget=str(w.budget_id),
                gpus=w.gpu_count,
                model=w.gpu_model,
                min_runtime=w.min_runtime_s,
                submitted_at=epoch(w.submitted_at),
                work_s=sum(e - s for s, e, _ in runs) if final else None,
                first_start=runs[0][0] if runs else None,
                finished_at=epoch(w.finished_at) if final else None,
                runs=runs,
            )
        )
    return Demand(
        since=epoch(lo), now=t_now, hosts=hosts, budgets=budgets, jobs=jobs, busy=frozenset(budgets_with_work(snap))
    )
