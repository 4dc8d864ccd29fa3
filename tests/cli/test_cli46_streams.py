"""cli46: ``fairway exec`` (one-shot, ``-i``, ``-it``) and ``fairway port-forward`` against a server
that is unavailable for a moment, and a forward's last check. A websocket refused with close 4503
(``exec_unavailable``, ``database_unavailable``) or HTTP 503 at its upgrade exited 1, as a refusal of
the person's request, and an API 503 exited 3 ("cannot be reached or failed"); each exits 75
(sysexits' ``EX_TEMPFAIL``) and says, in one wording, to try again. A forward's check of why it
ended counted in the exec throttle a second time (a forward then an exec could be throttled)."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from fairway_cli import cli as fairway_cli
from fairway_cli import portforward, session
from fairway_cli.cli import EXIT_API, EXIT_OK, main
from fairway_cli.wsclient import OP_CLOSE, OP_TEXT
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures
from tests.cli.test_cli_wait import become, fairway, submitted  # noqa: F401 -- fixtures
from tests.cli.test_left56_wait_gives_up import _answer, failing  # noqa: F401 -- fixture
from tests.cli.wsfake import STREAMS, fake_server
from tests.cli.wsfake import run_cli as _main

EXEC_UNAVAILABLE = {
    "code": "exec_unavailable",
    "message": "The server cannot reach the agents now (the channel layer failed: ConnectionError); "
    "the command did not run. Try again shortly.",
}
DATABASE_UNAVAILABLE = {
    "code": "database_unavailable",
    "message": "The database is unreachable; try again in a moment.",
}


def _api_503(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: bytes) -> tuple[int, str, str]:
    answer = requests.Response()
    answer.status_code = 503
    answer.headers["Content-Type"] = "application/json"
    answer._content = body
    monkeypatch.setattr(requests.Session, "request", lambda *_a, **_k: answer)
    return _main(monkeypatch, tmp_path, "http://fairway.example.org", "exec", "42", "--", "id")


@pytest.mark.parametrize("argv", STREAMS, ids=["-i", "-it", "port-forward"])
@pytest.mark.parametrize("refusal", [EXEC_UNAVAILABLE, DATABASE_UNAVAILABLE], ids=lambda r: r["code"])
def test_a_stream_refused_for_a_moment_exits_75_and_says_to_try_again(monkeypatch, tmp_path, argv, refusal) -> None:
    with fake_server(refusal=refusal, close=4503) as server:
        code, out, err = _main(monkeypatch, tmp_path, server.url, *argv)
    assert (code, out) == (75, ""), err  # was 1, a refusal of the request
    assert err.startswith(f"fairway: workload 42: {refusal['message']} ({refusal['code']})\n"), err
    assert err.splitlines()[-1] == f"  {fairway_cli.UNAVAILABLE_TEXT}", err
    assert len(server.firsts) == 1


@pytest.mark.parametrize("argv", STREAMS, ids=["-i", "-it", "port-forward"])
def test_a_503_at_the_upgrade_exits_75_in_the_same_words(monkeypatch, tmp_path, argv) -> None:
    with fake_server(status=503) as server:
        code, _out, err = _main(monkeypatch, tmp_path, server.url, *argv)
    assert code == 75, err  # was 3, "cannot be reached"
    assert "HTTP 503" in err and err.splitlines()[-1] == f"  {fairway_cli.UNAVAILABLE_TEXT}", err


def test_an_api_503_reads_as_a_streams_one_statement(monkeypatch, tmp_path) -> None:
    """The one-shot ``fairway exec`` (the API's 503, was exit 3) and ``-i`` (close 4503, was exit 1)
    say the same, and exit 75 both; a 503 not in Fairway's format (a proxy's) too."""
    body = b'{"detail": "%s", "code": "exec_unavailable"}' % EXEC_UNAVAILABLE["message"].encode()
    one_shot = _api_503(monkeypatch, tmp_path, body)
    with fake_server(refusal=EXEC_UNAVAILABLE, close=4503) as server:
        piped = _main(monkeypatch, tmp_path, server.url, *STREAMS[0])
    assert one_shot == piped == (75, "", piped[2]), (one_shot, piped)
    code, _out, err = _api_503(monkeypatch, tmp_path, b"<html>503 Service Unavailable</html>")
    assert code == 75 and "not Fairway's error format" in err, err
    assert err.splitlines()[-1] == f"  {fairway_cli.UNAVAILABLE_TEXT}", err


def test_a_refusal_of_the_request_still_exits_1(monkeypatch, tmp_path) -> None:
    refusal = {"code": "not_running", "message": "Workload 42 is pending: a command runs only in a running attempt."}
    with fake_server(refusal=refusal, close=4409) as server:
        code, _out, err = _main(monkeypatch, tmp_path, server.url, *STREAMS[0])
    assert code == EXIT_API and fairway_cli.UNAVAILABLE_TEXT not in err, err


def test_the_exit_codes_are_one_table_in_help_and_readme(capsys) -> None:
    assert fairway_cli.EXIT_TEMPFAIL == 75  # sysexits.h's EX_TEMPFAIL
    assert main(["--help"]) == EXIT_OK
    said = " ".join(capsys.readouterr().out.split())
    table = " ".join(fairway_cli.exit_codes_text().split())
    assert f"{fairway_cli.EXIT_TEMPFAIL} " in table and table in said
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert table in " ".join(readme.split())


def test_wait_asks_again_through_503s_without_retry_after(fairway, submitted, clock, failing) -> None:  # noqa: F811
    """A 503 (exit 75 now, 3 before) is a busy server to a wait, with or without ``Retry-After``."""
    w = submitted()
    clock(lambda: failing.extend([_answer(503)] * 3), *[lambda: None] * 3, become(w, "succeeded"))
    code, out, err = fairway("wait", str(w.pk))
    assert code == EXIT_OK, (out, err)


# --- a forward's last check ----------------------------------------------------------------------


class _Checked:
    def close(self, code: int = 1000) -> None:
        pass


def _serve(monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> tuple[str, list[dict[str, Any]], str]:
    """``portforward.serve`` of a workload that no longer runs, its checks answered ``answers``
    (a refusal raised, else ``checked``); its words, the first frames sent, what it said."""
    firsts: list[dict[str, Any]] = []

    def open_session(_server: str, _token: str, _agent: str, first: dict[str, Any], **_k: Any) -> Any:
        firsts.append(first)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return _Checked(), {"type": "checked"}

    monkeypatch.setattr(session, "open_session", open_session)
    monkeypatch.setattr(portforward, "POLL_S", 0.0)
    fwd = portforward.Forward("http://fairway", "abc123", "fairway-cli/test", 42, None, 6006)
    err = io.StringIO()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        why = portforward.serve(fwd, listener, err, lambda: False, threading.Event())
    return why, firsts, err.getvalue()


def test_a_forwards_check_of_why_it_ended_is_not_counted(monkeypatch) -> None:
    """The check before it listens is the forward's one count in ``FAIRWAY_THROTTLE_EXEC``
    (``"check": true``); the one of why it ended asks for the server's words only (``"again"``)."""
    assert portforward.Forward("http://fairway", "t", "ua", 42, None, 6006).first(True)["check"] is True
    ended = session.SessionRefused("not_running", "Workload 42 has already ended (canceled).")
    why, firsts, _said = _serve(monkeypatch, [ended])
    assert why == "Workload 42 has already ended (canceled)."
    assert firsts == [{"workload": 42, "attempt": None, "port": 6006, "check": "again"}]


