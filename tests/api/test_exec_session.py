"""``/ws/exec/`` (scheduler.exec_session; docs/jobs.md, "Run a command in a running workload"): the
API's token, the one-shot exec's checks and codes (owner only, not_running, host_offline,
agent_too_old, throttled), then the relay to the agent's connection through the channel layer
(stdin, resize, acknowledged output, the exit code; the reader leaving closes the session). The
agent's connection is played here by a channel in the host's group; the real one, with a real
agent: tests/e2e/test_exec_tty_e2e.py."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from channels.db import aclose_old_connections
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from accounts.services import create_api_token
from agent import protocol
from config.asgi import application
from config.throttling import ExecRateThrottle
from scheduler import exec_session, gateway
from scheduler.consumers import _exec_refusal
from scheduler.models import Attempt, Host
from scheduler.services import do_submit_workload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def running(started_workload: tuple[Any, Attempt]) -> tuple[Any, Attempt]:
    return started_workload


def token_of(user: Any) -> str:
    return create_api_token(user)[1]


def _run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await aclose_old_connections()

    return asyncio.run(main())


async def _open(token: str | None, first: dict[str, Any]) -> tuple[WebsocketCommunicator, dict[str, Any]]:
    headers = [(b"authorization", f"Token {token}".encode())] if token else []
    comm = WebsocketCommunicator(application, "/ws/exec/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_to(text_data=json.dumps(first))
    return comm, json.loads(await comm.receive_from(timeout=10))


async def _refused(token: str | None, first: dict[str, Any]) -> tuple[dict[str, Any], int]:
    comm, frame = await _open(token, first)
    closed = await comm.receive_output(timeout=10)
    await comm.disconnect()  # as above: it ends by itself, not cancelled
    return frame, closed.get("code")


def first_frame(w: Any, **more: Any) -> dict[str, Any]:
    return {"workload": w.pk, "command": ["bash"], "tty": True, "rows": 30, "cols": 100, **more}


def test_without_a_token_it_is_refused() -> None:
    async def run() -> Any:
        comm = WebsocketCommunicator(application, "/ws/exec/")
        assert (await comm.connect())[0]
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        # the consumer told its socket went, so it ends by itself: cancelled by asyncio.run's
        # close instead, the channel layer's receive (Redis in CI) kept the run waiting past 60 s
        await comm.disconnect()
        return frame, closed["code"]

    frame, code = _run(run())
    assert (frame["code"], code) == ("not_authenticated", 4401)


@pytest.mark.parametrize("who", ["teammate", "admin"])
def test_nobody_but_the_owner_may_open_a_session(running, who, request) -> None:
    w, _attempt = running
    frame, code = _run(_refused(token_of(request.getfixturevalue(who)), first_frame(w)))
    assert (frame["type"], frame["code"], code) == ("error", "forbidden", 4403)


def test_the_one_shot_execs_refusals(running, researcher, submit_kwargs, monkeypatch) -> None:
    w, attempt = running
    token = token_of(researcher)
    held = do_submit_workload(researcher, **submit_kwargs(hold=True))
    assert _run(_refused(token, first_frame(held)))[0]["code"] == "not_running"
    assert _run(_refused(token, first_frame(w, attempt=2)))[0]["code"] == "not_running"
    assert _run(_refused(token, {**first_frame(w), "workload": 10**9}))[0]["code"] == "not_found"
    assert _run(_refused(token, first_frame(w, command=[])))[0]["code"] == "invalid_command"
    assert _run(_refused(token, first_frame(w, tty="yes")))[0]["code"] == "invalid_tty"
    assert _run(_refused(token, first_frame(w, rows=0)))[0]["code"] == "invalid_size"
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.OFFLINE)
    assert _run(_refused(token, first_frame(w))) == (
        {"type": "error", "code": "host_offline", "message": f"Host {attempt.host.name} of attempt 1 is offline."},
        4409,
    )
    monkeypatch.setattr(ExecRateThrottle, "allow_request", lambda self, request, view: False)
    monkeypatch.setattr(ExecRateThrottle, "wait", lambda self: 30.0)
    frame, code = _run(_refused(token, first_frame(w)))
    assert (frame["code"], code) == ("throttled", 4429)


async def _take(layer: Any, reader: str, opened: dict[str, Any], agent: str, ref: int) -> None:
    """The fake agent's connection takes the session it was asked to open as ``ref``; one asked as
    ``exec.pipe.open`` (pf63) is started then by its agent (``exec.started``: its reader's
    ``started`` comes only then, once the command runs)."""
    await layer.send(reader, {"type": "exec.tty.opened", "agent": agent, "ref": ref})
    if opened["type"] == "exec.pipe.open":
        await layer.send(reader, {"type": "exec.started"})


async def _fake_agent(host_id: int) -> tuple[Any, str]:
    """A channel in the host's group that plays its agent's connection: one of this process's
    ``specific.…!`` channels, as the real agent's connection is, whose messages channels-redis pops
    from one list for all of them (a stream consumer's cancelled read once lost the close it had
    just sent here: stream63, tests/api/test_stream63_layer_read.py)."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(gateway.host_group(host_id), channel)
    return layer, channel


