"""The one error type that service functions raise, shared by every app.

A ``ServiceError`` carries a stable ``code``, the input ``field`` it concerns and a
message; ``problems`` lists every problem found (a submission reports all bad fields
at once). The API renders it as ``{"<field>": ["message"], "code": "<first code>"}``
(see ``config.api``); admin actions show the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FORBIDDEN = "forbidden"
"""The code of every 403 answer: a service's refusal, a view's, a permission class's (``config.api``)."""


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One refused input: a stable ``code``, the ``field`` it concerns (None: not one field), a message."""

    code: str
    field: str | None
    message: str


class ServiceError(Exception):
    """A refused state change. ``code``/``field``/``message`` describe the first problem,
    ``problems`` all of them; ``status`` is the HTTP status the API answers with (400 unless
    the subclass or caller says 403 forbidden, 404, 409 conflict)."""

    status = 400

    def __init__(
        self,
        code: str,
        field: str | None,
        message: str,
        *,
        more: Iterable[FieldProblem] = (),
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.message = message
        self.problems: list[FieldProblem] = [FieldProblem(code, field, message), *more]
        if status is not None:
            self.status = status

    @classmethod
    def from_problems(cls, problems: Sequence[FieldProblem]) -> ServiceError:
        """One error reporting every problem; the first one gives ``code`` and ``field``."""
        first, *rest = problems
        return cls(first.code, first.field, first.message, more=rest)
