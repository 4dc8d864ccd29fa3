"""pool58: a connection PostgreSQL ended (a restart, a failover) is never used again, and the pool
finds all of its dead ones at once (config/settings.py CONN_HEALTH_CHECKS, config/dbpool.py).
The whole production layout through the same: tests/e2e/test_db_failover.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections

from tests.dbsessions import pool_of


def test_connections_are_health_checked_before_reuse() -> None:
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


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