def test_the_session_is_relayed_to_the_agents_connection_and_back(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        headers = [(b"authorization", f"Token {token}".encode())]
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=headers)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        assert (opened["type"], opened["tty"]) == ("exec.pipe.open", True)  # pf63: bytes as they are
        assert (opened["attempt_id"], opened["command"], opened["rows"], opened["cols"]) == (
            attempt.wire_id,
            ["bash"],
            30,
            100,
        )
        assert opened["idle_s"] == 3600
        reader = opened["reply_to"]
        await _take(layer, reader, opened, agent, 7)
        assert json.loads(await comm.receive_from(timeout=10)) == {"type": "started", "attempt": 1, "host": "a100-1"}
        await comm.send_to(bytes_data="é\n".encode())
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"], base64.b64decode(got["data"]), got["eof"]) == (
            "exec.data",
            7,
            "é\n".encode(),
            False,
        )
        await comm.send_to(text_data=json.dumps({"type": "resize", "rows": 50, "cols": 132}))
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["rows"], got["cols"]) == ("exec.tty.resize", 50, 132)
        await layer.send(reader, {"type": "exec.tty.output", "data": "héllo\r\n"})
        assert await comm.receive_output(timeout=10) == {"type": "websocket.send", "bytes": "héllo\r\n".encode()}
        got = await asyncio.wait_for(layer.receive(agent), 10)  # delivered: the agent may send more
        assert (got["type"], got["bytes"], got["chunks"]) == ("exec.tty.ack", len("héllo\r\n".encode()), 1)
        await layer.send(reader, {"type": "exec.tty.end", "exit_code": 3, "timed_out": False, "message": ""})
        assert json.loads(await comm.receive_from(timeout=10)) == {"type": "exit", "exit_code": 3, "timed_out": False}
        assert (await comm.receive_output(timeout=10))["code"] == 1000
        await comm.disconnect()  # it ends by itself, not cancelled (see test_without_a_token_it_is_refused)

    _run(run())


def test_the_reader_leaving_closes_the_session(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, _ = None, None
        headers = [(b"authorization", f"Token {token}".encode())]
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=headers)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        await _take(layer, opened["reply_to"], opened, agent, 9)
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 9)

    _run(run())


def test_an_agent_older_than_sessions_must_be_upgraded(running, researcher) -> None:
    """An agent older than ``exec_pipe`` (pf63) answers it ``unknown_type``: the session is opened
    again as ``exec_tty``, its terminal's text (the reader told ``started`` then, its input sent as
    text); an agent older than ``exec_tty`` answers that too: it must be upgraded."""
    w, attempt = running
    token = token_of(researcher)
    old = _exec_refusal(protocol.Error(code=protocol.ERR_UNKNOWN_TYPE, message="unknown message type 'exec_tty'"))

    async def run() -> tuple[dict[str, Any], int]:
        layer, agent = await _fake_agent(attempt.host_id)
        headers = [(b"authorization", f"Token {token}".encode())]
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=headers)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        assert opened["type"] == "exec.pipe.open"
        await layer.send(opened["reply_to"], {"type": "exec.tty.opened", "agent": agent, "ref": 1})
        await layer.send(opened["reply_to"], {**old, "type": "exec.tty.end"})
        again = await asyncio.wait_for(layer.receive(agent), 10)
        assert (again["type"], again["reply_to"], again["command"]) == ("exec.tty.open", opened["reply_to"], ["bash"])
        await layer.send(again["reply_to"], {"type": "exec.tty.opened", "agent": agent, "ref": 2})
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        await comm.send_to(bytes_data="é\n".encode())
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"], got["data"]) == ("exec.tty.input", 2, "é\n")
        await layer.send(again["reply_to"], {**old, "type": "exec.tty.end"})
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        await comm.disconnect()  # it ends by itself, not cancelled (see test_without_a_token_it_is_refused)
        return frame, closed["code"]

    frame, code = _run(run())
    assert (frame["code"], code) == ("agent_too_old", 4409)
    assert "must be upgraded" in frame["message"]


