"""Input guards that run before any view, session or CSRF check reads the request.

* A NUL character in the path: 404 (no name of anything can hold one; PostgreSQL cannot even
  compare text holding NUL, so a lookup would fail with a 500).
* A NUL character in a query parameter: 400 ``null_characters_not_allowed``.
* A body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (by its ``Content-Length``): 413
  ``too_large``, before anything reads it.

``DatabaseBusyMiddleware``: a view that could not get a database connection (the process's pool
stayed empty for ``FAIRWAY_DB_POOL_TIMEOUT_S``, or PostgreSQL refused one: "too many clients")
is answered 503 + ``Retry-After`` (code ``database_busy``), never 500: the request changed nothing.
One whose connection PostgreSQL ended or could not be reached (a restart, a failover,
``pg_terminate_backend``; db61: was a 500) is answered 503 + ``Retry-After``, code
``database_unavailable``, logged once with the request (its transaction was rolled back, but a
commit under way may have been applied: docs/deploy.md, "PostgreSQL restarts and failovers").
The same answers where a middleware met it, before or after the view (a session read or saved;
ws63: was a 500): Django answers those through ``handler500``, :func:`server_error` here.
:func:`database_refusal` gives their code and words to the websockets (``scheduler.exec_session``).

Under ``/api/`` the answers use the API's one error format (``config.api``); elsewhere the
plain pages (404 page, 400/413 text). Surrogates cannot arrive through a URL or a form: Django
decodes both as UTF-8 with replacement (JSON bodies are ``config.parsers``' business).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from django.conf import settings
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.messages.storage import default_storage
from django.db import InterfaceError, OperationalError, connections
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.functional import SimpleLazyObject, empty
from django.utils.log import log_response
from django.views import defaults

from config.errors import ServiceError


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


class InputGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        answer = self.refuse(request)
        return answer if answer is not None else self.get_response(request)

    def refuse(self, request: HttpRequest) -> HttpResponse | None:
        api = _is_api(request)
        if "\x00" in request.path_info:
            if api:
                return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)
            raise Http404("No such page.")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit and "multipart/form-data" not in request.META.get("CONTENT_TYPE", ""):
            message = f"The request body is larger than {limit} bytes."
            if api:
                return JsonResponse({"detail": message, "code": "too_large"}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                name = key.replace("\x00", "")[:40] or "non_field_errors"
                message = "Null characters are not allowed."
                if api:
                    return JsonResponse({name: [message], "code": "null_characters_not_allowed"}, status=400)
                return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return None


TOO_MANY_CONNECTIONS = "53300"  # PostgreSQL's SQLSTATE for "sorry, too many clients already"
DATABASE_RETRY_AFTER_S = 2
"""``Retry-After`` of a 503 ``database_busy`` or ``database_unavailable``."""
LOST_CONNECTION_SQLSTATES = ("08", "57P")
"""SQLSTATEs of a connection that is gone: class 08 (connection exception) and 57P01-57P05 (admin
or crash shutdown, cannot connect now: a restart or failover; database dropped, idle session
timeout). Not 57014 (a canceled statement: the connection lives on)."""
DATABASE_UNAVAILABLE = "The database is unreachable; try again in a moment."
DATABASE_BUSY = "The database is busy; retry after the Retry-After seconds."


def is_connection_shortage(exc: BaseException) -> bool:
    """True for a failure to get a connection at all: the pool timed out, or PostgreSQL said no."""
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # SQLite-only installs
        PoolTimeout = ()  # type: ignore[assignment,misc] # noqa: N806
    if isinstance(cause, PoolTimeout):
        return True
    return getattr(cause, "sqlstate", None) == TOO_MANY_CONNECTIONS or "too many clients" in str(exc)


def is_lost_connection(exc: BaseException) -> bool:
    """True for a PostgreSQL connection lost or not to be had (ended by the server, unreachable),
    never for an ordinary database error (a deadlock, a canceled statement, a constraint, a bug):
    psycopg's error with a connection SQLSTATE (:data:`LOST_CONNECTION_SQLSTATES`), or one without
    a SQLSTATE (psycopg's own: "server closed the connection unexpectedly", "connection failed")
    while this thread's connection is closed or was never made."""
    if not isinstance(exc, OperationalError | InterfaceError) or is_connection_shortage(exc):
        return False
    try:
        import psycopg
    except ImportError:  # SQLite-only installs
        return False
    cause = exc.__cause__
    if not isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    if cause.sqlstate:
        return cause.sqlstate.startswith(LOST_CONNECTION_SQLSTATES)
    return any(
        db.connection is None or db.connection.closed
        for db in connections.all(initialized_only=True)
        if db.vendor == "postgresql"
    )


def database_unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The 503 of a request whose database connection was lost (:func:`is_lost_connection`),
    logged once with the request (Django's own log of the response is then skipped)."""
    if _is_api(request):
        response: HttpResponse = JsonResponse(
            {"detail": DATABASE_UNAVAILABLE, "code": "database_unavailable"}, status=503
        )
    else:
        response = HttpResponse(DATABASE_UNAVAILABLE, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    log_response(
        "Service Unavailable: %s %s: %s",
        request.method or "",
        request.path,
        database_unreachable(exc),
        response=response,
        request=request,
    )
    return response


def database_address() -> str:
    """Where the default database is, without its credentials: ``host:port/name`` (PostgreSQL), the
    file (SQLite)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return str(db["NAME"])
    return f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def database_unreachable(exc: BaseException) -> str:
    """The one wording of a database not to be reached, for a log line: ``the database
    127.0.0.1:5432/fairway is unreachable (PoolTimeout: couldn't get a connection after 10.00 sec)``;
    the web's 503 ``database_unavailable`` (:func:`database_unavailable`) and the clock's failed
    beat (``scheduler.clock``) log it."""
    cause = exc.__cause__ or exc
    reason = " ".join(str(cause).split()) or type(cause).__name__
    return f"the database {database_address()} is unreachable ({type(cause).__name__}: {reason})"


def redis_address() -> str:
    """Where Redis is (``REDIS_URL``), without its credentials: ``host:port/db``, or a socket's path."""
    from urllib.parse import urlsplit

    url = urlsplit(settings.REDIS_URL or "")
    if url.scheme == "unix":
        return url.path
    return f"{url.hostname or 'localhost'}:{url.port or 6379}/{url.path.lstrip('/') or '0'}"


def is_redis_unreachable(exc: BaseException) -> bool:
    """True for Redis (the broker, the markers, the channel layer) not to be reached: redis-py's
    connection error or timeout, or dramatiq's connection error; never for any other failure."""
    import dramatiq.errors
    import redis.exceptions

    return isinstance(
        exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | dramatiq.errors.BrokerConnectionError
    )


def redis_unreachable(exc: BaseException) -> str:
    """The one wording of Redis not to be reached, for a log line: ``Redis 127.0.0.1:6379/0 is
    unreachable (ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.)``;
    a request's Redis writes (``config.redis_trip``) and the clock's failed beat
    (``scheduler.clock``) log it, as :func:`database_unreachable` for the database."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return f"Redis {redis_address()} is unreachable ({type(exc).__name__}: {reason})"


def database_refusal(exc: BaseException) -> ServiceError | None:
    """The refusal of a database failure that is no bug: 503 ``database_unavailable`` (the
    connection lost, :func:`is_lost_connection`) or ``database_busy`` (none to be had,
    :func:`is_connection_shortage`); None for any other error. Call it where the failure happened
    (on the thread whose connection it was)."""
    if is_lost_connection(exc):
        return ServiceError(
            "database_unavailable", None, DATABASE_UNAVAILABLE, status=503, retry_after=DATABASE_RETRY_AFTER_S
        )
    if is_connection_shortage(exc):
        return ServiceError("database_busy", None, DATABASE_BUSY, status=503, retry_after=DATABASE_RETRY_AFTER_S)
    return None


def database_busy(request: HttpRequest) -> HttpResponse:
    """The 503 of a request that could not get a database connection (:func:`is_connection_shortage`)."""
    if _is_api(request):
        response: HttpResponse = JsonResponse({"detail": DATABASE_BUSY, "code": "database_busy"}, status=503)
    else:
        response = HttpResponse(DATABASE_BUSY, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    return response


def database_answer(request: HttpRequest, exc: BaseException) -> HttpResponse | None:
    """The 503 of a database failure that is no bug (:func:`database_refusal`); None for any other."""
    if is_lost_connection(exc):
        return database_unavailable(request, exc)
    if is_connection_shortage(exc):
        return database_busy(request)
    return None


class DatabaseBusyMiddleware:
    """503 + ``Retry-After`` instead of 500 when a view could not get a database connection, or lost it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return database_answer(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500`` (config.urls): Django's 500 page, or the 503 of :func:`database_answer` for
    a database failure that no view's ``process_exception`` saw (one raised in a middleware: a
    session read before the view or saved after it; ws63: was a 500), logged once without its
    traceback (Django's own log of it is then skipped: the response was logged)."""
    exc = sys.exc_info()[1]
    answer = database_answer(request, exc) if exc is not None else None
    if answer is None:
        return defaults.server_error(request)
    if not getattr(answer, "_has_been_logged", False):
        log_response("%s: %s", answer.reason_phrase, request.path, response=answer, request=request)
    return answer


class LazyMessageMiddleware(MessageMiddleware):
    """Django's ``MessageMiddleware`` with the storage made when first used (nineteenth pass).

    Django's builds a ``FallbackStorage`` (a cookie storage with its signer, a session storage)
    for every request, ~20 µs of CPU, a third of the middleware chain of an API request, which
    never uses it. Here ``request._messages`` is a lazy object: a request that adds or reads a
    message gets Django's storage and Django's ``process_response``; one that never touched it
    stores nothing, as Django's ``update()`` does for an unused storage (neither ``used`` nor
    ``added_new``). A subclass, so the admin's check (``admin.E409``) still finds it.
    ``MessageMiddleware`` is the oracle (``tests/api/test_lazy_messages.py``)."""

    def process_request(self, request: HttpRequest) -> None:
        request._messages = SimpleLazyObject(lambda: default_storage(request))  # type: ignore[attr-defined]

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        messages = getattr(request, "_messages", None)
        if isinstance(messages, SimpleLazyObject) and messages._wrapped is empty:
            return response  # never used: Django's update() would store nothing
        return super().process_response(request, response)  # type: ignore[no-any-return]
