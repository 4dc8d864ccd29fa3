"""Health endpoints for load balancers, orchestrators and alerting (docs/deploy.md §10).

- ``GET /livez``: the process is up and serves requests. No database, no Redis: restart the
  process only when this fails.
- ``GET /readyz``: the process can do its job. Checks, each named in the JSON answer:
  ``database`` (a ``SELECT 1``), ``redis`` (``PING``; ``skipped`` in the embedded mode without
  ``REDIS_URL``), ``migrations`` (none unapplied; remembered once true, the code of a running
  process does not change) and ``tick`` (every cluster ticked within
  ``FAIRWAY_READYZ_TICK_INTERVALS`` × ``FAIRWAY_TICK_INTERVAL_S``; a cluster created more recently
  than that is not yet expected to have ticked). 200 when all pass, 503 otherwise.
  ``?exclude=tick`` (repeatable) leaves checks out: a web process's readiness probe should
  exclude ``tick`` (a stopped worker is not a reason to stop serving the web UI and the agents),
  alerting should not.

Both are unauthenticated, cheap (a few queries, no snapshot) and exempt from the HTTPS redirect.
``/readyz``'s results are kept ``FAIRWAY_READYZ_CACHE_S`` (1 s) per process and set of checks
(:class:`Recent`): a flood of anonymous probes costs one set of queries per interval, whatever
its rate (sec41: each request ran them).
With ``FAIRWAY_METRICS_TOKEN`` set, a ``/readyz`` without that bearer token reveals only check
names, pass or fail, and the release number: each check's ``detail`` (an exception's text, with
the database's or Redis's host and user; the names of late clusters) goes only to a request that
bears it, as ``/metrics`` does (brk41: every detail went to anyone).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from scheduler.version import SERVER_VERSION

logger = logging.getLogger(__name__)

DEFAULT_TICK_INTERVALS = 3.0
_migrated = False
clock = time.monotonic  # the kept answers' clock (tests move it)


class Recent:
    """The last answer of each key's computation, kept ``seconds()`` seconds from its start: one
    computation per key and interval in this process, whatever the request rate (a request that
    comes while one runs waits for it and shares its answer). 0 or less: computed every time."""

    def __init__(self, seconds: Callable[[], float]) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._kept: dict[object, tuple[float, float, Any]] = {}  # key: (start, end, answer)

    def get(self, key: object, compute: Callable[[], Any]) -> Any:
        ttl = self.seconds()
        if ttl <= 0:
            return compute()
        arrived = clock()
        with self._lock:
            kept = self._kept.get(key)
            now = clock()
            # fresh, or computed while this request waited for it (brk43: a computation longer than
            # the interval left every waiter a stale answer, and each computed again in turn)
            if kept is not None and (0 <= now - kept[0] < ttl or kept[1] >= arrived):
                return kept[2]
            value = compute()
            self._kept[key] = (now, clock(), value)
            return value

    def forget(self) -> None:
        with self._lock:
            self._kept.clear()


READY = Recent(lambda: float(getattr(settings, "FAIRWAY_READYZ_CACHE_S", 1.0)))
"""``/readyz``'s check results by the checks left out."""
METRICS = Recent(lambda: float(getattr(settings, "FAIRWAY_METRICS_CACHE_S", 5.0)))
"""``/metrics``'s exposition while no ``FAIRWAY_METRICS_TOKEN`` is set (:func:`scheduler.prom.metrics_view`)."""


def forget_recent() -> None:
    """Forget every kept answer (tests; a process's next request computes afresh)."""
    READY.forget()
    METRICS.forget()


def tick_intervals() -> float:
    return float(getattr(settings, "FAIRWAY_READYZ_TICK_INTERVALS", DEFAULT_TICK_INTERVALS))


def check_database() -> tuple[bool, str]:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return True, "ok"


def check_redis() -> tuple[bool, str]:
    if not settings.REDIS_URL:
        return True, "skipped (no REDIS_URL: embedded mode)"
    from scheduler.tasks import _redis

    client = _redis()
    assert client is not None  # noqa: S101 -- REDIS_URL is set
    client.ping()
    return True, "ok"


def check_migrations() -> tuple[bool, str]:
    global _migrated
    if _migrated:
        return True, "ok"
    from django.db.migrations.executor import MigrationExecutor

    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _backwards in plan[:5])
        return False, f"{len(plan)} unapplied: {names}{', …' if len(plan) > 5 else ''}"
    _migrated = True
    return True, "ok"


def check_tick() -> tuple[bool, str]:
    from scheduler.models import Cluster
    from scheduler.prom import last_ticks

    limit = tick_intervals() * float(settings.FAIRWAY["TICK_INTERVAL_S"])
    now = time.time()
    ticks = last_ticks()
    late = []
    for cid, name, created in Cluster.objects.values_list("pk", "name", "created_at"):
        at = ticks.get(cid, (0.0, None))[1]
        if at is None:
            if now - created.timestamp() > limit:
                late.append(f"{name} (never)")
        elif now - at > limit:
            late.append(f"{name} ({now - at:.0f} s ago)")
    if late:
        return False, f"no tick within {limit:g} s: " + ", ".join(sorted(late)[:10])
    return True, "ok"


CHECKS: dict[str, Callable[[], tuple[bool, str]]] = {
    "database": check_database,
    "redis": check_redis,
    "migrations": check_migrations,
    "tick": check_tick,
}


def run_checks(exclude: set[str] | frozenset[str] = frozenset()) -> tuple[bool, dict[str, Any]]:
    results: dict[str, Any] = {}
    ready = True
    for name, check in CHECKS.items():
        if name in exclude:
            continue
        try:
            ok, detail = check()
        except Exception as exc:  # a failing dependency is the answer, not an error
            logger.warning("readiness check %s failed", name, exc_info=True)
            ok, detail = False, f"{type(exc).__name__}: {str(exc)[:200]}"
        results[name] = {"ok": ok, "detail": detail}
        ready = ready and ok
    return ready, results


@never_cache
@require_GET
def livez(request: HttpRequest) -> JsonResponse:
    """``GET /livez``: 200 ``{"status": "ok", "version"}`` while the process serves requests."""
    return JsonResponse({"status": "ok", "version": SERVER_VERSION})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """``GET /readyz[?exclude=tick]``: 200 when every check passes, else 503; the checks in the body."""
    exclude = {part for value in request.GET.getlist("exclude") for part in value.split(",") if part}
    unknown = exclude - set(CHECKS)
    if unknown:
        return JsonResponse(
            {"detail": f"unknown check(s): {', '.join(sorted(unknown))}", "checks": sorted(CHECKS)}, status=400
        )
    from scheduler.prom import scrape_authorized  # here: scheduler.prom imports this module (its reports)

    ready, results = READY.get(frozenset(exclude), lambda: run_checks(exclude))
    if not scrape_authorized(request):
        results = {name: {"ok": result["ok"]} for name, result in results.items()}
    body = {"status": "ok" if ready else "unavailable", "version": SERVER_VERSION, "checks": results}
    return JsonResponse(body, status=200 if ready else 503)