def test_bytes_go_as_they_are_on_a_terminal_and_piped(running, researcher) -> None:
    """pf63: bytes 0x80-0xff (not UTF-8) both ways, as they are (they read U+FFFD); piped
    (``"tty": false``), each output frame led by its stream's byte, input within the window of
    the agent's acknowledgements, its end (``eof``) passed on."""
    w, attempt = running
    token = token_of(researcher)
    high = bytes(range(0x80, 0x100))

    async def run(tty: bool, ref: int) -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w, tty=tty)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        assert (opened["type"], opened["tty"]) == ("exec.pipe.open", tty)
        reader = opened["reply_to"]
        await layer.send(reader, {"type": "exec.tty.opened", "agent": agent, "ref": ref})
        assert await comm.receive_nothing(0.2)  # not started before its command runs
        await layer.send(reader, {"type": "exec.started"})
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        await comm.send_to(bytes_data=high)
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"], base64.b64decode(got["data"])) == ("exec.data", ref, high)
        await layer.send(
            reader, {"type": "exec.data", "stream": "stderr", "data": base64.b64encode(high).decode(), "eof": False}
        )
        lead = b"" if tty else b"\x02"
        assert await comm.receive_output(timeout=10) == {"type": "websocket.send", "bytes": lead + high}
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["bytes"]) == ("exec.tty.ack", 128)
        if not tty:
            await layer.send(reader, {"type": "port.ack", "bytes": 128, "chunks": 1})  # the command took it
            assert json.loads(await comm.receive_from(timeout=10)) == {"type": "ack", "bytes": 128, "chunks": 1}
            for _ in range(33):  # one past the window's 32 frames, unacknowledged
                await comm.send_to(bytes_data=b"x")
            frame = json.loads(await comm.receive_from(timeout=10))
            assert (frame["type"], frame["code"]) == ("error", "input_overflow"), frame
        else:
            await comm.send_to(text_data=json.dumps({"type": "eof"}))
            got = await asyncio.wait_for(layer.receive(agent), 10)
            assert (got["type"], got["data"], got["eof"]) == ("exec.data", "", True)
        await comm.disconnect()

    async def both() -> None:  # one event loop: the Redis layer's locks are bound to theirs
        await run(True, 21)
        await run(False, 22)

    _run(both())


def test_no_agent_taking_the_session_is_host_offline(running, researcher, monkeypatch) -> None:
    w, _attempt = running
    monkeypatch.setattr(exec_session, "OPEN_WAIT_S", 0.2)
    frame, code = _run(_refused(token_of(researcher), first_frame(w)))
    assert (frame["code"], code) == ("host_offline", 4409)


async def _started(token: str, w: Any, host_id: int, ref: int = 5) -> tuple[WebsocketCommunicator, Any, str, str]:
    """A session the fake agent connection (:func:`_fake_agent`) took: (reader's socket, layer,
    the agent's channel, the reader's channel)."""
    layer, agent = await _fake_agent(host_id)
    comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps(first_frame(w)))
    opened = await asyncio.wait_for(layer.receive(agent), 10)
    await _take(layer, opened["reply_to"], opened, agent, ref)
    assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
    return comm, layer, agent, opened["reply_to"]


@pytest.mark.parametrize("size", ["Infinity", "-Infinity", "NaN", '"x"', "1e400"])
def test_brk61_a_resize_of_no_number_is_ignored_and_the_session_goes_on(running, researcher, size) -> None:
    """brk61: ``{"type": "resize", "rows": Infinity}`` (JSON as Python reads it) raised
    OverflowError out of the consumer: the socket closed 1011 and the agent's session was never
    closed (its shell lived on until the idle timeout, an hour)."""
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        comm, layer, agent, _reader = await _started(token, w, attempt.host_id)
        await comm.send_to(text_data=f'{{"type": "resize", "rows": {size}, "cols": 80}}')
        await comm.send_to(text_data=json.dumps({"type": "resize", "rows": 40, "cols": 90}))
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["rows"], got["cols"]) == ("exec.tty.resize", 40, 90)
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert got["type"] == "exec.tty.close"

    _run(run())


