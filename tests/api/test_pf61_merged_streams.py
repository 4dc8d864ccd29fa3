"""pf61 after exl61 and brk61: a forwarded connection (``/ws/port-forward/``) has what main gave the
interactive session, in their shared base (scheduler.exec_session.AttemptStreamConsumer): a gang
member's port by ``rank``, one count with the sessions in ``FAIRWAY_EXEC_MAX_SESSIONS`` (its
checks-only frame not counted), the token's recheck, a stalled reader's end, the abandon of one
left before its id came, and the agent's reason in its end frame."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from config.asgi import application
from fairway_cli.portforward import Forward
from scheduler import exec_session
from scheduler.port_forward import PortForwardConsumer
from tests.api.test_exec_session import _fake_agent, _run, _take, first_frame, running, token_of
from tests.api.test_exl61_exec import gang

__all__ = ["gang", "running"]  # fixtures, used by name
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

PATH = "/ws/port-forward/"


def _comm(token: str, path: str = PATH) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=[(b"authorization", f"Token {token}".encode())])


async def _started(token: str, pk: int, host_id: int, ref: int, **first: Any) -> tuple[Any, Any, str, str]:
    layer, agent = await _fake_agent(host_id)
    comm = _comm(token)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps({"workload": pk, "port": 6006, **first}))
    opened = await asyncio.wait_for(layer.receive(agent), 10)
    assert opened["type"] == "port.open", opened
    await layer.send(opened["reply_to"], {"type": "exec.tty.opened", "agent": agent, "ref": ref})
    started = json.loads(await comm.receive_from(timeout=10))
    assert started["type"] == "started", started
    return comm, layer, agent, opened["reply_to"]


def test_a_forward_reaches_the_port_of_the_rank_asked(gang, researcher) -> None:
    w, attempt, (_first, second) = gang
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(second.pk)
        comm = _comm(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps({"workload": w.pk, "port": 6006, "rank": 1}))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        assert (opened["type"], opened["attempt_id"], opened["port"]) == ("port.open", attempt.wire_id, 6006)
        await layer.send(opened["reply_to"], {"type": "exec.tty.opened", "agent": agent, "ref": 3})
        assert json.loads(await comm.receive_from(timeout=10)) == {"type": "started", "attempt": 1, "host": second.name}
        await comm.disconnect()

    _run(run())
    first = {"workload": w.pk, "port": 6006, "rank": 2}
    frame, code = _run(_answered(token, first))
    assert (frame["code"], code) == ("invalid_rank", 4400)
    assert "rank 0 to 1" in frame["message"], frame
    assert Forward("s", "t", "ua", w.pk, None, 6006, rank=1).first()["rank"] == 1  # the CLI's --rank
    assert "rank" not in Forward("s", "t", "ua", w.pk, None, 6006).first()


async def _answered(token: str, first: dict[str, Any]) -> tuple[dict[str, Any], int]:
    comm = _comm(token)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps(first))
    frame = json.loads(await comm.receive_from(timeout=10))
    closed = await comm.receive_output(timeout=10)
    await comm.disconnect()
    return frame, closed.get("code")


def test_forwarded_connections_and_sessions_count_together_in_the_cap(running, researcher, settings) -> None:
    w, attempt = running
    settings.FAIRWAY_EXEC_MAX_SESSIONS = 2  # one person: 1
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm = _comm(token, "/ws/exec/")
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        await _take(layer, opened["reply_to"], opened, agent, 3)
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        frame, code = await _answered(token, {"workload": w.pk, "port": 6006})
        assert (frame["code"], code) == ("exec_busy", 4429), frame
        assert "1 interactive session(s) and forwarded connection(s)" in frame["message"], frame
        # the CLI's check (nothing opened) is answered all the same, and not counted
        checked, code = await _answered(token, {"workload": w.pk, "port": 6006, "check": True})
        assert (checked["type"], code) == ("checked", 1000), checked
        assert exec_session.sessions_held() == 1
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)  # the session's close, nothing of the check's
        assert (got["type"], got.get("ref")) == ("exec.tty.close", 3), got
        assert exec_session.sessions_held() == 0

    _run(run())
    assert exec_session.sessions_held() == 0


def test_a_forward_whose_token_ended_is_ended(running, researcher, monkeypatch) -> None:
    from asgiref.sync import sync_to_async
    from knox.models import AuthToken

    w, attempt = running
    token = token_of(researcher)
    monkeypatch.setattr(exec_session, "TOKEN_RECHECK_S", 0.2)

    async def run() -> tuple[dict[str, Any], int]:
        comm, layer, agent, _reader = await _started(token, w.pk, attempt.host_id, ref=12)
        await sync_to_async(AuthToken.objects.filter(user=researcher).delete)()
        frame = json.loads(await comm.receive_from(timeout=10))
        closed = await comm.receive_output(timeout=10)
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 12)
        await comm.disconnect()
        return frame, closed["code"]

    frame, code = _run(run())
    assert (frame["code"], code) == ("authentication_failed", 4401)
    assert frame["message"].endswith("The connection was ended."), frame
    assert exec_session.sessions_held() == 0


def test_a_forward_whose_reader_stopped_reading_is_ended(running, researcher, monkeypatch) -> None:
    w, attempt = running
    token = token_of(researcher)
    monkeypatch.setattr(exec_session, "READER_STALL_S", 0.3)

    async def run() -> None:
        comm, layer, agent, reader = await _started(token, w.pk, attempt.host_id, ref=4)

        async def stuck(self: Any, text_data: Any = None, bytes_data: Any = None, close: Any = False) -> None:
            if bytes_data is not None:
                await asyncio.sleep(3600)  # uvicorn's send waiting for a buffer that never drains

        monkeypatch.setattr(PortForwardConsumer, "send", stuck)
        await layer.send(reader, {"type": "port.data", "data": "eHh4", "eof": False})
        got = await asyncio.wait_for(layer.receive(agent), 5)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 4)
        await comm.disconnect()

    _run(run())
    assert exec_session.sessions_held() == 0


def test_a_forward_left_before_its_id_came_is_abandoned_and_its_end_says_why(running, researcher) -> None:
    w, attempt = running
    token = token_of(researcher)

    async def run() -> dict[str, Any]:
        layer, agent = await _fake_agent(attempt.host_id)
        comm = _comm(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps({"workload": w.pk, "port": 6006}))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        await comm.disconnect()
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert got == {"type": "exec.tty.close", "reply_to": opened["reply_to"]}
        comm, layer, agent, reader = await _started(token, w.pk, attempt.host_id, ref=5)
        await layer.send(reader, {"type": "exec.tty.end", "exit_code": 0, "message": "Connection reset by peer"})
        end = json.loads(await comm.receive_from(timeout=10))
        await comm.disconnect()
        return end

    assert _run(run()) == {"type": "end", "timed_out": False, "message": "Connection reset by peer"}
    assert exec_session.sessions_held() == 0
