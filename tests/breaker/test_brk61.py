"""brk61 (breaker of ``fairway exec -it``, ``fairway exec`` and scheduled drains)."""

from __future__ import annotations

import io
import json
import os
import struct
import threading

import pytest

from fairway_cli import session
from fairway_cli.words import COMMAND_TOO_LONG
from fairway_cli.wsclient import OP_CLOSE, OP_TEXT
from tests.api.test_exec_api import agent_answers, running, url  # noqa: F401 -- fixtures


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"command": ["id"], "attempt": 2**63},
        {"command": ["id"], "attempt": 10**30},
        {"command": ["a\x00b"]},
        {"command": ["id"], "timeout": 600.0},
        {"command": ["id"], "timeout": 10**30},
        {"command": "id"},
        {"command": [""]},
        {"command": [1]},
        {"command": ["x" * 70000]},
        {"command": ["x"] * 5000},
    ],
)
def test_brk61_odd_exec_bodies_are_400s(running, researcher_client, agent_answers, body) -> None:  # noqa: F811
    w, _attempt = running
    got = researcher_client.post(url(w.pk), body, format="json")
    assert got.status_code in (400, 409), (got.status_code, got.content[:300])
    assert agent_answers[1:] == []


class _BrokenLink:
    """A session's websocket whose connection broke: every send raises ``error`` (the server's
    end went: EPIPE, ECONNRESET); its reader sees the end once closed."""

    def __init__(self, error: OSError) -> None:
        self.error = error
        self.gone = threading.Event()

    def recv(self) -> tuple[int, bytes]:
        self.gone.wait(10)
        return OP_CLOSE, b""

    def send_binary(self, data: bytes) -> None:
        raise self.error

    def send_text(self, text: str) -> None:
        raise self.error

    def close(self, code: int = 1000) -> None:
        self.gone.set()


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")])
def test_brk61_input_into_a_broken_session_says_the_connection_broke(error) -> None:
    """brk61: a keystroke sent as the connection broke raised its OSError out of ``relay``: a
    BrokenPipeError was taken by the CLI's ``fairway ls | head`` rule (exit 141, stdout silenced,
    nothing said), a ConnectionResetError was a traceback. It is the session's end: "broken"."""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        os.write(stdin_w, b"ls\n")
        with open(out_w, "wb", closefd=False) as stdout, pytest.raises(session.SessionRefused) as refused:
            session.relay(_BrokenLink(error), stdin_r, stdout, raw=False)  # type: ignore[arg-type]
        assert refused.value.code == "broken"
        assert "the connection broke" in refused.value.message
    finally:
        for fd in (stdin_r, stdin_w, out_r, out_w):
            os.close(fd)


class _Ended(_BrokenLink):
    """A session the server ends with ``frame`` (its ``exit``), then a close."""

    def __init__(self, frame: dict[str, object]) -> None:
        super().__init__(BrokenPipeError())
        self.frames = [(OP_TEXT, json.dumps(frame).encode()), (OP_CLOSE, b"")]

    def recv(self) -> tuple[int, bytes]:
        return self.frames.pop(0) if self.frames else (OP_CLOSE, b"")


def test_brk61_the_cli_says_why_the_agent_ended_the_command(capsys) -> None:
    why = "the session was ended: more than 262144 bytes of input the command does not read"
    stdin_r, stdin_w = os.pipe()
    try:
        link = _Ended({"type": "exit", "exit_code": 129, "timed_out": False, "message": why})
        code = session.relay(link, stdin_r, io.BytesIO(), raw=False)  # type: ignore[arg-type]
    finally:
        os.close(stdin_r)
        os.close(stdin_w)
    assert code == 129
    assert capsys.readouterr().err == f"fairway: {why}\n"


class _RefusedFirst:
    """A websocket whose server refuses the first frame: ``error`` raised by its send (the
    server reset the connection midway through a frame far past its limit), or the close
    ``code`` it answers (1009: a frame past ``--ws-max-size``)."""

    def __init__(self, error: OSError | None = None, code: int = 1009) -> None:
        self.error, self.code = error, code

    def send_text(self, text: str) -> None:
        if self.error is not None:
            raise self.error

    def recv(self) -> tuple[int, bytes]:
        return OP_CLOSE, struct.pack("!H", self.code) + b"message too big"

    def close(self, code: int = 1000) -> None:
        pass


@pytest.mark.parametrize(("size", "error"), [(5_000_000, None), (200_000, None), (100, ConnectionResetError(104, "r"))])
def test_brk61_a_session_whose_command_is_too_long_for_the_server_says_so(monkeypatch, size, error) -> None:
    """brk61: ``fairway exec -it 3 -- CMD`` with a command past the server's 256 KiB frame
    (``--ws-max-size``, the agent protocol's ``MAX_MESSAGE_BYTES``) read "the server closed the
    session before it started" (close 1009), and past a few MiB the server's reset raised
    ConnectionResetError out of the CLI (a traceback). Past the limit it is not sent; a server
    whose limit is lower closes 1009: both say the command is too long, as the API's
    ``invalid_command``. A reset otherwise is a broken connection."""
    from agent.protocol import MAX_MESSAGE_BYTES
    from fairway_cli.wsclient import WebSocketError

    assert session.MAX_FIRST_FRAME_BYTES == MAX_MESSAGE_BYTES
    opened: list[object] = []
    monkeypatch.setattr(session, "WebSocket", lambda *_a, **_k: opened.append(1) or _RefusedFirst(error))
    first = {"workload": 3, "command": ["x" * size], "tty": True}
    if error is not None:
        with pytest.raises(WebSocketError, match="the connection broke"):
            session.open_session("http://fairway", "token", "fairway-cli/test", first)
        return
    with pytest.raises(session.SessionRefused) as refused:
        session.open_session("http://fairway", "token", "fairway-cli/test", first)
    assert (refused.value.code, refused.value.message) == ("invalid_command", COMMAND_TOO_LONG)
    assert opened == ([] if size > MAX_MESSAGE_BYTES else [1])