@pytest.mark.parametrize("how", ["reader_left", "not_taken_in_time"])
def test_brk61_a_session_its_reader_left_before_it_started_is_closed_on_the_host(
    running, researcher, monkeypatch, how
) -> None:
    """brk61: a reader that left (Ctrl-C while ``fairway exec -it`` waited, or the 10 s wait for
    the agent's connection passed) before the agent's connection told it the session's id closed
    nothing: the ``exec.tty.opened`` came to a channel nobody read, and the command ran on in the
    attempt until the idle timeout (an hour), holding one of its owner's sessions on the host.
    The reader's leaving goes to the host's group too, naming its channel."""
    w, attempt = running
    token = token_of(researcher)
    monkeypatch.setattr(exec_session, "OPEN_WAIT_S", 0.2 if how == "not_taken_in_time" else 30)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        if how == "not_taken_in_time":
            assert json.loads(await comm.receive_from(timeout=10))["code"] == "host_offline"
            await comm.receive_output(timeout=10)
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert got == {"type": "exec.tty.close", "reply_to": opened["reply_to"]}

    _run(run())


def test_brk61_output_to_a_reader_gone_meanwhile_closes_the_session(running, researcher, monkeypatch) -> None:
    """brk61: output sent as the reader's socket went (uvicorn raises ClientDisconnected to the
    send, before the consumer is told of the disconnect) ended the consumer with that exception:
    its disconnect never ran, the agent was never told, and the command (``yes``, a build) ran on
    blocked on its window until the idle timeout, an hour."""
    from uvicorn.protocols.utils import ClientDisconnected

    w, attempt = running
    token = token_of(researcher)
    sent = exec_session.ExecSessionConsumer.send

    async def send(self: Any, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False):
        if bytes_data is not None:
            raise ClientDisconnected
        await sent(self, text_data=text_data, bytes_data=bytes_data, close=close)

    async def run() -> None:
        comm, layer, agent, reader = await _started(token, w, attempt.host_id, ref=11)
        monkeypatch.setattr(exec_session.ExecSessionConsumer, "send", send)
        await layer.send(reader, {"type": "exec.tty.output", "data": "y\r\n" * 100})
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 11)
        await comm.disconnect()

    _run(run())


@pytest.mark.parametrize("how", ["logout", "deactivated"])
def test_brk61_a_session_whose_token_is_no_longer_valid_ends(running, researcher, monkeypatch, how) -> None:
    """brk61: the token was checked once, at the connect: after ``fairway logout`` (its token
    deleted) or the user's deactivation the session went on, as long as anything went in or out."""
    from asgiref.sync import sync_to_async
    from knox.models import AuthToken

    w, attempt = running
    token = token_of(researcher)
    monkeypatch.setattr(exec_session, "TOKEN_RECHECK_S", 0.2)

    def revoke() -> None:
        if how == "logout":
            AuthToken.objects.filter(user=researcher).delete()
        else:
            researcher.is_active = False
            researcher.save(update_fields=["is_active"])

    async def run() -> tuple[dict[str, Any], int]:
        comm, layer, agent, _reader = await _started(token, w, attempt.host_id, ref=12)
        await asyncio.sleep(0.5)  # checked again meanwhile: still valid
        await comm.send_to(bytes_data=b"x")
        assert (await asyncio.wait_for(layer.receive(agent), 10))["type"] == "exec.data"
        await sync_to_async(revoke)()
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 12)
        await comm.disconnect()
        return frame, closed["code"]

    frame, code = _run(run())
    assert (frame["type"], frame["code"], code) == ("error", "authentication_failed", 4401)
    assert frame["message"].endswith("The session was ended.")


def test_brk61_the_exit_says_why_the_agent_ended_the_command(running, researcher) -> None:
    """brk61: the agent's reason for ending a session (input its command did not read past the
    bound) is passed on in the ``exit`` frame; without one, the frame is as before."""
    w, attempt = running
    token = token_of(researcher)
    why = "the session was ended: more than 262144 bytes of input the command does not read"

    async def run() -> dict[str, Any]:
        comm, layer, _agent, reader = await _started(token, w, attempt.host_id)
        await layer.send(reader, {"type": "exec.tty.end", "exit_code": 129, "timed_out": False, "message": why})
        frame = json.loads(await comm.receive_from(timeout=10))
        await comm.receive_output(timeout=10)
        await comm.disconnect()
        return frame

    assert _run(run()) == {"type": "exit", "exit_code": 129, "timed_out": False, "message": why}
