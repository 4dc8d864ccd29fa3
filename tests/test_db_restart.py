"""pool58: a connection PostgreSQL ended (a restart, a failover) is never used again, and the pool
finds all of its dead ones at once (config/settings.py CONN_HEALTH_CHECKS, config/dbpool.py).
db61: the same without the pool (``FAIRWAY_DB_POOL=false``).
The whole production layout through the same: tests/e2e/test_db_failover.py."""

from __future__ import annotations

import runpy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import connection, connections

from tests.dbsessions import pool_of, without_pool

SETTINGS = Path(__file__).resolve().parents[1] / "config" / "settings.py"


def test_connections_are_health_checked_before_reuse() -> None:
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


@pytest.mark.parametrize("off", ["false", "0", "no", "off"])
def test_fairway_db_pool_false_turns_the_pool_off(monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    """db61: ``FAIRWAY_DB_POOL=false`` (config/settings.py, run afresh): no pool options at all, a
    connection per unit of work (``CONN_MAX_AGE`` 0), each checked before reuse."""
    monkeypatch.setenv("DATABASE_URL", "postgres://fairway@db.example.org:5432/fairway")
    for name in ("FAIRWAY_DB_POOL_MAX_SIZE", "FAIRWAY_DB_POOL_MIN_SIZE", "FAIRWAY_WEB_SYNC_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAIRWAY_DB_POOL", off)
    pool_off = runpy.run_path(str(SETTINGS))
    database = pool_off["DATABASES"]["default"]
    assert "pool" not in database["OPTIONS"], database["OPTIONS"]
    assert database["OPTIONS"] == {"options": "-c jit=off"}
    assert (database["CONN_MAX_AGE"], database["CONN_HEALTH_CHECKS"]) == (0, True)
    assert pool_off["FAIRWAY_WEB_SYNC_THREADS"] == 8  # no pool to size the web threads by
    monkeypatch.setenv("FAIRWAY_DB_POOL", "true")
    pooled = runpy.run_path(str(SETTINGS))["DATABASES"]["default"]
    assert pooled["OPTIONS"]["pool"]["min_size"] == 1  # the default: on
    assert (pooled["CONN_MAX_AGE"], pooled["CONN_HEALTH_CHECKS"]) == (0, True)


def test_without_the_pool_the_next_unit_of_work_gets_a_live_connection(transactional_db: None) -> None:
    """db61: ``FAIRWAY_DB_POOL=false``: a connection PostgreSQL ended is not used again; the next
    request (Django's request signals, as the worker's and the clock's units of work) opens one."""
    with without_pool():
        # Given a request that used its connection
        request_started.send(sender=None)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            first = cursor.fetchone()[0]
        request_finished.send(sender=None)
        assert connection.pool is None
        # When PostgreSQL ends every session of the database
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ended_own = _end_own(connection)
        # Then the next request is answered on a fresh connection
        request_started.send(sender=None)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] not in (first, ended_own)
        request_finished.send(sender=None)


def _end_own(conn: Any) -> int:
    """Ends ``conn``'s own backend from another session (a restart ends it too); its pid."""
    pid = conn.connection.info.backend_pid
    db = conn.settings_dict
    params = {"dbname": db["NAME"], "user": db["USER"], "password": db["PASSWORD"], "host": db["HOST"]}
    with psycopg.connect(**params, port=db["PORT"] or None, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    time.sleep(0.2)  # the backend exits
    return int(pid)


@pytest.fixture
def pool_of_four(transactional_db: None) -> Iterator[None]:
    """This test's connections through a pool that keeps 4 (a busy process's), whatever
    ``FAIRWAY_DB_POOL`` says."""
    with pool_of(4, 4):
        yield


def _select_one_on_another_thread() -> tuple[Any, float]:
    """``SELECT 1`` on a thread of its own (a connection borrowed from the pool): the result or
    the error, and the seconds it took."""
    outcome: list[Any] = []

    def run() -> None:
        began = time.monotonic()
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT 1")
                outcome.append((cursor.fetchone()[0], time.monotonic() - began))
        except Exception as exc:  # noqa: BLE001 -- reported to the test
            outcome.append((exc, time.monotonic() - began))
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    return outcome[0]


def test_after_a_restart_the_pool_hands_out_a_live_connection_at_once(pool_of_four: None) -> None:
    # Given a pool holding 4 idle connections
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()  # given back: 4 idle
    connection.pool.wait(timeout=10)
    assert connection.pool.get_stats()["pool_available"] == 4
    # When PostgreSQL ends every one of them (what a restart or a failover does)
    db = connection.settings_dict
    params = {"dbname": db["NAME"], "user": db["USER"], "password": db["PASSWORD"], "host": db["HOST"]}
    with psycopg.connect(**params, port=db["PORT"] or None, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert len(ended) >= 4
    time.sleep(0.2)  # the backends exit
    # Then the next query gets a live connection, without waiting through the dead ones
    # (psycopg_pool's backoff between two failed checks, 0 s then 1, 2 s...: 7.6 s for the 4 before)
    result, took = _select_one_on_another_thread()
    assert result == 1
    assert took < 0.9, f"{took:.2f}s"
    # and so does this thread's next one
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone()[0] == 1
