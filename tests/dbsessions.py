"""Ending the test database's stray backends (the browser tests' servers) without breaking the pool."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def end_stray_sessions() -> None:
    """End every other backend of this process's test database (``test_..._<pid>``: no other
    process uses it), then close the connection pool if there is one (PostgreSQL's default,
    ``FAIRWAY_DB_POOL``): the pool's idle connections were among those ended (the pool's check
    would replace them at their next checkout, config/dbpool.py; a fresh pool costs nothing).
    The next query opens a fresh pool. Nothing to do on SQLite."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()  # pooled: given back to the pool, which is closed next
    connection.close_pool()  # without a pool: nothing


@contextmanager
def pool_of(min_size: int, max_size: int) -> Iterator[None]:
    """This test's connections through a pool of its own size (``min_size`` kept, at most
    ``max_size``), whatever ``FAIRWAY_DB_POOL`` says; the settings' pool again afterwards.
    PostgreSQL only: skips the test elsewhere."""
    with _pool_option({"min_size": min_size, "max_size": max_size, "timeout": 10}):
        yield


@contextmanager
def without_pool() -> Iterator[None]:
    """This test's connections without a pool (``FAIRWAY_DB_POOL=false``: one connection per unit
    of work), whatever ``FAIRWAY_DB_POOL`` says; the settings' pool again afterwards. PostgreSQL
    only: skips the test elsewhere."""
    with _pool_option(None):
        yield


@contextmanager
def _pool_option(pool: dict[str, float] | None) -> Iterator[None]:
    import pytest
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    options = connection.settings_dict["OPTIONS"]
    before = options.get("pool")
    connection.close()
    connection.close_pool()
    if pool is None:
        options.pop("pool", None)
    else:
        options["pool"] = pool
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()
        if before is None:
            options.pop("pool", None)
        else:
            options["pool"] = before
