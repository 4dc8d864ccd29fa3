"""``/ws/port-forward/`` (scheduler.port_forward; docs/jobs.md, "Reach a port in a running
workload"): an interactive session's checks and codes (owner only, not_running, throttled,
agent_too_old), a check-only first frame, then the relay through the channel layer both ways,
each within its window (a client past it is ended), and the agent's refusals in the API's words
(nothing listens). The agent's connection is played here by a channel in the host's group; the
real one, with a real agent: tests/e2e/test_port_forward_e2e.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from agent import protocol
from config.asgi import application
from config.throttling import ExecRateThrottle
from scheduler.consumers import _exec_refusal
from scheduler.services import do_submit_workload
from tests.api.test_exec_session import _fake_agent, _run, running, token_of

__all__ = ["running"]  # the fixture, shared
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def _open(token: str, first: dict[str, Any]) -> tuple[WebsocketCommunicator, dict[str, Any]]:
    comm = WebsocketCommunicator(
        application, "/ws/port-forward/", headers=[(b"authorization", f"Token {token}".encode())]
    )
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps(first))
    return comm, json.loads(await comm.receive_from(timeout=10))


async def _answer(token: str, first: dict[str, Any]) -> tuple[dict[str, Any], int]:
    comm, frame = await _open(token, first)
    closed = await comm.receive_output(timeout=10)
    await comm.disconnect()  # it ends by itself, not cancelled (test_exec_session)
    return frame, closed.get("code")


@pytest.mark.parametrize("who", ["teammate", "admin"])
def test_nobody_but_the_owner_may_forward(running, who, request) -> None:
    w, _attempt = running
    frame, code = _run(_answer(token_of(request.getfixturevalue(who)), {"workload": w.pk, "port": 6006}))
    assert (frame["code"], code) == ("forbidden", 4403)
    assert frame["message"].startswith("Only the workload's owner may reach a port in it")
    assert "command" not in frame["message"]  # try62: it said "may run a command in it"


def test_not_running_says_a_port_not_a_command(running, researcher, submit_kwargs) -> None:
    """try62: a forward of a finished or held workload said "A command runs only in a running
    attempt" (exec's words); the same rule, said of a port."""
    from scheduler.models import Workload

    token = token_of(researcher)
    held = do_submit_workload(researcher, **submit_kwargs(hold=True))
    frame, _code = _run(_answer(token, {"workload": held.pk, "port": 6006}))
    assert "a port is reached only in a running attempt" in frame["message"], frame
    Workload.objects.filter(pk=held.pk).update(state="canceled")
    frame, code = _run(_answer(token, {"workload": held.pk, "port": 6006}))
    assert (frame["code"], code) == ("not_running", 4409)
    assert "A port is reached only in a running attempt" in frame["message"], frame
    assert "command" not in frame["message"]


def test_exec_refusals_and_the_check_only_frame(running, researcher, submit_kwargs, monkeypatch) -> None:
    w, attempt = running
    token = token_of(researcher)
    held = do_submit_workload(researcher, **submit_kwargs(hold=True))
    frame, code = _run(_answer(token, {"workload": held.pk, "port": 6006}))
    assert (frame["code"], code) == ("not_running", 4409)
    assert f"Workload {held.pk} is pending, held" in frame["message"]
    for port in (0, 65536, "80", True):
        assert _run(_answer(token, {"workload": w.pk, "port": port}))[0]["code"] == "invalid_port"
    assert _run(_answer(token, {"workload": w.pk, "port": 80, "command": ["x"]}))[0]["code"] == "unknown_field"
    # the CLI's check before it listens: nothing opened at the agent
    assert _run(_answer(token, {"workload": w.pk, "port": 6006, "check": True})) == (
        {"type": "checked", "attempt": 1, "host": attempt.host.name},
        1000,
    )
    monkeypatch.setattr(ExecRateThrottle, "allow_request", lambda self, request, view: False)
    monkeypatch.setattr(ExecRateThrottle, "wait", lambda self: 30.0)
    assert _run(_answer(token, {"workload": w.pk, "port": 6006, "check": True}))[0]["code"] == "throttled"


