"""The psycopg pool after a PostgreSQL restart: every idle connection found dead at once, not one by one.

With ``CONN_HEALTH_CHECKS`` (config/settings.py) Django builds each process's pool with
``check=ConnectionPool.check_connection``: a connection is checked as it is handed out and a dead
one replaced. But a restart, a failover or ``pg_terminate_backend`` ends every connection of the
pool at once, and psycopg_pool tries the next idle one after a backoff (0 s, then 1, 2, 4 s...):
a checkout in a process whose pool held n ended connections waited 2^(n-1) - 1 seconds (7 s for
4), and from 5 on past ``FAIRWAY_DB_POOL_TIMEOUT_S`` (10 s: a 503). Here the first dead connection
makes the pool check all its idle ones (``ConnectionPool.check``: dead ones replaced, live ones
kept), so the checkout's next try gets a live or fresh connection without waiting (pool58).
"""

from __future__ import annotations

from typing import Any


def check_and_purge(pool: Any) -> Any:
    """``pool``'s check: psycopg's own, and when it fails, the pool's idle connections checked too."""
    from psycopg_pool import ConnectionPool

    def check(conn: Any) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            pool.check()  # the server ended this one: a restart ended the others as well
            raise

    check.fairway_purges = True  # type: ignore[attr-defined]
    return check


def purge_on_first_dead_connection(*, connection: Any, **_kwargs: Any) -> None:
    """``connection_created`` receiver: gives the connection's pool :func:`check_and_purge` (once
    per pool; a pool closed and made again, as the tests do, gets it at its first checkout).

    Django passes psycopg's check itself (``check=ConnectionPool.check_connection``) and refuses
    another in ``OPTIONS["pool"]`` (a second ``check`` argument): the pool's check is replaced
    after it is made. Without ``CONN_HEALTH_CHECKS`` (no check) or without a pool: nothing."""
    if connection.vendor != "postgresql":
        return
    pool = connection.pool
    if pool is None or pool._check is None or getattr(pool._check, "fairway_purges", False):  # noqa: SLF001
        return
    pool._check = check_and_purge(pool)  # noqa: SLF001 -- psycopg_pool's check, pinned 3.3 (requirements.txt)
