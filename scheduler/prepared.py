"""Fixed-shape ORM queries compiled once per connection and run again with new values (dbtick49).

A tick on a small cluster spent about half its CPU in Django building SQL (``as_sql``,
``add_q``, ``build_filter``, ``values_list`` setup) for the same ten statements every tick,
whose only differences are a cluster pk and a time. A :class:`Prepared` query is the queryset
its ``build`` function makes (the plain reading, and its oracle: :meth:`Prepared.plain`,
compared by ``tests/tick/test_prepared.py``), compiled by Django once per database connection
(connections are per thread) into its SQL and parameters; each run puts the new values in their
parameters' places, executes that SQL on the connection's cursor and converts the rows with the
same compiler's converters (``SQLCompiler.results_iter``), as iterating the queryset would.

Where each value goes is found, not assumed: the queryset is compiled twice with two sets of
unlikely sentinel values, and it is used only if both compilations give the same SQL, every
sentinel lands in exactly one parameter, and every other parameter is the same in both (so
nothing in the SQL or its constants depends on the values). Otherwise, or if compiling raises,
the query runs plain every time. No SQL is written by hand: the statement is Django's own.
Values are ``int`` (passed as they are) or aware ``datetime`` (adapted as a ``DateTimeField``
lookup adapts it: ``connection.ops.adapt_datetimefield_value``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import QuerySet

_INT_SENTINELS = ((-1_730_145_701, -1_730_145_811, -1_730_145_907), (-1_840_256_113, -1_840_256_223, -1_840_256_331))
"""Unlikely values, within a 32-bit integer column's range (Django makes an out-of-range lookup empty)."""
_TIME_SENTINELS = (
    datetime(1901, 2, 3, 4, 5, 6, 789_001, tzinfo=UTC),
    datetime(1902, 3, 4, 5, 6, 7, 891_003, tzinfo=UTC),
)

_PLAIN = object()
"""A connection's entry for a query that could not be prepared: it runs plain."""


class Prepared:
    """``build(*values)``'s rows (a ``values_list`` queryset), built and compiled once per
    connection. ``kinds``: each value's type, ``int`` or ``datetime``."""

    def __init__(self, name: str, kinds: tuple[type, ...], build: Callable[..., QuerySet[Any]]) -> None:
        self.name = name
        self.kinds = kinds
        self.build = build
        self.attr = f"_fairway_prepared_{name}"

    def plain(self, *values: Any) -> list[tuple[Any, ...]]:
        """The queryset built and run as usual (the oracle)."""
        return list(self.build(*values))

    def __call__(self, *values: Any, using: str = "default") -> list[tuple[Any, ...]]:
        connection = connections[using]
        cache: dict[str, Any] | None = getattr(connection, "_fairway_prepared", None)
        if cache is None:
            cache = {}
            connection._fairway_prepared = cache  # type: ignore[attr-defined]
        entry = cache.get(self.name)
        if entry is None:
            entry = cache[self.name] = self._prepare(using)
        if entry is _PLAIN:
            return self.plain(*values)
        sql, params, slots, compiler = entry
        params = list(params)
        adapt = connection.ops.adapt_datetimefield_value
        for position, i in slots:
            value = values[i]
            params[position] = adapt(value) if self.kinds[i] is datetime else value
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return list(compiler.results_iter([rows], tuple_expected=True))

    def _sentinels(self, round_: int) -> list[Any]:
        ints = iter(_INT_SENTINELS[round_])
        return [
            _TIME_SENTINELS[round_] + timedelta(microseconds=i) if kind is datetime else next(ints)
            for i, kind in enumerate(self.kinds)
        ]

    def _prepare(self, using: str) -> Any:
        """(SQL, parameters, [(parameter position, value index)], compiler), or :data:`_PLAIN`."""
        connection = connections[using]
        adapt = connection.ops.adapt_datetimefield_value
        compiled = []
        try:
            for round_ in (0, 1):
                values = self._sentinels(round_)
                compiler = self.build(*values).query.get_compiler(using)
                sql, params = compiler.as_sql()
                marks = [adapt(v) if kind is datetime else v for v, kind in zip(values, self.kinds, strict=True)]
                compiled.append((sql, tuple(params), marks, compiler))
        except Exception:  # e.g. EmptyResultSet: nothing fixed to keep
            return _PLAIN
        (sql, params, marks, compiler), (sql2, params2, marks2, _c2) = compiled
        if sql != sql2 or len(params) != len(params2):
            return _PLAIN
        slots: list[tuple[int, int]] = []
        for position, (a, b) in enumerate(zip(params, params2, strict=True)):
            hits = [i for i, mark in enumerate(marks) if type(a) is type(mark) and a == mark]
            if hits:
                if len(hits) != 1 or b != marks2[hits[0]]:
                    return _PLAIN
                slots.append((position, hits[0]))
            elif a != b or type(a) is not type(b):
                return _PLAIN
        if sorted({i for _p, i in slots}) != list(range(len(self.kinds))):
            return _PLAIN  # a value used nowhere, or not as a parameter
        return sql, params, slots, compiler


def forget(using: str = "default") -> None:
    """Drop what ``using``'s connection of this thread prepared (tests)."""
    connection = connections[using]
    if hasattr(connection, "_fairway_prepared"):
        del connection._fairway_prepared
