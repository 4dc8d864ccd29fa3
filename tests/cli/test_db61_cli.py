"""db61: the CLI's words when the server's database is unreachable (a PostgreSQL restart or
failover ended the request's connection): the server's 503 ``database_unavailable`` read through
the one place the CLI reads a status (``fairway_cli.cli.answer_error``), and ``wait`` asks again."""

from __future__ import annotations

import pytest
import requests
from django.db import OperationalError
from django.test import RequestFactory
from psycopg import errors

from config.middleware import DATABASE_RETRY_AFTER_S, database_unavailable
from fairway_cli.cli import EXIT_OK, EXIT_TEMPFAIL, Api, CliError
from fairway_cli.words import unavailable_text
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures
from tests.cli.test_cli_wait import become, fairway, submitted  # noqa: F401 -- fixtures
from tests.cli.test_left56_wait_gives_up import failing  # noqa: F401 -- fixture


def _servers_answer() -> requests.Response:
    """The server's own answer to an API request whose connection PostgreSQL ended, as the CLI receives it."""
    try:
        try:
            raise errors.AdminShutdown("terminating connection due to administrator command")
        except errors.AdminShutdown as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as lost:
        answer = database_unavailable(RequestFactory().get("/api/v1/workloads/"), lost)
    response = requests.Response()
    response.status_code = answer.status_code
    response.headers.update({k: v for k, v in answer.items()})
    response._content = answer.content
    return response


def test_the_cli_says_the_database_is_unreachable(monkeypatch):
    monkeypatch.setattr(requests.Session, "request", lambda *_a, **_k: _servers_answer())
    with pytest.raises(CliError) as caught:
        Api("http://fairway.example.org", "abc123").call("GET", "workloads/")
    error = caught.value
    assert (error.exit_code, error.code) == (EXIT_TEMPFAIL, "database_unavailable")  # cli46: was exit 3
    said = "The database is unreachable; try again in a moment. (database_unavailable)"
    assert error.message == unavailable_text(said)
    assert error.retry_after == DATABASE_RETRY_AFTER_S


def test_wait_asks_again_while_the_database_is_unreachable(fairway, submitted, clock, failing):  # noqa: F811
    w = submitted()
    clock(lambda: failing.extend([_servers_answer()] * 3), *[lambda: None] * 3, become(w, "succeeded"))
    code, out, err = fairway("wait", str(w.pk))
    assert code == EXIT_OK, (out, err)
    assert "[The database is unreachable; try again in a moment: asking again in " in out, (out, err)
