"""Keepalive pings on the agent link (docs/deploy.md §11): the agent pings every 20 s, the web
processes every 120 s, and each side still notices a dead peer.

The web processes' values are the same in ``manage.py serve``, the Procfile, the image's entry
point and the systemd unit. A real uvicorn with the websockets-sansio protocol of the Procfile,
its ping scaled down (the production ratio, interval twice the timeout), closes the socket of a
peer that stopped answering (an agent gone without a word) and keeps a live one that answers
(a websockets client, as the agent). The agent's side: tests/agent/test_agent_client.py.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from pathlib import Path
from typing import Any

import uvicorn
import websockets

from agent.client import PING_INTERVAL_S, PING_TIMEOUT_S
from scheduler.management.commands.serve import WS_PING_INTERVAL_S, WS_PING_TIMEOUT_S

REPO = Path(__file__).resolve().parents[1]
SCALE = 1 / 400  # 120 s / 60 s → 0.3 s / 0.15 s


def _ping_options(command: str) -> tuple[float, float]:
    found = dict(re.findall(r"--(ws-ping-interval|ws-ping-timeout)[ =](\S+)", command))
    return float(found["ws-ping-interval"]), float(found["ws-ping-timeout"])


def test_every_web_command_pings_as_serve_does_and_less_often_than_the_agent():
    """Given the four ways to start a web process, then each passes uvicorn the same keepalive as
    ``manage.py serve`` (120 s / 60 s), the agent pings more often (20 s / 20 s), and a dead agent's
    socket is closed before its host is lost (FAIRWAY_HOST_LOST_AFTER_S, 300 s)."""
    from django.conf import settings

    procfile = next(line for line in (REPO / "Procfile").read_text().splitlines() if line.startswith("web: "))
    entry = (REPO / "deploy" / "image" / "entrypoint.sh").read_text().split("\nweb)\n", 1)[1].split(";;", 1)[0]
    unit = next(
        line
        for line in (REPO / "deploy" / "systemd" / "fairway-web.service").read_text().splitlines()
        if line.startswith("ExecStart=")
    )
    for command in (procfile, entry, unit):
        assert _ping_options(command) == (WS_PING_INTERVAL_S, WS_PING_TIMEOUT_S), command
    assert (PING_INTERVAL_S, PING_TIMEOUT_S) == (20.0, 20.0)
    assert PING_INTERVAL_S < WS_PING_INTERVAL_S
    assert settings.FAIRWAY["HOST_LOST_AFTER_S"] > WS_PING_INTERVAL_S + WS_PING_TIMEOUT_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _with_server(scenario: Any) -> Any:
    """Run ``scenario(port, disconnects, gone)`` against a real uvicorn (websockets-sansio) whose ASGI
    app accepts every websocket and records each disconnect (close code, monotonic time; ``gone``
    set at the first)."""
    disconnects: list[tuple[int, float]] = []
    gone = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                disconnects.append((message.get("code", 0), time.monotonic()))
                gone.set()
                return

    port = _free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        ws="websockets-sansio",
        ws_ping_interval=WS_PING_INTERVAL_S * SCALE,
        ws_ping_timeout=WS_PING_TIMEOUT_S * SCALE,
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:  # noqa: ASYNC110 -- uvicorn's Server has a flag, no event
            await asyncio.sleep(0.01)
        return await scenario(port, disconnects, gone)
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


def test_the_web_process_closes_the_socket_of_an_agent_that_stopped_answering():
    """Given a web process's keepalive (scaled), when a peer completes the handshake and then
    reads and sends nothing (an agent gone without a word: power cut, partition), then the
    server closes its socket (1011, keepalive ping timeout) within one interval and one timeout."""

    async def scenario(port: int, disconnects: list[tuple[int, float]], gone: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /ws/agent/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        accepted = time.monotonic()
        bound = (WS_PING_INTERVAL_S + WS_PING_TIMEOUT_S) * SCALE
        try:
            await asyncio.wait_for(gone.wait(), bound + 5)
        except TimeoutError:
            raise AssertionError("the server kept the socket of a peer that answers no ping") from None
        assert disconnects[0][1] - accepted < bound + 1.0
        sent = await asyncio.wait_for(reader.read(), 5)  # everything the server wrote, to its EOF
        assert sent.startswith(b"\x89")  # its ping, never answered
        assert b"\x88" in sent and b"\x03\xf3keepalive ping timeout" in sent  # then its close, 1011
        writer.close()

    asyncio.run(_with_server(scenario))


def test_the_web_process_keeps_an_agent_that_answers_its_pings():
    """Given the same keepalive, when the peer is a websockets client that answers pings and pings
    on its own (the agent, scaled too), then the connection stays open over ten server intervals."""

    async def scenario(port: int, disconnects: list[tuple[int, float]], gone: asyncio.Event) -> None:
        async with websockets.connect(
            f"ws://127.0.0.1:{port}/ws/agent/",
            ping_interval=PING_INTERVAL_S * SCALE,
            ping_timeout=PING_TIMEOUT_S * SCALE,
        ) as ws:
            await asyncio.sleep(WS_PING_INTERVAL_S * SCALE * 10)
            assert disconnects == []
            await ws.ping()  # still answered: the connection is alive on both sides

    asyncio.run(_with_server(scenario))