def test_bytes_are_relayed_both_ways_within_the_windows(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, _ = None, None
        comm = WebsocketCommunicator(
            application, "/ws/port-forward/", headers=[(b"authorization", f"Token {token}".encode())]
        )
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps({"workload": w.pk, "port": 6006}))
        opened = await layer.receive(agent)
        assert (opened["type"], opened["attempt_id"], opened["port"], opened["idle_s"]) == (
            "port.open",
            attempt.wire_id,
            6006,
            3600,
        )
        reader = opened["reply_to"]
        await layer.send(reader, {"type": "exec.tty.opened", "agent": agent, "ref": 5})
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        # up: binary frames to the agent (base64), acknowledged back to the client
        await comm.send_to(bytes_data=b"\x00\xffGET")
        got = await layer.receive(agent)
        assert (got["type"], got["ref"], base64.b64decode(got["data"]), got["eof"]) == (
            "port.data",
            5,
            b"\x00\xffGET",
            False,
        )
        await layer.send(reader, {"type": "port.ack", "bytes": 5, "chunks": 1})
        assert json.loads(await comm.receive_from(timeout=10)) == {"type": "ack", "bytes": 5, "chunks": 1}
        await comm.send_to(text_data=json.dumps({"type": "eof"}))
        got = await layer.receive(agent)
        assert (got["type"], got["data"], got["eof"]) == ("port.data", "", True)
        # down: the agent's bytes to the client, acknowledged to the agent once sent
        await layer.send(reader, {"type": "port.data", "data": base64.b64encode(b"\x01OK").decode(), "eof": False})
        assert await comm.receive_output(timeout=10) == {"type": "websocket.send", "bytes": b"\x01OK"}
        got = await layer.receive(agent)
        assert (got["type"], got["ref"], got["bytes"], got["chunks"]) == ("exec.tty.ack", 5, 3, 1)
        await layer.send(reader, {"type": "port.data", "data": "", "eof": True})
        assert json.loads(await comm.receive_from(timeout=10)) == {"type": "eof"}
        await layer.send(reader, {"type": "exec.tty.end", "exit_code": 0, "timed_out": False, "message": ""})
        assert json.loads(await comm.receive_from(timeout=10)) == {"type": "end", "timed_out": False}
        assert (await comm.receive_output(timeout=10))["code"] == 1000
        await comm.disconnect()

    _run(run())


