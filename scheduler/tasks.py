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
from typing import Any

import dramatiq
import redis
from django.conf import settings

from config import redis_trip
from scheduler import lifecycle
from scheduler.tick import run_tick

logger = logging.getLogger(__name__)

QUEUE = "scheduler"
MARKER_TTL_S = 60.0
"""How long a "tick pending" marker lives at most (seconds): bounds the damage of a lost message."""

_local_markers: dict[tuple[str, int], float] = {}
_local_guard = threading.Lock()
TICK_MARKER = "tick-pending"
ESTIMATE_MARKER = "estimate-pending"
ESTIMATE_AGAIN = "estimate-again"
ESTIMATE_RECENT = "estimate-recent"
MARKERS = (TICK_MARKER, ESTIMATE_MARKER, ESTIMATE_AGAIN, ESTIMATE_RECENT)


@cache
def _redis() -> redis.Redis | None:
    return redis.Redis.from_url(settings.REDIS_URL, **settings.REDIS_CLIENT_TIMEOUTS) if settings.REDIS_URL else None


def _marker_key(cluster_id: int, kind: str = TICK_MARKER) -> str:
    return f"fairway:{kind}:{cluster_id}"


def _marker_set_args(
    cluster_id: int, kind: str = TICK_MARKER, ttl: float | None = None
) -> tuple[str, bytes, dict[str, Any]]:
    """The arguments of :func:`_set_marker`'s Redis ``SET`` (``NX``, expiring after ``ttl``)."""
    ttl = settings.FAIRWAY["TICK_DEBOUNCE_S"] + MARKER_TTL_S if ttl is None else ttl
    return _marker_key(cluster_id, kind), b"1", {"nx": True, "px": int(ttl * 1000)}


def _set_marker(cluster_id: int, kind: str = TICK_MARKER, ttl: float | None = None) -> bool:
    """Set the cluster's ``kind`` marker ("tick pending", "estimate pending"); True when it was
    not set (the caller sends the message)."""
    ttl = settings.FAIRWAY["TICK_DEBOUNCE_S"] + MARKER_TTL_S if ttl is None else ttl
    client = _redis()
    if client is not None:
        key, value, kw = _marker_set_args(cluster_id, kind, ttl)
        return bool(client.set(key, value, **kw))
    with _local_guard:
        now = time.monotonic()
        expires = _local_markers.get((kind, cluster_id))
        if expires is not None and expires > now:
            return False
        _local_markers[(kind, cluster_id)] = now + ttl
        return True


def _put_marker(cluster_id: int, kind: str, ttl: float) -> None:
    """Set the cluster's ``kind`` marker for ``ttl`` seconds, set or not before."""
    client = _redis()
    if client is not None:
        client.set(_marker_key(cluster_id, kind), b"1", px=max(1, int(ttl * 1000)))
        return
    with _local_guard:
        _local_markers[(kind, cluster_id)] = time.monotonic() + ttl


def _marker_left_s(cluster_id: int, kind: str) -> float:
    """Seconds the cluster's ``kind`` marker has left to live (0 when it is not set)."""
    client = _redis()
    if client is not None:
        left_ms = int(client.pttl(_marker_key(cluster_id, kind)))  # -2: no key, -1: no expiry (never set so)
        return max(0.0, left_ms / 1000)
    with _local_guard:
        expires = _local_markers.get((kind, cluster_id))
    return max(0.0, expires - time.monotonic()) if expires is not None else 0.0


def _take_marker(cluster_id: int, kind: str) -> bool:
    """Clear the cluster's ``kind`` marker; True when it was set."""
    client = _redis()
    if client is not None:
        return bool(client.delete(_marker_key(cluster_id, kind)))
    with _local_guard:
        expires = _local_markers.pop((kind, cluster_id), None)
        return expires is not None and expires > time.monotonic()


def _clear_marker(cluster_id: int, kind: str = TICK_MARKER) -> None:
    if kind == TICK_MARKER:
        _own_tick_until.pop(cluster_id, None)  # a tick begins here: the window of request_tick ends
    client = _redis()
    if client is not None:
        client.delete(_marker_key(cluster_id, kind))
        return
    with _local_guard:
        _local_markers.pop((kind, cluster_id), None)


