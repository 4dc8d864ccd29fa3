"""A request's Redis writes that need no answer before its response, in one round trip (issue 15).

A submission wrote to Redis twice after its commit, a round trip each: the tick's "pending"
marker (``SET NX``, ``scheduler.tasks.request_tick``) and the submission histogram's increments
(``scheduler.histograms.observe_many``). Inside :func:`one_trip` (every request, through
:class:`OneRedisTripMiddleware`) such writes are :func:`defer`\\ red: their commands wait, and at
the block's end go in one redis-py pipeline per client (one round trip), each write then handed
the results of its own commands (in order; an error as its exception, ``raise_on_error=False``).
Outside a block (the workers, the clock, a shell) :func:`defer` sends at once, the same way.

What a write decides from its results (the tick's message, sent when its marker was newly set) is
decided when they come back; an exception raised there is raised again once every write has
had its results (the first one), as it was raised at the write before.

Redis unreachable at the end of a request (a restart, a failover; db61): its response was made and
its database work committed, so it is answered as made, and the failure is one warning line with
the request (a submission answered 500 after its commit read as refused and was sent again). What
failed is the tick's "pending" marker or message, or a histogram's increments: the clock asks
every cluster for a tick at its next beat (``scheduler.clock``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Add = Callable[[Any], None]
"""Puts a write's commands on a redis-py pipeline (nothing else: no I/O)."""
Then = Callable[[list[Any]], None]
"""Receives the results of the write's commands (an exception object for a failed one)."""

_state = threading.local()
logger = logging.getLogger(__name__)


def deferring() -> bool:
    """Whether this thread is inside a :func:`one_trip` block (writes wait for its end)."""
    return getattr(_state, "pending", None) is not None


def defer(client: Any, add: Add, then: Then | None = None) -> None:
    """``add``'s commands on ``client`` (a ``redis.Redis``) at the end of this thread's
    :func:`one_trip` block, or now when there is none; ``then`` gets their results."""
    pending: list[tuple[Any, Add, Then | None]] | None = getattr(_state, "pending", None)
    if pending is None:
        send([(client, add, then)])
    else:
        pending.append((client, add, then))


@contextmanager
def one_trip() -> Iterator[None]:
    """The :func:`defer`\\ red writes of the block in one round trip per client at its end (also
    when it raises). A block inside another is the outer block's."""
    if getattr(_state, "pending", None) is not None:
        yield
        return
    _state.pending = []
    try:
        yield
    finally:
        pending, _state.pending = _state.pending, None
        if pending:
            send(pending)


def send(writes: list[tuple[Any, Add, Then | None]]) -> None:
    """Each client's writes in one pipeline (no ``MULTI``: they are independent), then each
    ``then`` with its results; the first exception a ``then`` raised is raised after all ran."""
    clients: dict[int, tuple[Any, list[tuple[Add, Then | None]]]] = {}
    for client, add, then in writes:
        clients.setdefault(id(client), (client, []))[1].append((add, then))
    failed: BaseException | None = None
    for client, group in clients.values():
        pipe = client.pipeline(transaction=False)
        sizes = []
        for add, _then in group:
            before = len(pipe)
            add(pipe)
            sizes.append(len(pipe) - before)
        try:
            results: list[Any] = pipe.execute(raise_on_error=False)
        except Exception as exc:  # the connection: every command failed alike
            results = [exc] * sum(sizes)
        at = 0
        for (_add, then), size in zip(group, sizes, strict=True):
            mine, at = results[at : at + size], at + size
            if then is not None:
                try:
                    then(mine)
                except Exception as exc:
                    failed = failed or exc
    if failed is not None:
        raise failed


class OneRedisTripMiddleware:
    """Every request in :func:`one_trip`: its deferred Redis writes go together once the response
    is made."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        import redis.exceptions

        answer = None
        try:
            with one_trip():
                answer = self.get_response(request)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            if answer is None:  # not the trip's: a middleware's own (never, Django answers those)
                raise
            from config.middleware import redis_unreachable

            logger.warning(
                "%s %s answered %s, but its Redis writes failed: %s: its tick was not asked for; the"
                " clock asks again at its next beat",
                request.method,
                request.path,
                answer.status_code,
                redis_unreachable(exc),
            )
        return answer
