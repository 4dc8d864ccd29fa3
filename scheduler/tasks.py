"""Dramatiq actors of the scheduler: the tick, its debounced trigger, and the sweeps (DESIGN.md §2, §4).

Every actor takes ids, states its queue, retries and time limit, and is safe to
run twice: the tick is idempotent on a snapshot, the sweeps re-check each row
under a lock.

Debounce: :func:`request_tick` sets a per-cluster "tick pending" marker and, only
when the marker was not already set, sends :func:`tick` delayed by
``TICK_DEBOUNCE_S``; the tick clears the marker as it begins, so a burst of
submissions costs one tick and a request that arrives during a tick gets a new
one. The marker lives in Redis (``SET NX PX``) when ``REDIS_URL`` is set, so web
processes and workers share it, and in this process otherwise (the embedded
mode is one process). It expires on its own, so a lost message cannot stall the
cluster: the clock's next request sends a fresh tick.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import cache

import dramatiq
import redis
from django.conf import settings

from scheduler import lifecycle
from scheduler.tick import run_tick

logger = logging.getLogger(__name__)

QUEUE = "scheduler"
MARKER_TTL_S = 60.0
"""How long a "tick pending" marker lives at most (seconds): bounds the damage of a lost message."""

_local_markers: dict[int, float] = {}
_local_guard = threading.Lock()


@cache
def _redis() -> redis.Redis | None:
    return redis.Redis.from_url(settings.REDIS_URL) if settings.REDIS_URL else None


def _marker_key(cluster_id: int) -> str:
    return f"fairway:tick-pending:{cluster_id}"


def _set_marker(cluster_id: int) -> bool:
    """Set the cluster's "tick pending" marker; True when it was not set (the caller sends the tick)."""
    ttl = settings.FAIRWAY["TICK_DEBOUNCE_S"] + MARKER_TTL_S
    client = _redis()
    if client is not None:
        return bool(client.set(_marker_key(cluster_id), b"1", nx=True, px=int(ttl * 1000)))
    with _local_guard:
        now = time.monotonic()
        expires = _local_markers.get(cluster_id)
        if expires is not None and expires > now:
            return False
        _local_markers[cluster_id] = now + ttl
        return True


def _clear_marker(cluster_id: int) -> None:
    client = _redis()
    if client is not None:
        client.delete(_marker_key(cluster_id))
        return
    with _local_guard:
        _local_markers.pop(cluster_id, None)


def request_tick(cluster_id: int) -> bool:
    """Ask for a tick of ``cluster_id`` soon (debounced). Returns True when a tick message was sent.

    Call after commit (``scheduler.notify.request_tick_on_commit``) so the tick
    sees the change that asked for it.
    """
    if not _set_marker(cluster_id):
        return False
    delay_ms = int(settings.FAIRWAY["TICK_DEBOUNCE_S"] * 1000)
    tick.send_with_options(args=(cluster_id,), delay=delay_ms or None)
    return True


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def tick(cluster_id: int) -> None:
    """One scheduling tick of ``cluster_id`` (no retry: the clock asks again in seconds)."""
    _clear_marker(cluster_id)
    result = run_tick(cluster_id)
    if result.status == "ran":
        from scheduler.prom import record_tick

        record_tick(result.cluster_id, result.seconds)


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def sweep_hosts() -> None:
    """Offline and lost hosts (``lifecycle.sweep_hosts``)."""
    counts = lifecycle.sweep_hosts()
    if any(counts.values()):
        logger.info("host sweep: %s", counts)


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def start_timeouts() -> None:
    """Attempts never confirmed started (``lifecycle.start_timeouts``)."""
    ended = lifecycle.start_timeouts()
    if ended:
        logger.info("start timeouts: %d attempts failed to start", ended)


