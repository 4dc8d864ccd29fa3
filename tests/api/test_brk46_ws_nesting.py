"""brk46: a text frame nested deeper than Python's recursion limit (``[[[…]]]``, 200 KB) on
``/ws/exec/`` or ``/ws/port-forward/`` raised RecursionError out of the consumer, which only caught
ValueError: the first frame got no refusal (the socket closed 1011, a traceback logged), and a
control frame in a session that had started ended the consumer without its close, so the
command ran on at its host until the idle timeout and the session still counted in
``FAIRWAY_EXEC_MAX_SESSIONS`` (its person's share) until the web process restarted. Such a frame
is what any other unreadable one is: a refused first frame, an ignored control frame (the API's
JSON bodies: 400 "nested too deeply", config/parsers.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator

from config.asgi import application
from scheduler import exec_session
from tests.api.test_exec_session import _fake_agent, _run, _started, running, token_of
from tests.api.test_port_forward import _open_after_started

__all__ = ["running"]  # the fixture, shared
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("path", ["/ws/exec/", "/ws/port-forward/"])
def test_a_first_frame_nested_too_deeply_is_refused(running, researcher, path) -> None:
    token = token_of(researcher)

    async def run() -> tuple[dict, int]:
        comm = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=DEEP)
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return frame, closed.get("code")

    frame, code = _run(run())
    assert (frame["type"], frame["code"], code) == ("error", "invalid", 4400)
    assert frame["message"].startswith("The first frame is a JSON object")


def test_a_control_frame_nested_too_deeply_is_ignored_and_the_session_goes_on(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        comm, layer, agent, _reader = await _started(token, w, attempt.host_id)
        await comm.send_to(text_data=DEEP)
        await comm.send_to(text_data=json.dumps({"type": "resize", "rows": 40, "cols": 90}))
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["rows"], got["cols"]) == ("exec.tty.resize", 40, 90)
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert got["type"] == "exec.tty.close"

    _run(run())
    assert exec_session.sessions_held() == 0


def test_a_forwarded_connections_frame_nested_too_deeply_is_ignored(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, _reader = await _open_after_started(layer, agent, token, w.pk)
        await comm.send_to(text_data=DEEP)
        await comm.send_to(text_data=json.dumps({"type": "eof"}))
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["eof"]) == ("port.data", True)
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert got["type"] == "exec.tty.close"

    _run(run())
    assert exec_session.sessions_held() == 0