_own_tick_until: dict[int, float] = {}
"""Cluster id → the ``time.monotonic()`` instant until which the tick message this process sent
last cannot have begun (its send instant + half the debounce delay): see :func:`request_tick`."""


def request_tick(cluster_id: int) -> bool | None:
    """Ask for a tick of ``cluster_id`` soon (debounced). Returns True when a tick message was sent,
    None when that is decided at the end of the request (``config.redis_trip``: the marker is asked
    with the request's other Redis writes, in one round trip).

    Call after commit (``scheduler.notify.request_tick_on_commit``) so the tick
    sees the change that asked for it.

    Within half of ``TICK_DEBOUNCE_S`` after this process's own successful set of the marker (the
    instant taken before the set), the marker is not even asked for (one Redis round trip per
    submission saved, issue 15): the message this process sent then is delayed by
    ``TICK_DEBOUNCE_S``, so it has not begun and its tick reads what committed before this call,
    which is all the marker would have bought (set, as it is until that tick begins, it sends no
    second message). Half: the worker compares the message's due instant, from this machine's
    clock, with its own, so clocks apart by less than half the delay keep the rule. The tick's own
    clearing of the marker in this process (the embedded mode) ends the window.
    """
    now = time.monotonic()
    if now < _own_tick_until.get(cluster_id, 0.0):
        return False
    client = _redis()
    if client is not None and redis_trip.deferring():
        # In a request (config.redis_trip): the marker's SET NX goes with the request's other
        # writes once its response is made, and the message when the marker was newly set.
        def then(results: list[object]) -> None:
            if isinstance(results[0], Exception):
                raise results[0]
            if results[0]:
                _send_tick(cluster_id, now)

        key, value, kw = _marker_set_args(cluster_id)
        redis_trip.defer(client, lambda pipe: pipe.set(key, value, **kw), then)
        return None
    if not _set_marker(cluster_id):
        return False
    _send_tick(cluster_id, now)
    return True


def _send_tick(cluster_id: int, asked_at: float) -> None:
    """The tick message of :func:`request_tick`, whose marker was newly set after ``asked_at``."""
    delay_ms = int(settings.FAIRWAY["TICK_DEBOUNCE_S"] * 1000)
    tick.send_with_options(args=(cluster_id,), delay=delay_ms or None)
    if delay_ms > 0:
        _own_tick_until[cluster_id] = asked_at + delay_ms / 2000


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def tick(cluster_id: int) -> None:
    """One scheduling tick of ``cluster_id`` (no retry: the clock asks again in seconds)."""
    _clear_marker(cluster_id)
    result = run_tick(cluster_id)
    if result.status == "skipped":
        # Another tick holds the cluster's lock: it may have read its snapshot before the change
        # that asked for this one. Ask again (debounced, one message at a time), rather than
        # leave that change to the clock's next interval.
        request_tick(cluster_id)
    elif result.status == "ran":
        from scheduler.prom import record_tick

        record_tick(result.cluster_id, result.seconds)
        if result.starts or result.stops or result.arrivals:
            # New arrivals, starts and stops move the estimates: ask now, not at the clock's
            # next interval (debounced, one run at a time: request_estimates).
            request_estimates(cluster_id)


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


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def apply_share_boosts() -> None:
    """Start and end the temporary shares that are due (``budgets.services.apply_due_boosts``; the
    clock asks with every sweep, so a boost takes effect within a sweep interval of its instant)."""
    from budgets.services import apply_due_boosts

    changed = apply_due_boosts()
    if changed:
        logger.info("temporary shares: %d started or ended", changed)


ROLLUP_EVERY_S = 300.0
"""The clock asks for :func:`rollup_pyramid` this often (seconds), besides right after each hour."""


