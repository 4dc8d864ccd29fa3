"""stream63: an interactive session's or forward's end on its way to the agent.

A stream's consumer (``/ws/exec/``, ``/ws/port-forward/``) closing sends the agent's connection
``exec.tty.close``, then stopped; Channels' own ``__call__`` then cancelled the consumer's
channel-layer read. On channels-redis one read of the process holds the process's shared Redis
read (a BZPOPMIN of every ``specific.<prefix>!`` channel, the agents' connections' in the same web
process too): cancelled just after Redis popped a message, that message was lost, the very close
sent to the agent's connection at times (its command ran on to the idle timeout;
tests/api/test_exl61_exec.py's cap test failed now and then on Redis). The read is now ended by a
read-end message to the consumer's own channel, as an agent connection's (sig28,
``scheduler.layer_read``), never cancelled: counted here, on whichever layer the tests run.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from config.asgi import application
from scheduler import exec_session
from tests.api.test_exec_session import _fake_agent, _run, _take, first_frame, running, token_of

__all__ = ["running"]  # a fixture, used by name
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.mark.parametrize("path", ["/ws/exec/", "/ws/port-forward/"])
def test_a_streams_end_reaches_the_agent_and_its_layer_read_is_never_cancelled(
    path, running, researcher, monkeypatch
) -> None:
    w, attempt = running
    token = token_of(researcher)
    first = first_frame(w) if path == "/ws/exec/" else {"workload": w.pk, "port": 6006}

    async def run() -> tuple[list[str], str, dict[str, Any], bool]:
        layer = get_channel_layer()
        receive = layer.receive
        cancelled: list[str] = []

        async def counted(channel: str) -> dict[str, Any]:
            try:
                return await receive(channel)
            except asyncio.CancelledError:
                cancelled.append(channel)
                raise

        monkeypatch.setattr(layer, "receive", counted)
        layer, agent = await _fake_agent(attempt.host_id)
        comm = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        await _take(layer, opened["reply_to"], opened, agent, 9)
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        # When the reader leaves
        await comm.disconnect(timeout=20)
        # Then its close reaches the agent's connection, and the consumer ended on its own
        closed = await asyncio.wait_for(layer.receive(agent), 10)
        ended_itself = comm.future.done() and not comm.future.cancelled()
        return cancelled, opened["reply_to"], closed, ended_itself

    cancelled, stream, closed, ended_itself = _run(run())
    assert (closed["type"], closed["ref"]) == ("exec.tty.close", 9), closed
    assert stream not in cancelled, "the stream consumer's channel-layer read was cancelled"
    assert ended_itself
    assert exec_session.sessions_held() == 0
