"""One read per page: every query of a view sees the database as of one instant.

A page that shows one quantity twice (the dashboard's pending work under "My workloads" and under
"Occupancy", the budgets page's standing of several clusters) read the database at different
moments and, under a burst of submissions, showed two counts of the same thing (52 and 59, num42).
:func:`one_read` runs the reads in one transaction, on PostgreSQL at ``REPEATABLE READ``: its
first query takes the snapshot every later one reads (the default ``READ COMMITTED`` takes one per
statement). On SQLite a transaction's reads see one state already. The process's memos
(``config.memo``) use what they load there without keeping it: it is as old as the first query,
perhaps older than the version they read after it (brk43). Nested in a transaction begun
elsewhere, it is a savepoint of that one, which decided its own isolation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from config.memo import SNAPSHOT_READ

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def one_read(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """The queries inside read one snapshot of the database (see the module)."""
    connection = connections[using]
    outermost = not connection.in_atomic_block
    with transaction.atomic(using=using):
        snapshot = outermost and connection.vendor == "postgresql"
        if snapshot:
            with connection.cursor() as cursor:  # must come before the transaction's first query
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            # what the process's memos load here is as old as the first query: used, not kept (brk43)
            setattr(connection, SNAPSHOT_READ, True)
        try:
            yield
        finally:
            if snapshot:
                setattr(connection, SNAPSHOT_READ, False)


def one_read_view(view: F) -> F:
    """``view`` (a page that only reads) run inside :func:`one_read`, its template's queries included."""

    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with one_read():
            response = view(*args, **kwargs)
            render = getattr(response, "render", None)
            if callable(render) and not getattr(response, "is_rendered", True):
                response.render()  # a TemplateResponse would render after the transaction
            return response

    return wrapped  # type: ignore[return-value]
