"""left60: the CLI's words on a refusal. A 5xx in the API's error format (``exec``'s 503
``exec_unavailable``, 504 ``exec_timeout``) said only "the server failed: HTTP 503"; a proxy's 504
(HTML) read the same, like the agent's silence."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import requests

from fairway_cli.cli import EXIT_API, EXIT_TEMPFAIL, EXIT_TIMEOUT, EXIT_UNREACHABLE, Api, CliError, main
from scheduler import gateway
from tests.cli.inprocess import run_cli_streams
from tests.cli.test_cli_exec import running  # noqa: F401 -- fixture


def _answer(status: int, body: bytes, kind: str = "application/json") -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.headers["Content-Type"] = kind
    response._content = body
    return response


def _refusal(monkeypatch: pytest.MonkeyPatch, answer: requests.Response) -> CliError:
    monkeypatch.setattr(requests.Session, "request", lambda *_a, **_k: answer)
    with pytest.raises(CliError) as caught:
        Api("http://fairway.example.org", "abc123").call("POST", "workloads/7/exec/", body={})
    return caught.value


def test_a_5xx_in_fairways_format_says_its_detail(monkeypatch):
    body = b'{"detail": "The server cannot reach the agents now; the command did not run.", "code": "exec_unavailable"}'
    error = _refusal(monkeypatch, _answer(503, body))  # a 503: unavailable for a moment (cli46: was exit 3)
    assert error.exit_code == EXIT_TEMPFAIL and error.code == "exec_unavailable"
    assert "the command did not run" in error.message and "(exec_unavailable)" in error.message, error.message


def test_a_5xx_in_another_format_says_it_came_from_in_front(monkeypatch):
    error = _refusal(monkeypatch, _answer(504, b"<html><h1>504 Gateway Time-out</h1></html>", "text/html"))
    assert error.exit_code == EXIT_UNREACHABLE and error.code == ""
    assert "HTTP 504, not Fairway's error format" in error.message, error.message
    assert "something in front of http://fairway.example.org" in error.message, error.message
    error = _refusal(monkeypatch, _answer(502, b'{"message": "bad gateway"}'))  # JSON, not Fairway's
    assert "HTTP 502, not Fairway's error format" in error.message, error.message


def test_exec_unavailable_and_timeout_read_as_the_servers_words(monkeypatch, researcher, running):  # noqa: F811
    def fake(*_args: Any) -> dict:
        return {"error": "unavailable", "message": "the channel layer failed"}

    monkeypatch.setattr(gateway, "request_exec", fake)
    code, out, err = run_cli_streams(monkeypatch, researcher, "exec", str(running.pk), "--", "id")
    assert (code, out) == (EXIT_TEMPFAIL, "") and "the command did not run" in err, err
    monkeypatch.setattr(gateway, "request_exec", lambda *_a: {"error": "exec_timeout", "message": "no answer"})
    code, out, err = run_cli_streams(monkeypatch, researcher, "exec", str(running.pk), "--", "id")
    assert code == EXIT_TIMEOUT and "did not answer in time (no answer)" in err, err


def test_a_proxys_504_on_exec_is_not_the_agents_silence(monkeypatch, researcher, running):  # noqa: F811
    proxy = _answer(504, b"<html>504 Gateway Time-out</html>", "text/html")
    monkeypatch.setattr(requests.Session, "request", lambda *_a, **_k: proxy)
    monkeypatch.setenv("FAIRWAY_URL", "http://fairway.example.org")
    monkeypatch.setenv("FAIRWAY_TOKEN", "abc123")
    out, err = io.StringIO(), io.StringIO()
    code = main(["exec", str(running.pk), "--", "id"], out=out, err=err)
    assert code == EXIT_UNREACHABLE and "not Fairway's error format" in err.getvalue(), err.getvalue()
    assert "did not answer" not in err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "999"],
        ["cancel", "999"],
        ["cancel", "999", "998"],
        ["hold", "999"],
        ["release", "999", "998"],
        ["update", "999", "-t", "2h"],
        ["resubmit", "999"],
        ["exec", "999", "--", "id"],
        ["wait", "999"],
        ["logs", "999"],
        ["hosts", "nope"],
        ["ls", "--state", "bogus"],
    ],
)
def test_json_on_a_refusal_prints_nothing_on_stdout(monkeypatch, researcher, argv):
    """left60: as gh's ``--json`` and kubectl's ``-o json``: the refusal in words on stderr, the
    exit code says it, stdout holds no document (``hold 999`` printed ``[]``, ``cancel 999`` nothing)."""
    code, out, err = run_cli_streams(monkeypatch, researcher, "--json", *argv)
    assert (code, out) == (EXIT_API, ""), (code, out)
    assert err.startswith("fairway: ") and "999" in err or "nope" in err or "bogus" in err, err


def test_json_of_several_ids_lists_those_done(monkeypatch, researcher, running):  # noqa: F811
    code, out, err = run_cli_streams(monkeypatch, researcher, "--json", "cancel", str(running.pk), "999")
    assert code == EXIT_API and [w["id"] for w in json.loads(out)] == [running.pk] and "#999" in err, (out, err)


def test_exec_refusal_names_the_flag_typed(monkeypatch, researcher, running):  # noqa: F811
    """left60: "leave out the attempt" (the API's field) to a person who typed ``--attempt``."""
    code, _out, err = run_cli_streams(monkeypatch, researcher, "exec", str(running.pk), "--attempt", "2", "--", "id")
    assert code == EXIT_API and "its running attempt is 1 (leave out --attempt to run in it)" in err, err
    assert "leave out the attempt" not in err