@dramatiq.actor(queue_name=QUEUE, max_retries=3, time_limit=600_000)
def rollup_pyramid() -> None:
    """Every complete hour of the last day that has no ``ClusterHourlyMetrics`` row yet, the hour
    just ended included (``scheduler.pyramid.rollup_missing_hours``). Idempotent, so the clock asks
    every ``ROLLUP_EVERY_S``: an hour whose roll-up or retry was lost (a delayed message dropped
    with Redis) is written at the next request."""
    from scheduler.pyramid import rollup_missing_hours

    rollup_missing_hours()


def reset_debounce(cluster_ids: list[int] | None = None) -> None:
    """Forget "tick pending" markers (all local ones, or these clusters'): for tests and restarts."""
    client = _redis()
    with _local_guard:
        if cluster_ids is None:
            _local_markers.clear()
            _own_tick_until.clear()
        else:
            for cid in cluster_ids:
                _own_tick_until.pop(cid, None)
                for kind in MARKERS:
                    _local_markers.pop((kind, cid), None)
    if client is not None and cluster_ids:
        client.delete(*(_marker_key(c, k) for c in cluster_ids for k in MARKERS))


def estimate_every_s() -> float:
    """The clock asks for estimated start times at most this often (seconds) per cluster (DESIGN.md
    §3.8; ``FAIRWAY_ESTIMATE_INTERVAL_S``)."""
    return float(settings.FAIRWAY["ESTIMATE_INTERVAL_S"])


ESTIMATE_MARKER_TTL_S = 300.0
"""How long an "estimate pending" marker lives at most (seconds; a run is bounded to well under it).
A restarted estimates process does not wait it out: it forgets the markers as it boots
(:func:`forget_estimate_markers`)."""

ESTIMATES_QUEUE = "estimates"


def forget_estimate_markers() -> int:
    """Forget every cluster's "estimate pending" and "estimate again" markers; returns how many
    were set. Called as a worker that consumes the estimates queue boots
    (:class:`scheduler.worker_boot.ForgetEstimateMarkers`): the runs a stopped process held are
    gone, or were given back to Redis and run again (safe: a run only overwrites estimates), so a
    marker of theirs would only hold the clock's requests back for up to
    :data:`ESTIMATE_MARKER_TTL_S` (tryout45: estimates stopped 3-4 minutes after a restart). The
    "estimate recent" markers stay: the minimum gap still applies."""
    kinds = (ESTIMATE_MARKER, ESTIMATE_AGAIN)
    client = _redis()
    if client is not None:
        keys = [k for kind in kinds for k in client.scan_iter(match=f"fairway:{kind}:*", count=1000)]
        return int(client.delete(*keys)) if keys else 0
    with _local_guard:
        mine = [key for key in _local_markers if key[0] in kinds]
        for key in mine:
            del _local_markers[key]
    return len(mine)


def request_estimates(cluster_id: int, *, delay: bool = True) -> bool:
    """Ask for the estimated starts of ``cluster_id``: debounced and single flight.

    The clock asks every ``FAIRWAY_ESTIMATE_INTERVAL_S``; a tick that started or stopped work or
    gave a pending workload its first reason (new or requeued work) asks at once (:func:`tick`).
    One run per cluster is queued or running at a time (the "estimate pending" marker, cleared when the run ends), sent
    ``FAIRWAY_ESTIMATE_DEBOUNCE_S`` later so a burst of ticks costs one run; a request that
    arrives while a run is queued or running is not lost: it sets "estimate again" and that run
    asks once more as it ends, so work that arrived during a run is estimated by the next one.
    A run never begins sooner than ``FAIRWAY_ESTIMATE_MIN_GAP_S`` after the cluster's last run
    ended (the "estimate recent" marker the run leaves): under a stream of submissions every tick
    asks, and runs back to back would take a core (docs/estimates.md, "Cost").
    Estimates never pile up behind a slow run, so in the embedded mode, whose worker threads also
    run the ticks, they never crowd the ticks out. Returns True when a message was sent."""
    debounce = float(settings.FAIRWAY["ESTIMATE_DEBOUNCE_S"]) if delay else 0.0
    wait_s = max(debounce, _marker_left_s(cluster_id, ESTIMATE_RECENT))
    # The markers outlive the wait, however long the gap: else a second run could be queued.
    if not _set_marker(cluster_id, ESTIMATE_MARKER, ESTIMATE_MARKER_TTL_S + wait_s):
        _set_marker(cluster_id, ESTIMATE_AGAIN, ESTIMATE_MARKER_TTL_S + wait_s)
        return False
    estimate_starts.send_with_options(args=(cluster_id,), delay=int(wait_s * 1000) or None)
    return True


