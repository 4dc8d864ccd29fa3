"""The API's pagination: DRF's ``?limit=&offset=``, with a limit a database can take, and a
malformed value refused."""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
"""The most rows one page holds (sec63): ``?limit=`` above it is read as it (DRF's ``max_limit``:
clamped, not refused, so a client asking for more reads ``next`` as it would at any limit). An
unbounded limit let any user have every row of a list (every workload) in one answer."""

_DIGITS = re.compile(r"[0-9]{1,100}")
"""A ``limit`` or ``offset``: ASCII digits (``int()`` also reads ``1_0``, blanks and any script's
digits), few enough for ``int()``."""


def whole_number_problem(name: str, raw: str, least: int) -> str | None:
    """Why ``raw``, the query parameter ``name``, is not a whole number ``>= least`` (ASCII digits),
    or None. The one rule of the API's ``limit`` and ``offset`` and the web list's ``page``."""
    if not _DIGITS.fullmatch(raw) or int(raw) < least:
        return f"{name} is a whole number >= {least}."
    return None


class FairwayLimitOffsetPagination(LimitOffsetPagination):
    """``?limit=`` above :data:`MAX_LIMIT` is read as :data:`MAX_LIMIT` (1000 rows; the page's
    ``next`` leads on): unbounded, one request read every row of a list (sec63), and a limit past
    2**63 - 1 reached the database as is, a 500. ``offset`` needs no bound: one past the count
    answers an empty page before any query with it.

    A ``limit`` that is not a whole number ≥ 1, or an ``offset`` that is not one ≥ 0, is a 400
    ``invalid`` naming it (brk35): DRF read ``?limit=-5``, ``?limit=abc`` or ``?offset=x`` as if
    absent, so a client's mistake got the first 100 rows as its answer (a pager reading its
    ``offset`` wrong read page one for ever)."""

    max_limit = MAX_LIMIT

    def _number(self, request: Any, name: str, least: int) -> int | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        if problem := whole_number_problem(name, raw, least):
            raise ValidationError({name: [problem]}, code="invalid")
        return int(raw)

    def get_limit(self, request: Any) -> int | None:
        limit = self._number(request, self.limit_query_param, 1)
        return self.default_limit if limit is None else min(limit, self.max_limit)

    def get_offset(self, request: Any) -> int:
        return self._number(request, self.offset_query_param, 0) or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """DRF's two parameters, the limit's bound and default said (and in the schema's maximum)."""
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = (
                    f"Number of results to return per page: default {self.default_limit}, at most "
                    f"{self.max_limit} (a larger limit is read as {self.max_limit}; follow next)."
                )
                parameter["schema"] = {**parameter["schema"], "minimum": 1, "maximum": self.max_limit}
        return parameters