def test_a_503_to_the_last_check_is_asked_again(monkeypatch) -> None:
    """The server unavailable for a moment is not why the forward ended: asked again at the next poll."""
    busy = session.SessionRefused("database_unavailable", DATABASE_UNAVAILABLE["message"], status=503)
    ended = session.SessionRefused("not_running", "Workload 42 has already ended (canceled).")
    why, firsts, _said = _serve(monkeypatch, [busy, ended])
    assert (why, len(firsts)) == ("Workload 42 has already ended (canceled).", 2)


# --- a 503 once a stream runs --------------------------------------------------------------------


class _Link:
    """A stream's websocket whose server sends ``frames`` (then closes); what is sent is dropped."""

    def __init__(self, *frames: tuple[int, bytes]) -> None:
        self.frames = list(frames)

    def recv(self) -> tuple[int, bytes]:
        return self.frames.pop(0) if self.frames else (OP_CLOSE, b"")

    def send_text(self, text: str) -> None:
        pass

    def send_binary(self, data: bytes) -> None:
        pass

    def close(self, code: int = 1000) -> None:
        pass


def _lost_link(close: int) -> _Link:
    words = "The server lost its link to the agents (ConnectionError); the session was ended. Try again shortly."
    error = json.dumps({"type": "error", "code": "exec_unavailable", "message": words}).encode()
    return _Link((OP_TEXT, error), (OP_CLOSE, struct.pack("!H", close)))


@pytest.mark.parametrize(("close", "unavailable"), [(4503, True), (4409, False), (1000, False)])
def test_a_stream_ended_midway_knows_its_status(close, unavailable) -> None:
    """A session's or forwarded connection's refusal once it runs (Redis lost: close 4503) reads
    as one before it started (:func:`fairway_cli.cli._stream_refusal`: exit 75)."""
    with pytest.raises(session.SessionRefused) as refused:
        session.relay_pipe(_lost_link(close), io.BytesIO(b""), io.BytesIO(), io.BytesIO())  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.unavailable) == ("exec_unavailable", unavailable)
    left, right = socket.socketpair()
    with left, right:
        forwarded = portforward.relay(_lost_link(close), left)  # type: ignore[arg-type]
    assert forwarded is not None and forwarded.unavailable == unavailable
