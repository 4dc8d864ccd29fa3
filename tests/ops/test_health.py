"""``/livez`` and ``/readyz``: unauthenticated, cheap, and each readiness check can fail on its own."""

from __future__ import annotations

import time

import pytest

from scheduler import health, prom
from scheduler.models import Cluster
from scheduler.version import SERVER_VERSION


def forget_ticks() -> None:
    from scheduler.tasks import _redis

    if (client := _redis()) is not None:
        client.delete(prom.TICK_KEY)
    with prom._local_guard:
        prom._local_ticks.clear()


def tick_at(cluster_id: int, at: float) -> None:
    from scheduler.tasks import _redis

    value = f"0.01 {at:.3f}"
    if (client := _redis()) is not None:
        client.hset(prom.TICK_KEY, str(cluster_id), value)
    else:
        with prom._local_guard:
            prom._local_ticks[str(cluster_id)] = value


@pytest.fixture(autouse=True)
def _no_ticks(settings):
    settings.FAIRWAY_READYZ_CACHE_S = 0  # each request checks (the flood test keeps them)
    forget_ticks()
    yield
    forget_ticks()


def test_livez_needs_nothing(client):
    answer = client.get("/livez")  # no db fixture: any query would raise
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok", "version": SERVER_VERSION}
    assert "no-cache" in answer["Cache-Control"]


def test_readyz_ok_when_every_cluster_ticked(cluster, client):
    prom.record_tick(cluster.pk, 0.01)
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "redis", "migrations", "tick"}
    assert body["checks"]["redis"]["ok"] is True


def test_readyz_fails_when_a_cluster_has_not_ticked(cluster, client, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "TICK_INTERVAL_S": 5.0}
    Cluster.objects.filter(pk=cluster.pk).update(created_at=cluster.created_at.replace(year=2020))
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["checks"]["tick"] == {"ok": False, "detail": "no tick within 15 s: default (never)"}
    # a web probe leaves the tick out: a stopped worker does not stop the web UI
    assert client.get("/readyz?exclude=tick").status_code == 200
    # a stale tick fails too
    tick_at(cluster.pk, time.time() - 60)
    assert "default (60 s ago)" in client.get("/readyz").json()["checks"]["tick"]["detail"]


def test_a_new_cluster_is_not_yet_expected_to_tick(cluster, client):
    assert client.get("/readyz").status_code == 200


def test_readyz_reports_a_broken_dependency(cluster, client, monkeypatch):
    prom.record_tick(cluster.pk, 0.01)

    def broken() -> tuple[bool, str]:
        raise ConnectionError("connection refused")

    monkeypatch.setitem(health.CHECKS, "redis", broken)
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["checks"]["redis"] == {"ok": False, "detail": "ConnectionError: connection refused"}
    assert answer.json()["checks"]["database"]["ok"] is True


def test_readyz_reports_unapplied_migrations(cluster, client, monkeypatch):
    prom.record_tick(cluster.pk, 0.01)
    monkeypatch.setattr(health, "_migrated", False)

    class Plan:
        def __init__(self, connection):
            self.loader = type("L", (), {"graph": type("G", (), {"leaf_nodes": lambda self: []})()})()

        def migration_plan(self, targets):
            return [(type("M", (), {"app_label": "scheduler", "name": "0099_future"})(), False)]

    monkeypatch.setattr("django.db.migrations.executor.MigrationExecutor", Plan)
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["checks"]["migrations"] == {"ok": False, "detail": "1 unapplied: scheduler.0099_future"}


def test_readyz_unknown_check(client, db):
    assert client.get("/readyz?exclude=nope").status_code == 400


def test_probes_are_exempt_from_the_https_redirect():
    from django.conf import settings

    assert {r"^livez$", r"^readyz$", r"^metrics$"} <= set(settings.SECURE_REDIRECT_EXEMPT)


def test_anonymous_readyz_floods_cost_one_set_of_queries_per_interval(cluster, client, settings, monkeypatch):
    """sec41: every ``/readyz`` ran its checks (queries, a Redis PING), so an anonymous flood
    cost database work per request. Each process now keeps the checks' results
    ``FAIRWAY_READYZ_CACHE_S`` (1 s): N requests within the interval cost at most one set of
    queries, whatever N; the next interval checks again."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    prom.record_tick(cluster.pk, 0.01)
    now = [1000.0]
    monkeypatch.setattr(health, "clock", lambda: now[0])
    health.forget_recent()
    health.check_migrations()  # remembered once true: the steady state's queries from here
    settings.FAIRWAY_READYZ_CACHE_S = 1.0  # the default (the module's fixture sets 0)
    with CaptureQueriesContext(connection) as first:
        assert client.get("/readyz").status_code == 200
    assert len(first) >= 2  # SELECT 1 and the clusters
    with CaptureQueriesContext(connection) as flood:
        for _ in range(25):
            answer = client.get("/readyz")
            assert answer.status_code == 200 and answer.json()["checks"]["database"]["ok"] is True
        now[0] += 0.9
        assert client.get("/readyz").status_code == 200
    assert len(flood) == 0, [q["sql"] for q in flood]
    # another exclude set is another answer; the next interval checks again
    with CaptureQueriesContext(connection) as other:
        for _ in range(5):
            assert client.get("/readyz?exclude=tick").status_code == 200
    assert 0 < len(other) < len(first)
    now[0] += 0.2
    with CaptureQueriesContext(connection) as later:
        for _ in range(5):
            client.get("/readyz")
    assert len(later) == len(first)
    # a failure is seen within the interval too
    settings.FAIRWAY_READYZ_CACHE_S = 0
    monkeypatch.setitem(health.CHECKS, "redis", lambda: (False, "down"))
    assert client.get("/readyz").status_code == 503
