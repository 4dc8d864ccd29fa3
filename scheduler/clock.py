"""The clock: asks for a tick of every cluster every ``TICK_INTERVAL_S`` and runs the sweeps (DESIGN.md §2).

It only sends messages; the work happens in a dramatiq worker. The embedded
``serve`` command runs it in a thread of the web process; in production run one
clock (``serve --with-clock``) per deployment: a second one only doubles the
requests, which the debounce and the per-cluster tick lock absorb.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

logger = logging.getLogger(__name__)

RETRY_MAX_S = 30.0
"""The longest wait between beats while the database or Redis cannot be reached (docs/deploy.md §4,
"The clock without its database"): the waits double from the interval up to this, never below the interval."""


def retry_delay(interval: float, failures: int) -> float:
    """Seconds before the next beat after ``failures`` (1, 2, ...) beats in a row found no database
    (or no Redis)."""
    return max(interval, min(interval * 2 ** (failures - 1), RETRY_MAX_S))


class Clock:
    """A thread that requests ticks every ``interval`` seconds and sweeps every ``sweep_interval`` seconds."""

    def __init__(self, interval: float | None = None, sweep_interval: float | None = None) -> None:
        self.interval = float(interval if interval is not None else settings.FAIRWAY["TICK_INTERVAL_S"])
        self.sweep_interval = float(sweep_interval if sweep_interval is not None else max(self.interval, 5.0))
        self._stop = threading.Event()
        self._next_estimate: dict[int, float] = {}
        self._rolled_up_hour: object = None
        self._next_prune = 0.0
        self._next_resend = 0.0
        self._next_idle = 0.0
        self._next_rollup = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> Clock:
        """Start the thread (daemon) and return self."""
        self._thread = threading.Thread(target=self._run, name="fairway-clock", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to stop and wait up to ``timeout`` seconds for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def beat(self, *, sweep: bool) -> int:
        """One beat: request a tick of every cluster (and the sweeps); returns the number of clusters."""
        from scheduler import tasks
        from scheduler.models import Cluster

        cluster_ids = list(Cluster.objects.values_list("pk", flat=True))
        now = time.monotonic()
        for cid in cluster_ids:
            tasks.request_tick(cid)
            if now >= self._next_estimate.get(cid, 0.0):
                self._next_estimate[cid] = now + tasks.estimate_every_s()
                tasks.request_estimates(cid)
        if sweep:
            tasks.sweep_hosts.send()
            tasks.start_timeouts.send()
            tasks.apply_share_boosts.send()
            if now >= self._next_prune:
                self._next_prune = now + tasks.PRUNE_METRICS_EVERY_S
                tasks.prune_gpu_metrics.send()
                tasks.prune_expired_tokens.send()
            if now >= self._next_idle and settings.FAIRWAY["IDLE_AFTER_S"] > 0:  # idle GPU alerts (scheduler.idle)
                self._next_idle = now + tasks.CHECK_IDLE_EVERY_S
                tasks.check_idle.send()
            if now >= self._next_resend:  # lost delayed messages (retries): tasks.resend_stale_notifications
                self._next_resend = now + tasks.RESEND_NOTIFICATIONS_EVERY_S
                tasks.resend_stale_notifications.send()
        hour = timezone.now().replace(minute=0, second=0, microsecond=0)
        # Right after each hour (and at start), and with the sweeps every ROLLUP_EVERY_S: the
        # roll-up writes only hours still missing, so asking again makes up one lost in a worker.
        # Marked asked only once sent: a send refused (Redis out) is tried at the next beat.
        periodic = sweep and now >= self._next_rollup
        if hour != self._rolled_up_hour or periodic:
            tasks.rollup_pyramid.send()
            self._rolled_up_hour = hour
            self._next_rollup = now + tasks.ROLLUP_EVERY_S
        return len(cluster_ids)

    def _run(self) -> None:
        from config.middleware import (
            database_unreachable,
            is_connection_shortage,
            is_lost_connection,
            is_redis_unreachable,
            redis_unreachable,
        )

        next_sweep = time.monotonic()
        failures = 0  # beats in a row that found no database, or no Redis
        down = ""  # which: "the database", "Redis"
        while not self._stop.is_set():
            began = time.monotonic()
            wait = self.interval
            try:
                close_old_connections()
                sweep = began >= next_sweep
                if sweep:
                    next_sweep = began + self.sweep_interval
                self.beat(sweep=sweep)
                if failures:
                    logger.info("%s is reachable again after %d failed beats", down, failures)
                failures = 0
            except Exception as exc:
                # one line, no traceback: nothing to fix here but the database (left49) or Redis,
                # the broker (small49), in the web's words
                if is_lost_connection(exc) or is_connection_shortage(exc):
                    down, words = "the database", database_unreachable(exc)
                elif is_redis_unreachable(exc):
                    down, words = "Redis", redis_unreachable(exc)
                else:
                    logger.exception("clock beat failed")
                    words = ""
                if words:
                    failures += 1
                    wait = retry_delay(self.interval, failures)
                    logger.warning("clock beat failed: %s; the clock tries again in %gs", words, wait)
            finally:
                connection.close()
            # a failed beat waits its whole delay (it may have waited the pool's timeout already)
            self._stop.wait(wait if failures else max(0.0, wait - (time.monotonic() - began)))
