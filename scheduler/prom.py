"""Prometheus metrics at ``/metrics``: a collector that reads the database on each scrape.

Every family is one small aggregate query (GROUP BY over indexed columns, a bounded number of
rows), so a scrape costs the same at any size; the per-budget series cost one snapshot load per
cluster (``scheduler.reports.budget_standings``, the function behind the budgets page and
``/api/v1/budgets/tree/``: the same numbers, never recomputed here). The tick runs in dramatiq
workers, not in the web process that is scraped, so each tick's duration is written to Redis (a
hash keyed by cluster; in this process in the embedded mode) and read back here, and the
histograms (tick duration, submission and start latency, wait per budget) are Redis buckets
(``scheduler.histograms``).

Naming follows the Prometheus conventions (tests/ops/test_metrics_conventions.py checks them):
base units in the name (``_seconds``, ``_gpu_seconds``, ``_ratio`` for 0..1), counters end in
``_total``, one quantity per metric name (labels only split that quantity).

``FAIRWAY_METRICS_TOKEN`` set: the scrape must send ``Authorization: Bearer <token>``, and each
is collected afresh. Unset, anyone may scrape, so the exposition is kept
``FAIRWAY_METRICS_CACHE_S`` (5 s) per process (``health.METRICS``): an anonymous flood costs one
set of queries per interval, not one per request (sec41).
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from budgets.models import Budget
from fairway_cli.words import drain_only
from scheduler import health, histograms
from scheduler.models import Attempt, Cluster, Host, Workload
from scheduler.policy.types import PendingReason
from scheduler.reports import occupancy

TICK_KEY = "fairway:tick-seconds"
MAINTENANCE_REASON = "maintenance"
"""``fairway_pending_workloads``' reason of a pending ``reserved_for_other`` that a scheduled drain
alone keeps out (:func:`fairway_cli.words.drain_only`): "GPUs reserved for maintenance" in the
lists (list59); ``reserved_for_other`` counts the rest, kept out for another workload (left60)."""
PREEMPTION_REASONS = (
    Attempt.EndReason.PREEMPTED,
    Attempt.EndReason.DRAINED,
    Attempt.EndReason.GPU_FAULT,
    Attempt.EndReason.LOST,
)
PYRAMID_RATIOS = {
    "availability": "Available GPU-time / registered GPU-time, last rolled-up hour",
    "occupancy": "Occupied (allocated + unallocated) GPU-time / registered GPU-time, last rolled-up hour",
    "occupancy_allocated": "Allocated GPU-time / registered GPU-time, last rolled-up hour",
    "occupancy_unallocated": "Unallocated GPU-time / registered GPU-time, last rolled-up hour",
    "utilization": "Utilized GPU-time / registered GPU-time, last rolled-up hour"
    " (no sample when under half of the occupied GPU-time was measured: not measured)",
    "utilization_of_occupied": "Utilized GPU-time / occupied GPU-time, last rolled-up hour"
    " (no sample when under half of the occupied GPU-time was measured: not measured)",
    "impact": "Allocated GPU-time / occupied GPU-time, last rolled-up hour",
}
_local_ticks: dict[str, str] = {}
_local_guard = threading.Lock()


def record_tick(cluster_id: int, seconds: float) -> None:
    """Remember the duration of the last tick of ``cluster_id`` (called by the tick actor)."""
    from scheduler.tasks import _redis

    histograms.observe(histograms.TICK_DURATION, seconds, str(cluster_id))
    value = f"{seconds:.6f} {time.time():.3f}"
    client = _redis()
    if client is not None:
        client.hset(TICK_KEY, str(cluster_id), value)
        return
    with _local_guard:
        _local_ticks[str(cluster_id)] = value


def last_ticks() -> dict[int, tuple[float, float]]:
    """Cluster id → (seconds, epoch when recorded) of its last tick."""
    from scheduler.tasks import _redis

    client = _redis()
    if client is not None:
        raw = {k.decode(): v.decode() for k, v in client.hgetall(TICK_KEY).items()}
    else:
        with _local_guard:
            raw = dict(_local_ticks)
    out = {}
    for key, value in raw.items():
        try:
            seconds, at = value.split()
            out[int(key)] = (float(seconds), float(at))
        except ValueError:
            continue
    return out


class FairwayCollector(Collector):
    """Reads the database on collect(); registered on a fresh registry per scrape."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        names = dict(Cluster.objects.values_list("pk", "name"))

        from scheduler.version import PROTOCOL_VERSION, SERVER_VERSION

        info = GaugeMetricFamily(
            "fairway_build_info", "The Fairway release this server runs (value 1)", labels=["version", "protocol"]
        )
        info.add_metric([SERVER_VERSION, str(PROTOCOL_VERSION)], 1)
        yield info

        tick = GaugeMetricFamily(
            "fairway_tick_last_duration_seconds", "Duration of the last tick (seconds)", labels=["cluster"]
        )
        tick_at = GaugeMetricFamily(
            "fairway_tick_last_run_timestamp_seconds", "When the last tick ran (epoch)", labels=["cluster"]
        )
        for cid, (seconds, at) in sorted(last_ticks().items()):
            if cid in names:
                tick.add_metric([names[cid]], seconds)
                tick_at.add_metric([names[cid]], at)
        yield tick
        yield tick_at

        pending = GaugeMetricFamily(
            "fairway_pending_workloads", "Pending workloads by reason", labels=["cluster", "reason"]
        )
        # Of reason ``held``, those on a hold of their own, by kind (docs/jobs.md "Hold and
        # release"; brk47: the reason alone counts them with its budget's hold): the same query.
        own_holds = GaugeMetricFamily(
            "fairway_held_workloads",
            "Pending workloads of reason held on a hold of their own, by kind (the rest: their budget's hold)",
            labels=["cluster", "hold"],
        )
        by_reason: Counter[tuple[str, str]] = Counter()
        by_hold: Counter[tuple[str, str]] = Counter()
        rows = (
            Workload.objects.filter(state=Workload.State.PENDING)
            .values_list("cluster_id", "pending_reason", "hold")
            .annotate(n=Count("id"))
            .order_by()
        )
        for cid, reason, hold, n in rows:
            cluster = names.get(cid, str(cid))
            by_reason[cluster, reason or "not_yet_considered"] += n
            if reason == PendingReason.HELD and hold:
                by_hold[cluster, hold] += n
        # Of ``reserved_for_other``, those a scheduled drain alone keeps out: reason ``maintenance``,
        # "GPUs reserved for maintenance" in every list (list59, left60: a dashboard read a larger job).
        drained = Workload.objects.filter(
            state=Workload.State.PENDING,
            pending_reason=PendingReason.RESERVED_FOR_OTHER,
            pending_detail__has_key="drain",
        ).values_list("cluster_id", "pending_detail__drain", "pending_detail__reserved_for")
        for cid, drain, reserved_for in drained:
            if drain_only(PendingReason.RESERVED_FOR_OTHER, {"drain": drain, "reserved_for": reserved_for}):
                cluster = names.get(cid, str(cid))
                by_reason[cluster, PendingReason.RESERVED_FOR_OTHER] -= 1
                by_reason[cluster, MAINTENANCE_REASON] += 1
        for labels, n in sorted(by_reason.items()):
            if n:
                pending.add_metric(list(labels), n)
        for labels, n in sorted(by_hold.items()):
            own_holds.add_metric(list(labels), n)
        yield pending
        yield own_holds

        workloads = GaugeMetricFamily("fairway_workloads", "Live workloads by state", labels=["cluster", "state"])
        live = Workload.objects.exclude(state__in=Workload.FINAL_STATES)
        for cid, state, n in live.values_list("cluster_id", "state").annotate(n=Count("id")).order_by():
            workloads.add_metric([names.get(cid, str(cid)), state], n)
        yield workloads

        yield from self._gpus(names)

        hosts = GaugeMetricFamily("fairway_hosts", "Registered hosts by state", labels=["cluster", "state"])
        for cid, state, n in (
            Host.objects.filter(removed_at__isnull=True)
            .values_list("cluster_id", "state")
            .annotate(n=Count("id"))
            .order_by()
        ):
            hosts.add_metric([names.get(cid, str(cid)), state], n)
        yield hosts

        agents = GaugeMetricFamily(
            "fairway_connected_agents", "Hosts with a heartbeat within HOST_OFFLINE_AFTER_S", labels=["cluster"]
        )
        since = now - timedelta(seconds=settings.FAIRWAY["HOST_OFFLINE_AFTER_S"])
        connected = dict(
            Host.objects.filter(removed_at__isnull=True, last_heartbeat__gte=since)
            .values_list("cluster_id")
            .annotate(n=Count("id"))
            .order_by()
        )
        for cid, name in sorted(names.items(), key=lambda kv: kv[1]):
            agents.add_metric([name], connected.get(cid, 0))
        yield agents

        preempt = CounterMetricFamily(
            "fairway_preemptions",
            "Attempts stopped by the scheduler or the hosts (preempted, drained, gpu_fault, lost), by end reason",
            labels=["cluster", "reason"],
        )
        for cid, reason, n in (
            Attempt.objects.filter(end_reason__in=PREEMPTION_REASONS)
            .values_list("workload__cluster_id", "end_reason")
            .annotate(n=Count("id"))
            .order_by()
        ):
            preempt.add_metric([names.get(cid, str(cid)), reason], n)
        yield preempt

        yield from self._pyramid(names)
        from budgets.services import load_tree

        tree = load_tree()
        yield from self._budgets(tree)
        relabel = {
            "cluster": {str(cid): name for cid, name in names.items()},
            "budget": {str(bid): b.path for bid, b in tree.items()},
        }
        yield from histograms.families(relabel)

    def _budgets(self, tree: dict[int, Budget]) -> Iterator[Metric]:
        """Per budget: usage, committed usage, entitlement, ratio, pending workloads, running GPUs.

        Straight from ``budget_standings`` (hours × 3600 for base units); archived budgets left out.
        """
        from scheduler.reports import budget_standings

        labels = ["cluster", "budget"]
        usage = GaugeMetricFamily(
            "fairway_budget_usage_gpu_seconds",
            "Allocated GPU-time charged to the budget's subtree inside the lookback window",
            labels=labels,
        )
        committed = GaugeMetricFamily(
            "fairway_budget_committed_gpu_seconds",
            "Protection still ahead of the budget's running allocated attempts (GPU-seconds)",
            labels=labels,
        )
        entitlement = GaugeMetricFamily(
            "fairway_budget_entitlement_gpu_seconds",
            "The budget's entitlement over the lookback window: share × GPUs × window",
            labels=labels,
        )
        ratio = GaugeMetricFamily(
            "fairway_budget_usage_entitlement_ratio",
            "(usage + committed) / entitlement; absent for a budget without share",
            labels=labels,
        )
        pending = GaugeMetricFamily(
            "fairway_budget_pending_workloads", "Pending workloads of the budget's subtree", labels=labels
        )
        running = GaugeMetricFamily(
            "fairway_budget_running_gpus", "GPUs held by the budget's subtree's attempts", labels=labels
        )
        window = GaugeMetricFamily(
            "fairway_budget_window_seconds", "The lookback window of usage and entitlement", labels=["cluster"]
        )
        for cluster in Cluster.objects.order_by("name"):
            standing = budget_standings(cluster, tree)
            window.add_metric([standing.cluster], standing.window_s)
            for b in standing.budgets:
                if b.archived:
                    continue
                key = [standing.cluster, b.path]
                usage.add_metric(key, b.usage_gpu_hours * 3600)
                committed.add_metric(key, b.committed_gpu_hours * 3600)
                entitlement.add_metric(key, b.entitlement_gpu_hours * 3600)
                if b.ratio is not None:
                    ratio.add_metric(key, b.ratio)
                pending.add_metric(key, b.pending_workloads)
                running.add_metric(key, b.running_gpus)
        yield from (usage, committed, entitlement, ratio, pending, running, window)

    def _gpus(self, names: dict[int, str]) -> Iterator[Metric]:
        """GPUs by state as the API and the web pages count them (``reports.occupancy``, one source):
        allocated, unallocated (held), idle (free, schedulable), unavailable (free on a host not
        active, or unhealthy); and the free GPUs reporting unhealthy, a part of unavailable."""
        clusters = sorted(Cluster.objects.filter(pk__in=names), key=lambda c: c.name)
        gpus = GaugeMetricFamily("fairway_gpus", "Registered GPUs by state", labels=["cluster", "state"])
        unhealthy = GaugeMetricFamily(
            "fairway_unhealthy_gpus", "Free GPUs reporting unhealthy (counted as unavailable)", labels=["cluster"]
        )
        for occ in occupancy(clusters):
            for state in ("allocated", "unallocated", "idle", "unavailable"):
                gpus.add_metric([occ.cluster, state], getattr(occ, state))
            unhealthy.add_metric([occ.cluster], occ.unhealthy)
        yield gpus
        yield unhealthy

    def _pyramid(self, names: dict[int, str]) -> Iterator[Metric]:
        """The pyramid of the last rolled-up hour: one gauge per fraction (they have different
        denominators: registered GPU-time, or occupied GPU-time for ``*_of_occupied`` and impact)."""
        from scheduler.pyramid import Pyramid, latest_hour

        fams = {
            metric: GaugeMetricFamily(f"fairway_pyramid_{metric}_ratio", doc, labels=["cluster"])
            for metric, doc in PYRAMID_RATIOS.items()
        }
        hour = GaugeMetricFamily(
            "fairway_pyramid_hour_timestamp_seconds",
            "Start of the hour the pyramid gauges describe",
            labels=["cluster"],
        )
        for cid, row in sorted(latest_hour(list(names)).items()):
            p = Pyramid()
            p.add(row)
            for metric, value in p.fractions().items():
                # Not measured (imported history): no sample rather than a false 0.
                if metric in fams and value is not None:
                    fams[metric].add_metric([names[cid]], value)
            hour.add_metric([names[cid]], row.hour.timestamp())
        yield from fams.values()
        yield hour


def scrape_authorized(request: HttpRequest) -> bool:
    """Whether ``request`` may read monitoring details: anyone without ``FAIRWAY_METRICS_TOKEN``,
    else a request bearing it (``/metrics``; ``/readyz``'s check details)."""
    token = getattr(settings, "FAIRWAY_METRICS_TOKEN", "")
    if not token:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: Prometheus text format (bearer token when ``FAIRWAY_METRICS_TOKEN`` is set)."""
    if not scrape_authorized(request):
        response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # With a token only Prometheus gets here: always fresh. Without, anyone may scrape: one
    # exposition per FAIRWAY_METRICS_CACHE_S and process (sec41).
    open_to_anyone = not getattr(settings, "FAIRWAY_METRICS_TOKEN", "")
    body = health.METRICS.get("metrics", exposition) if open_to_anyone else exposition()
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def exposition() -> bytes:
    """The Prometheus text of a fresh collection (every family's queries)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairwayCollector())
    return generate_latest(registry)
