"""The browser tests end their servers' stray backends (``tests.dbsessions``); with the connection
pool on (PostgreSQL's default) that also ended the pool's idle connections, and ~110 later tests
failed with "terminating connection due to administrator command" (make test ran with the pool off)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from tests.dbsessions import end_stray_sessions, pool_of


@pytest.fixture
def pooled(transactional_db: None) -> Iterator[None]:
    """This test's connection through a pool of two, whatever ``FAIRWAY_DB_POOL`` says."""
    with pool_of(2, 4):
        yield


def _select_one_on_another_thread() -> Any:
    """``SELECT 1`` on a thread of its own (a connection borrowed from the pool); the result or the error."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT 1")
                outcome.append(cursor.fetchone()[0])
        except Exception as exc:  # noqa: BLE001 -- reported to the test
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return outcome[0]


def test_the_pool_serves_fresh_connections_after_stray_sessions_are_ended(pooled: None) -> None:
    # Given a pool with an idle connection beside the one this thread holds
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.pool.wait(timeout=10)  # min_size reached: one idle
    assert connection.pool.get_stats()["pool_available"] >= 1
    # When the browser tests' teardown ends every other backend of the test database
    end_stray_sessions()
    # Then this thread and another one still query
    assert _select_one_on_another_thread() == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone()[0] == 1