def test_a_client_past_its_window_is_ended(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> tuple[dict[str, Any], int]:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, _ = await _open_after_started(layer, agent, token, w.pk)
        for _ in range(protocol.EXEC_TTY_WINDOW // protocol.PORT_CHUNK_BYTES):
            await comm.send_to(bytes_data=b"x" * protocol.PORT_CHUNK_BYTES)
        await comm.send_to(bytes_data=b"x")  # one byte more than the window, none acknowledged
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return frame, closed["code"]

    frame, code = _run(run())
    assert (frame["code"], code) == ("input_overflow", 4409)


async def _open_after_started(layer: Any, agent: str, token: str, pk: int) -> tuple[WebsocketCommunicator, str]:
    comm = WebsocketCommunicator(
        application, "/ws/port-forward/", headers=[(b"authorization", f"Token {token}".encode())]
    )
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps({"workload": pk, "port": 6006}))
    opened = await layer.receive(agent)
    await layer.send(opened["reply_to"], {"type": "exec.tty.opened", "agent": agent, "ref": 1})
    assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
    return comm, opened["reply_to"]


@pytest.mark.parametrize(
    ("error", "code", "words"),
    [
        (
            protocol.Error(code="exec_port_refused", message="Connection refused"),
            "port_refused",
            "Nothing listens on port 6006 in workload {pk} (Connection refused)",
        ),
        (
            protocol.Error(code=protocol.ERR_UNKNOWN_TYPE, message="unknown message type 'port_open'"),
            "agent_too_old",
            "must be upgraded",
        ),
        (
            protocol.Error(code="exec_not_running", message="the workload's attempt ended"),
            "not_running",
            "the workload's attempt ended",
        ),
    ],
)
def test_the_agents_refusals_in_the_apis_words(running, researcher, error, code, words) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> tuple[dict[str, Any], int]:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, reader = await _open_after_started(layer, agent, token, w.pk)
        await layer.send(reader, {**_exec_refusal(error), "type": "exec.tty.end"})
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return frame, closed["code"]

    frame, closed = _run(run())
    assert (frame["code"], closed) == (code, 4409)
    assert words.format(pk=w.pk) in frame["message"], frame


def test_a_forward_counts_once_in_the_exec_throttle_not_each_connection(running, researcher, monkeypatch) -> None:
    """pf63 (decision, docs/jobs.md): a browser opens a few connections per page and keeps opening
    them; each counted in ``FAIRWAY_THROTTLE_EXEC`` (30 a minute), TensorBoard's page stopped
    loading within a minute. A ``fairway port-forward`` run counts once, by the check it sends
    before it listens; its connections count in ``FAIRWAY_EXEC_MAX_SESSIONS`` (at once) only."""
    w, _attempt = running
    token = token_of(researcher)
    asked: list[bool] = []
    monkeypatch.setattr(ExecRateThrottle, "allow_request", lambda self, request, view: asked.append(True) or False)
    monkeypatch.setattr(ExecRateThrottle, "wait", lambda self: 30.0)
    frame, code = _run(_answer(token, {"workload": w.pk, "port": 6006, "check": True}))
    assert (frame["code"], code, len(asked)) == ("throttled", 4429, 1)

    async def connection() -> str:
        layer, agent = await _fake_agent(running[1].host_id)
        comm = WebsocketCommunicator(
            application, "/ws/port-forward/", headers=[(b"authorization", f"Token {token}".encode())]
        )
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps({"workload": w.pk, "port": 6006}))
        opened = await layer.receive(agent)  # asked of the agent: not throttled
        await comm.disconnect()
        return str(opened["type"])

    assert _run(connection()) == "port.open"
    assert len(asked) == 1


def test_a_forwards_final_check_is_not_counted_in_the_exec_throttle(
    running, researcher, submit_kwargs, monkeypatch
) -> None:
    """cli46: ``fairway port-forward`` asks the server why once the workload no longer runs (a
    check, for the server's words); with ``"check": true`` it counted a second time in
    ``FAIRWAY_THROTTLE_EXEC``, so a forward then an exec could be throttled by a request the person
    did not make. ``"check": "again"`` (a forward's later check) is answered as a check, uncounted
    (as its connections are: pf63); ``true`` stays the forward's one count."""
    w, attempt = running
    token = token_of(researcher)
    asked: list[bool] = []
    monkeypatch.setattr(ExecRateThrottle, "allow_request", lambda self, request, view: asked.append(True) or False)
    monkeypatch.setattr(ExecRateThrottle, "wait", lambda self: 30.0)
    assert _run(_answer(token, {"workload": w.pk, "port": 6006, "check": "again"})) == (
        {"type": "checked", "attempt": 1, "host": attempt.host.name},
        1000,
    )
    held = do_submit_workload(researcher, **submit_kwargs(hold=True))
    frame, code = _run(_answer(token, {"workload": held.pk, "port": 6006, "check": "again"}))
    assert (frame["code"], code) == ("not_running", 4409)
    assert "a port is reached only in a running attempt" in frame["message"], frame
    assert asked == []
    frame, code = _run(_answer(token, {"workload": w.pk, "port": 6006, "check": True}))  # the forward's one count
    assert (frame["code"], code, len(asked)) == ("throttled", 4429, 1)