@dramatiq.actor(queue_name=QUEUE, max_retries=3, time_limit=600_000)
def rollup_pyramid() -> None:
    """The last complete hour of every cluster into ``ClusterHourlyMetrics`` (``scheduler.pyramid``)."""
    from scheduler.pyramid import rollup_previous_hour

    rollup_previous_hour()


def reset_debounce(cluster_ids: list[int] | None = None) -> None:
    """Forget "tick pending" markers (all local ones, or these clusters'): for tests and restarts."""
    client = _redis()
    with _local_guard:
        if cluster_ids is None:
            _local_markers.clear()
        else:
            for cid in cluster_ids:
                _local_markers.pop(cid, None)
    if client is not None and cluster_ids:
        client.delete(*(_marker_key(c) for c in cluster_ids))


ESTIMATE_EVERY_S = 60.0
"""The clock asks for estimated start times at most this often (seconds) per cluster (DESIGN.md §3.8)."""


@dramatiq.actor(queue_name="estimates", max_retries=0, time_limit=120_000)
def estimate_starts(cluster_id: int) -> None:
    """Store an estimated start for every pending workload of ``cluster_id`` (None: none within W).

    Runs the policy forward in simulated time (``scheduler.sim.estimate``) on a
    snapshot; never takes the tick lock, so it cannot slow the tick. Safe to run
    twice: it only overwrites estimates.
    """
    from datetime import UTC, datetime

    from django.utils import timezone

    from scheduler.models import Workload
    from scheduler.sim.estimate import estimate_starts as simulate
    from scheduler.snapshot import load_snapshot

    snap, _ = load_snapshot(cluster_id, timezone.now())
    found = simulate(snap, grace=int(settings.FAIRWAY["GRACE_PERIOD_S"]), budget_s=10.0)
    rows = list(
        Workload.objects.filter(cluster_id=cluster_id, state=Workload.State.PENDING).only("id", "estimated_start")
    )
    changed = []
    moved = []
    for w in rows:
        at = found.get(str(w.pk))
        value = datetime.fromtimestamp(at, tz=UTC) if at is not None else None
        if w.estimated_start != value:
            if (
                value is not None
                and w.estimated_start is not None
                and abs(value - w.estimated_start).total_seconds() > 3600
            ):
                moved.append((w, w.estimated_start, value))
            w.estimated_start = value
            changed.append(w)
    Workload.objects.bulk_update(changed, ["estimated_start"], batch_size=500)
    if moved:  # notifications: an estimated start moved by more than an hour (docs/jobs.md)
        from django.db import transaction

        from scheduler import notify
        from scheduler.models import WorkloadEvent

        with transaction.atomic():
            events = WorkloadEvent.objects.bulk_create(
                WorkloadEvent(
                    workload_id=w.pk,
                    at=timezone.now(),
                    kind="estimate_moved",
                    message=f"estimated start moved from {old:%Y-%m-%d %H:%M} to {new:%Y-%m-%d %H:%M} UTC",
                    data={"from": old.isoformat(), "to": new.isoformat()},
                )
                for w, old, new in moved
            )
            notify.events_on_commit(events)


@dramatiq.actor(queue_name="notifications", max_retries=5, min_backoff=5_000, max_backoff=600_000, time_limit=60_000)
def deliver_notification(key: str) -> None:
    """Send one notification (email or webhook) at most once; raises to be retried with backoff
    while it is not delivered (``scheduler.notifications.deliver``)."""
    from scheduler import notifications

    notifications.deliver(key)


PRUNE_METRICS_EVERY_S = 3600.0
"""The clock asks for pruning of old GPU minute samples this often (seconds)."""


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=600_000)
def prune_gpu_metrics() -> None:
    """Delete GPU minute samples older than ``FAIRWAY_GPU_METRICS_RETENTION_DAYS`` (``metrics.prune``)."""
    from scheduler import metrics

    deleted = metrics.prune()
    if deleted:
        logger.info("GPU metrics: pruned %d minute samples", deleted)
