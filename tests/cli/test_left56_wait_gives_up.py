"""left56: ``fairway wait`` against a server that answers HTTP 500 on every poll asked again forever
without ``--timeout``: it gives up (exit 3) once every poll has failed for 15 minutes and 5 polls in
a row (``fairway_cli.waiting.Outage``); a busy server (503 with ``Retry-After``) is asked again."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from fairway_cli.cli import EXIT_OK, EXIT_UNREACHABLE
from fairway_cli.waiting import GIVE_UP_S, GIVE_UP_TRIES
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures
from tests.cli.test_cli_wait import become, fairway, submitted  # noqa: F401 -- fixtures


def _answer(status: int, retry_after: str | None = None) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    if retry_after:
        response.headers["Retry-After"] = retry_after
    response._content = b"{}"
    return response


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Answers to give instead of the server's, one per request while any is left."""
    real = requests.Session.request
    answers: list[Any] = []

    def request(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return real(self, method, url, **kwargs)

    monkeypatch.setattr(requests.Session, "request", request)
    return answers


def test_a_server_failing_every_poll_is_given_up_on(fairway, submitted, clock, failing):  # noqa: F811
    w = submitted()
    fake = clock(lambda: failing.extend([_answer(500)] * 1000))

    code, out, err = fairway("wait", str(w.pk))

    assert code == EXIT_UNREACHABLE, (out, err)
    assert "gave up waiting: the server failed every poll for 15m" in err
    assert "last: the server failed: HTTP 500, not Fairway's error format" in err and "the workloads go on" in err
    waited = fake.now - 1000.0 - fake.sleeps[0]
    assert GIVE_UP_S <= waited < GIVE_UP_S + 60 and len(fake.sleeps) - 1 >= GIVE_UP_TRIES
    assert len([line for line in out.splitlines() if line.startswith("[")]) == 1  # said once


def test_an_answer_between_failures_starts_the_count_again(fairway, submitted, clock, failing):  # noqa: F811
    w = submitted()
    steps = []
    for _ in range(3):  # 3 outages of ~13 min each, an answer between them
        steps.append(lambda: failing.extend([_answer(502)] * 27))
        steps += [lambda: None] * 27
    clock(*steps, become(w, "succeeded"))
    code, out, err = fairway("wait", str(w.pk))
    assert code == EXIT_OK, (out, err)


def test_a_busy_server_with_retry_after_is_asked_again_however_long(fairway, submitted, clock, failing):  # noqa: F811
    w = submitted()
    fake = clock(lambda: failing.extend([_answer(503, "60")] * 40), *[lambda: None] * 40, become(w, "succeeded"))
    code, out, err = fairway("wait", str(w.pk))
    assert code == EXIT_OK, (out, err)
    assert fake.now - 1000.0 > 2 * GIVE_UP_S


def test_submit_wait_gives_up_alike_naming_what_it_submitted(fairway, clock, monkeypatch):  # noqa: F811
    real = requests.Session.request

    def request(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        if method == "GET":  # the submission goes through; every read of it fails
            return _answer(500)
        return real(self, method, url, **kwargs)

    monkeypatch.setattr(requests.Session, "request", request)
    clock()
    code, out, err = fairway("submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--name", "x", "--wait", "--", "true")
    assert code == EXIT_UNREACHABLE, (out, err)
    assert "gave up waiting: the server failed every poll for 15m" in err
    assert " was submitted and goes on" in err
