"""db61: a request whose database connection PostgreSQL ends while it runs (a restart, a failover,
``pg_terminate_backend``) is answered 503 + ``Retry-After``, code ``database_unavailable`` (a web
page: the same words as plain text), logged once with the request; it was a plain 500. Only an
error of the connection itself: a deadlock, a canceled statement or a constraint stays what it was
(config.middleware.is_lost_connection)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from psycopg import errors
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import FairwayAPIView
from config.middleware import DATABASE_RETRY_AFTER_S, DatabaseBusyMiddleware, is_connection_shortage, is_lost_connection

SLEEP = "SELECT pg_sleep(30) /* db61 */"


def _sleep_in_the_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute(SLEEP)


def sleeps_page(request: HttpRequest) -> HttpResponse:
    _sleep_in_the_database()
    return HttpResponse("slept")


class SleepsApi(FairwayAPIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        _sleep_in_the_database()
        return Response({"slept": True})


urlpatterns = [
    path("api/v1/db61-sleeps/", SleepsApi.as_view()),
    path("db61-sleeps/", sleeps_page),
    path("", include("config.urls")),
]


def _wrapped(django_type: type[Exception], cause: BaseException) -> Exception:
    """``cause`` as Django's wrapper raises it (``DatabaseErrorWrapper``: the driver's error as ``__cause__``)."""
    try:
        raise cause
    except BaseException as exc:  # noqa: BLE001
        try:
            raise django_type(str(exc)) from exc
        except django_type as wrapped:
            return wrapped
    raise AssertionError  # pragma: no cover


@pytest.mark.parametrize(
    "cause",
    [
        errors.AdminShutdown("terminating connection due to administrator command"),  # 57P01: a restart
        errors.CrashShutdown("terminating connection because of crash of another server process"),
        errors.CannotConnectNow("the database system is starting up"),  # 57P03: during a failover
        errors.ConnectionFailure("server closed the connection unexpectedly"),  # class 08
    ],
)
def test_an_ended_connection_is_lost(cause):
    assert is_lost_connection(_wrapped(OperationalError, cause))


@pytest.mark.parametrize(
    ("django_type", "cause"),
    [
        (OperationalError, errors.DeadlockDetected("deadlock detected")),
        (OperationalError, errors.QueryCanceled("canceling statement due to statement timeout")),
        (OperationalError, errors.SerializationFailure("could not serialize access")),
        (OperationalError, errors.LockNotAvailable("could not obtain lock")),
        (IntegrityError, errors.UniqueViolation("duplicate key value")),
        (InterfaceError, psycopg.InterfaceError("the cursor is closed")),  # a bug, the connection is fine
    ],
)
def test_ordinary_database_errors_are_not_a_lost_connection(django_type, cause, db):
    exc = _wrapped(django_type, cause)
    assert not is_lost_connection(exc)
    assert DatabaseBusyMiddleware(lambda r: HttpResponse()).process_exception(HttpRequest(), exc) is None


def test_a_pool_timeout_is_busy_not_lost():
    from psycopg_pool import PoolTimeout

    exc = _wrapped(OperationalError, PoolTimeout("couldn't get a connection after 10.00 sec"))
    assert is_connection_shortage(exc) and not is_lost_connection(exc)
    assert not is_lost_connection(OperationalError("database is locked"))  # SQLite's: no driver cause
    assert not is_lost_connection(ValueError("bug"))


def test_a_lost_connection_is_answered_503_in_the_api_s_format_and_as_a_page(rf, caplog):
    middleware = DatabaseBusyMiddleware(lambda r: HttpResponse())
    lost = _wrapped(OperationalError, errors.AdminShutdown("terminating connection due to administrator command"))
    with caplog.at_level(logging.INFO, logger="django.request"):
        api = middleware.process_exception(rf.get("/api/v1/workloads/"), lost)
        page = middleware.process_exception(rf.get("/workloads/"), lost)
    assert api is not None and page is not None
    assert (api.status_code, api["Retry-After"]) == (503, str(DATABASE_RETRY_AFTER_S))
    assert json.loads(api.content) == {
        "detail": "The database is unreachable; try again in a moment.",
        "code": "database_unavailable",
    }
    assert (page.status_code, page["Retry-After"]) == (503, str(DATABASE_RETRY_AFTER_S))
    assert page["Content-Type"].startswith("text/plain")
    assert page.content.decode() == "The database is unreachable; try again in a moment."
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2, logged
    assert "/api/v1/workloads/" in logged[0] and "terminating connection due to administrator command" in logged[0]


# -- the real thing: PostgreSQL ends the backend of a request sleeping in pg_sleep ------------------


@pytest.fixture
def pg(transactional_db: None) -> Iterator[None]:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's sessions")
    yield
    connection.close()  # ended by the test: a pool drops it, else it is closed


def _end_the_sleeping_backend(ended: list[int]) -> None:
    """What a restart does to the one request in flight: its backend ended while it runs its query."""
    db = connection.settings_dict
    params = {"dbname": db["NAME"], "user": db["USER"], "password": db["PASSWORD"], "host": db["HOST"]}
    with psycopg.connect(**params, port=db["PORT"] or None, autocommit=True) as admin:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not ended:
            ended += [
                pid
                for pid, done in admin.execute(
                    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND state = 'active' AND query = %s",
                    (SLEEP,),
                ).fetchall()
                if done
            ]
            time.sleep(0.02)


def _while_the_backend_is_ended(request: Any) -> tuple[Any, list[int], float]:
    ended: list[int] = []
    ender = threading.Thread(target=_end_the_sleeping_backend, args=(ended,))
    ender.start()
    began = time.monotonic()
    try:
        answer = request()
    finally:
        ender.join(30)
    return answer, ended, time.monotonic() - began


@pytest.mark.urls(__name__)
def test_an_api_request_whose_backend_is_ended_is_answered_503(pg, client, caplog):
    with caplog.at_level(logging.INFO, logger="django.request"):
        answer, ended, took = _while_the_backend_is_ended(lambda: client.get("/api/v1/db61-sleeps/"))
    assert len(ended) == 1 and took < 10, (ended, took)
    assert answer.status_code == 503, answer.content
    assert answer["Retry-After"] == str(DATABASE_RETRY_AFTER_S)
    assert answer.json()["code"] == "database_unavailable"
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "/api/v1/db61-sleeps/" in logged[0].getMessage() and logged[0].exc_info is None
    # and the next unit of work gets a live connection
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.urls(__name__)
def test_a_page_whose_backend_is_ended_is_answered_503(pg, client):
    answer, ended, _took = _while_the_backend_is_ended(lambda: client.get("/db61-sleeps/"))
    assert len(ended) == 1
    assert answer.status_code == 503
    assert answer["Retry-After"] == str(DATABASE_RETRY_AFTER_S)
    assert answer.content.decode() == "The database is unreachable; try again in a moment."
