"""cli46b: ``fairway wait`` that gives up after 15 minutes of failed polls exited 3 ("cannot be
reached") even when every poll was answered 503 or 429 (without ``Retry-After``: a busy answer with
one never counts): the server said "try again later", so the wait exits 75 (``EXIT_TEMPFAIL``) with
that status's words to try again; 3 when the last failed poll got no answer, or a 5xx of another kind."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from fairway_cli.cli import EXIT_TEMPFAIL, EXIT_UNREACHABLE
from fairway_cli.words import THROTTLED_WORDS, UNAVAILABLE_TEXT
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures
from tests.cli.test_cli_wait import fairway, submitted  # noqa: F401 -- fixtures
from tests.cli.test_left56_wait_gives_up import _answer, failing  # noqa: F401 -- fixture


@pytest.mark.parametrize(
    ("status", "retry_line"),
    [(503, UNAVAILABLE_TEXT), (429, f"{THROTTLED_WORDS}: try again shortly")],
    ids=["503", "429"],
)
def test_a_wait_given_up_on_try_again_answers_exits_75(fairway, submitted, clock, failing, status, retry_line):  # noqa: F811
    w = submitted()
    clock(lambda: failing.extend([_answer(status)] * 1000))
    code, out, err = fairway("wait", str(w.pk))
    assert code == EXIT_TEMPFAIL, (out, err)  # was 3
    assert "gave up waiting: the server failed every poll for 15m" in err and "the workloads go on" in err
    assert err.splitlines()[-1] == f"  {retry_line}", err


def test_a_wait_whose_last_polls_got_no_answer_still_exits_3(fairway, submitted, clock, failing):  # noqa: F811
    w = submitted()
    unreachable: list[Any] = [requests.ConnectionError("refused")] * 1000
    clock(lambda: failing.extend([_answer(503)] * 3 + unreachable))
    code, out, err = fairway("wait", str(w.pk))
    assert code == EXIT_UNREACHABLE, (out, err)
    assert "gave up waiting" in err and UNAVAILABLE_TEXT not in err, err


def test_submit_wait_gives_up_on_503s_alike(fairway, clock, monkeypatch):  # noqa: F811
    real = requests.Session.request

    def request(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        if method == "GET":  # the submission goes through; every read of it is answered 503
            return _answer(503)
        return real(self, method, url, **kwargs)

    monkeypatch.setattr(requests.Session, "request", request)
    clock()
    code, out, err = fairway("submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--name", "x", "--wait", "--", "true")
    assert code == EXIT_TEMPFAIL, (out, err)
    assert " was submitted and goes on" in err and err.splitlines()[-1] == f"  {UNAVAILABLE_TEXT}", err
