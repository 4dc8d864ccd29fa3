"""The API's pagination: DRF's ``?limit=&offset=``, with a limit a database can take."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 2**63 - 1
"""The largest ``LIMIT`` SQLite and PostgreSQL hold (a signed 64-bit integer)."""


class FairwayLimitOffsetPagination(LimitOffsetPagination):
    """``?limit=`` above :data:`MAX_LIMIT` is read as :data:`MAX_LIMIT` (every row, as such a limit
    means): it reached the database as is, a 500 on SQLite ("datatype mismatch") and PostgreSQL
    (bigint out of range). ``offset`` needs no bound: one past the count answers an empty page
    before any query with it."""

    max_limit = MAX_LIMIT