@dramatiq.actor(queue_name=ESTIMATES_QUEUE, max_retries=0, time_limit=120_000)
def estimate_starts(cluster_id: int) -> None:
    """Store an estimated start for every pending workload of ``cluster_id`` (None: none within W).

    Runs the policy forward in simulated time (``scheduler.sim.estimate``) on a
    snapshot; never takes the tick lock, so it cannot slow the tick. Safe to run
    twice: it only overwrites estimates.
    """
    from django.utils import timezone

    from scheduler.estimates import store_estimates

    try:
        store_estimates(cluster_id, timezone.now())
    finally:
        gap = float(settings.FAIRWAY["ESTIMATE_MIN_GAP_S"])
        if gap > 0:  # before the "pending" marker goes: no request may slip in without the gap
            _put_marker(cluster_id, ESTIMATE_RECENT, gap)
        _clear_marker(cluster_id, ESTIMATE_MARKER)
        if _take_marker(cluster_id, ESTIMATE_AGAIN):
            # No debounce: the requests that came during this run have waited for it already;
            # the minimum gap still applies.
            request_estimates(cluster_id, delay=False)


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


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def prune_expired_tokens() -> None:
    """Delete every expired API token (``accounts.auth.sweep_expired_tokens``), asked with the GPU
    metrics' prune: a login token of a laptop never used again goes too (tok46)."""
    from accounts.auth import sweep_expired_tokens

    deleted = sweep_expired_tokens()
    if deleted:
        logger.info("API tokens: deleted %d expired", deleted)


CHECK_IDLE_EVERY_S = 60.0
"""The clock asks for :func:`check_idle` this often (seconds): the samples it reads are per minute."""


@dramatiq.actor(queue_name=QUEUE, max_retries=0, time_limit=120_000)
def check_idle() -> None:
    """Tell the owners of newly idle attempts (``scheduler.idle.tell_idle``); no retry: the clock asks again."""
    from scheduler import idle

    idle.tell_idle()


RESEND_NOTIFICATIONS_EVERY_S = 300.0
"""The clock asks for :func:`resend_stale_notifications` this often (seconds)."""

STALE_NOTIFICATION_S = 1800.0
"""A notification still pending this long after it was written has lost its message: its
retries (``deliver_notification``: 5, backed off from 5 s, at most 600 s apart, 60 s each) end well
within it."""


def stale_notification_keys(now: float | None = None, limit: int = 500) -> list[str]:
    """The keys of the notifications still pending :data:`STALE_NOTIFICATION_S` after they were
    written, oldest first (at most ``limit``)."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Notification

    before = timezone.now() - timedelta(seconds=STALE_NOTIFICATION_S)
    pending = Notification.objects.filter(state=Notification.State.PENDING, created_at__lt=before)
    return list(pending.order_by("created_at", "pk").values_list("key", flat=True)[:limit])


@dramatiq.actor(queue_name="notifications", max_retries=0, time_limit=60_000)
def resend_stale_notifications() -> None:
    """Send ``deliver_notification`` again for every notification still pending long after it was
    written (:func:`stale_notification_keys`). A delayed message, as a retry's is, can be lost: on
    a Redis connection error dramatiq's consumer drops the delayed messages it holds in memory,
    while Redis keeps them in the worker's acknowledgement set, which is given back only once
    that worker has stopped sending heartbeats (docs/deploy.md, "Lost delayed messages").
    Idempotent: ``deliver`` locks the row and sends only a pending notification, at most
    ``MAX_TRIES`` times in all."""
    keys = stale_notification_keys()
    for key in keys:
        deliver_notification.send(key)
    if keys:
        logger.warning("notifications: sent %d stale pending notifications again", len(keys))
