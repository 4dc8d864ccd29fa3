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
    the subclass or caller says 403 forbidden, 404, 409 conflict); ``retry_after``, the seconds
    to wait before trying again where the refusal is for a moment (a 429's, a 503's: read by
    :func:`retry_after_s`), None where it does not say."""

    status = 400
    retry_after: int | None = None

    def __init__(
        self,
        code: str,
        field: str | None,
        message: str,
        *,
        more: Iterable[FieldProblem] = (),
        status: int | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.message = message
        self.problems: list[FieldProblem] = [FieldProblem(code, field, message), *more]
        if status is not None:
            self.status = status
        if retry_after is not None:
            self.retry_after = retry_after

    @classmethod
    def from_problems(cls, problems: Sequence[FieldProblem]) -> ServiceError:
        """One error reporting every problem; the first one gives ``code`` and ``field``."""
        first, *rest = problems
        return cls(first.code, first.field, first.message, more=rest)


def retry_after_s(exc: BaseException) -> int | None:
    """The seconds a refusal ``exc`` asks the client to wait before trying again, None where it
    says nothing: a :class:`ServiceError`'s ``retry_after``, DRF's ``Throttled``'s ``wait`` (its
    throttle's, rounded up by DRF). The one reading of them: the API's ``Retry-After`` header
    (``config.api.exception_handler``) and a websocket refusal's close reason
    (``scheduler.exec_session``, ws47) both say it."""
    seconds = getattr(exc, "retry_after", None) if isinstance(exc, ServiceError) else getattr(exc, "wait", None)
    return int(seconds) if seconds else None
