"""The web process under load: one thread hop per request, and overload answered 503.

``SyncChainASGIHandler``: Django's ASGI handler builds its middleware chain in async mode, and
every ``MiddlewareMixin`` middleware (sessions, CSRF, auth, messages, ...) then hops to the
sync thread and back for its ``process_request`` and again for its ``process_response``: about
15 hops through the one thread-sensitive executor per API request (measured), each a context
switch and a wait in the executor's queue under load. This handler builds the chain
synchronously, as under WSGI, and runs the whole request (signals and close included) in one
hop; an async view (the log
tail page, which waits for agents) still goes through Django's stock asynchronous handler
(``HttpDispatch``), so a slow agent never holds the process's one sync thread.

``InFlightLimit``: an ASGI middleware bounding the HTTP requests one process holds at once. A
request beyond ``FAIRWAY_WEB_MAX_IN_FLIGHT`` is answered at once with 503 + ``Retry-After``
(the API's error format, code ``overloaded``) instead of waiting in an unbounded queue until
the client or the proxy gives up; websockets (the agents) and ``/livez`` are never refused.
(uvicorn's own ``--limit-concurrency`` counts websockets too, so a web process holding its
agents would refuse all HTTP, and it sends no ``Retry-After``.)

``SyncThreadPool``: the threads those hops run on. Django's ``ASGIHandler.__call__`` enters a
fresh ``ThreadSensitiveContext()`` per request, i.e. a new single-thread executor, a new OS
thread started and joined for every request. ``SyncChainASGIHandler`` instead lends each request
one of at most ``FAIRWAY_WEB_SYNC_THREADS`` single-thread executors, reused, as a WSGI server
reuses its threads (``LentThreadContext``): all the request's thread-sensitive calls (the chain, a streaming body, its
close) still run on one thread, and a request beyond the pool waits for a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, resolve, set_script_prefix

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RETRY_AFTER_S = 1
OVERLOADED_BODY = json.dumps(
    {"detail": "The server is at capacity; retry after the Retry-After seconds.", "code": "overloaded"}
).encode()
NEVER_REFUSED = frozenset({"/livez"})


class SyncThreadPool:
    """At most ``size`` single-thread executors, created on demand and lent one per request.

    ``acquire`` (on an event loop) returns a free executor, or a new one while fewer than ``size``
    exist, or waits for one given back; ``release`` gives it back (from any loop or thread). A
    waiter cancelled after its executor was handed over passes it on.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.created = 0
        self._free: list[ThreadPoolExecutor] = []
        self._waiters: deque[asyncio.Future[ThreadPoolExecutor]] = deque()
        self._lock = threading.Lock()

    async def acquire(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._free:
                return self._free.pop()
            if self.created < self.size:
                self.created += 1
                return ThreadPoolExecutor(max_workers=1, thread_name_prefix="fairway-web")
            waiter: asyncio.Future[ThreadPoolExecutor] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())
            else:
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if not self._waiters:
                self._free.append(executor)
                return
            waiter = self._waiters.popleft()
        waiter.get_loop().call_soon_threadsafe(self._hand_over, waiter, executor)

    def _hand_over(self, waiter: asyncio.Future[ThreadPoolExecutor], executor: ThreadPoolExecutor) -> None:
        if waiter.done():  # cancelled meanwhile
            self.release(executor)
        else:
            waiter.set_result(executor)


class LentThreadContext(ThreadSensitiveContext):
    """Django's per-request ``ThreadSensitiveContext()``, on a lent executor instead of a new one.

    Inside it, the request's thread-sensitive calls run on ``executor`` (as asgiref's
    ``ThreadSensitiveContext(executor=...)`` would); at its exit the executor is only forgotten,
    not shut down (the pool lends it again). Unlike asgiref's ``executor=`` form, a task the
    request started that outlives it (e.g. a push scheduled on the loop from the request's thread)
    is not refused its thread-sensitive calls: as with Django's own context, asgiref gives it a
    new executor of its own (asgiref's ``SyncToAsync.context_to_thread_executor``, weakly keyed).
    """

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        super().__init__()
        self.lent = executor

    async def __aenter__(self) -> LentThreadContext:
        self.token = SyncToAsync.thread_sensitive_context.set(self)
        SyncToAsync.context_to_thread_executor[self] = self.lent
        return self

    async def __aexit__(self, exc: object, value: object, tb: object) -> None:
        if SyncToAsync.context_to_thread_executor.get(self) is self.lent:
            del SyncToAsync.context_to_thread_executor[self]
        if self.token is not None:
            SyncToAsync.thread_sensitive_context.reset(self.token)
            self.token = None


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler with a synchronous middleware chain, the whole request in one hop.

    Django's ``handle`` hops to the sync thread three times per request (``request_started``'s
    receivers, the request, and ``response.close()`` with ``request_finished``) and runs a second
    task listening for a disconnect it cannot act on (a synchronous view is not interrupted).
    Here one hop does all three, as a WSGI server's thread would: the response of a synchronous
    view is complete once ``get_response`` returns (DRF's is rendered by then), so it is closed,
    and its database connection given back to the pool, before it is sent. A streaming response
    is sent first and closed after, as Django does.
    """

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
        self.threads = SyncThreadPool(threads or settings.FAIRWAY_WEB_SYNC_THREADS)

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """As Django's, but on a lent thread of ``self.threads`` instead of a new one per request."""
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = await self.threads.acquire()
        try:
            async with LentThreadContext(executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.release(executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(self._serve, thread_sensitive=True)(scope, body_file)
            await self.send_response(response, send)
            if response.streaming:
                await sync_to_async(response.close, thread_sensitive=True)()
        finally:
            body_file.close()

    def _serve(self, scope: Scope, body_file: Any) -> HttpResponseBase:
        """On the sync thread: ``request_started``, the request, and (unless it streams) its close."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__  # noqa: SLF001 -- as Django's run_get_response
        if not response.streaming:
            response.close()  # request_finished: the connection goes back to the pool now
        return response


@lru_cache(maxsize=4096)
def is_async_view(path: str) -> bool:
    """True when ``path`` resolves to an ``async def`` view (Resolver404: False)."""
    try:
        match = resolve(path)
    except Resolver404:
        return False
    func = match.func
    return iscoroutinefunction(getattr(func, "view_class", func)) or iscoroutinefunction(func)


class HttpDispatch:
    """Synchronous views through ``SyncChainASGIHandler`` (one hop); ``async def`` views through
    Django's stock ``ASGIHandler`` (they run on the event loop, as Django intends)."""

    def __init__(self) -> None:
        self.sync_handler = SyncChainASGIHandler()
        self.async_handler = ASGIHandler()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        handler = self.async_handler if is_async_view(path) else self.sync_handler
        await handler(scope, receive, send)


class InFlightLimit:
    """At most ``limit`` HTTP requests in this process at once; beyond: 503 + ``Retry-After``."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0  # one event loop per process: no lock needed
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in NEVER_REFUSED:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            self.refused += 1
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"retry-after", str(RETRY_AFTER_S).encode()),
                        (b"content-length", str(len(OVERLOADED_BODY)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": OVERLOADED_BODY})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
