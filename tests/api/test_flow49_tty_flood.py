"""flow49: a terminal session's input (``fairway exec -it``) had no window, only a piped one's had
(pf63). A reader flooding input faster than the host's agent connection relays it filled that
connection's channel-layer channel (channels-redis: ``capacity`` messages), and while it was full the
host's group messages (another workload's start/stop push, other sessions' opens, a revoked token's
close) were dropped by channels-redis without a word. Now a terminal's input is held to the piped
window too (acknowledged by the agent's connection once relayed to the agent), and one past it is
ended ``input_overflow``: at most ``EXEC_TTY_WINDOW_CHUNKS`` messages of a session wait there.

On the real Redis channel layer (``REDIS_URL``, else the local Redis's db 9; skipped without one)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import queue
import threading
import time
import uuid
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from accounts.services import create_api_token
from agent.protocol import EXEC_TTY_WINDOW_CHUNKS
from config.asgi import application
from fairway_cli.session import READ_BYTES, relay
from fairway_cli.wsclient import OP_CLOSE, OP_TEXT
from scheduler import gateway
from scheduler.consumers import AgentConsumer
from tests.api.test_exec_session import _run, first_frame
from tests.e2e.test_redis_log_tails import _redis_answers

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/9"
CAPACITY = 200
"""The channels' capacity here (production's is 1,000: config/settings.py); the flood goes past it."""

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
]


@pytest.fixture
def redis_layer(settings: Any) -> None:
    if not _redis_answers(REDIS_URL):
        pytest.skip(f"no Redis at {REDIS_URL}")
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],  # as config/settings.py
                "prefix": f"fw-flow49-{uuid.uuid4().hex[:12]}",
                "capacity": CAPACITY,
                "expiry": 10,
            },
        }
    }


def test_a_flooding_terminal_session_costs_no_push_of_its_host(redis_layer, started_workload, researcher) -> None:
    w, attempt = started_workload
    token = create_api_token(researcher)[1]

    async def run() -> None:
        layer = get_channel_layer()
        assert type(layer).__name__ == "RedisChannelLayer"
        agent = await layer.new_channel()  # the host's agent connection, its link slower than the reader
        await layer.group_add(gateway.host_group(attempt.host_id), agent)
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))  # a terminal's session
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        reader = opened["reply_to"]
        await layer.send(reader, {"type": "exec.tty.opened", "agent": agent, "ref": 9, "acks_relayed": True})
        await layer.send(reader, {"type": "exec.started"})
        started = json.loads(await comm.receive_from(timeout=10))
        assert (started["type"], started.get("window")) == ("started", True)  # the reader is told to wait
        # another workload of the host is placed: its push (gateway.push_desired_state), not yet
        # read by the agent's connection, whose link to the agent is slower than the reader's
        await layer.group_send(gateway.host_group(attempt.host_id), {"type": "desired.state"})
        for rows in range(1, CAPACITY + 50):  # and resizes: one at a time on their way, the latest kept
            await comm.send_to(text_data=json.dumps({"type": "resize", "rows": rows, "cols": 80}))
        for _ in range(CAPACITY + 50):  # a paste (or a script) that never waits for anything
            await comm.send_to(bytes_data=b"x")
        await comm.receive_nothing(timeout=3)  # the session relays what it takes meanwhile (or says it ended)
        kinds: list[str] = []
        while True:
            try:
                kinds.append((await asyncio.wait_for(layer.receive(agent), 0.5))["type"])
            except TimeoutError:
                break
        assert "desired.state" in kinds, f"the push was dropped: {len(kinds)} messages of the session waited"
        assert kinds.count("exec.data") <= EXEC_TTY_WINDOW_CHUNKS
        assert kinds.count("exec.tty.resize") == 1
        frame = json.loads(await comm.receive_from(timeout=10))
        assert (frame["type"], frame["code"]) == ("error", "input_overflow"), frame
        assert "ahead of the acks" in frame["message"]
        await comm.disconnect()

    _run(run())


def test_a_terminal_sessions_input_is_acknowledged_once_relayed_to_the_agent() -> None:
    """The agent's connection acknowledges a terminal's input to its reader once sent on to the
    agent (``relay_ack``: the bytes); a piped session's is acknowledged by the agent, once written."""
    sent: list[Any] = []
    told: list[tuple[str, dict[str, Any]]] = []

    class Layer:
        async def send(self, channel: str, message: dict[str, Any]) -> None:
            told.append((channel, message))

    consumer = AgentConsumer()
    consumer.tty_sessions = {9: "reader!1"}
    consumer.channel_layer = Layer()
    consumer.host = None

    async def send_msg(msg: Any, seq: int | None = None) -> None:
        sent.append(msg)

    consumer.send_msg = send_msg  # type: ignore[method-assign]
    data = base64.b64encode(b"abc").decode()

    async def run() -> None:
        await consumer.exec_data({"type": "exec.data", "ref": 9, "data": data, "eof": False, "relay_ack": 3})
        await consumer.exec_data({"type": "exec.data", "ref": 9, "data": data, "eof": False})  # piped
        await consumer.exec_tty_input({"type": "exec.tty.input", "ref": 9, "data": "é", "relay_ack": 2})
        await consumer.exec_tty_resize({"type": "exec.tty.resize", "ref": 9, "rows": 5, "cols": 6, "relay_ack": 0})

    asyncio.run(run())
    assert [type(m).__name__ for m in sent] == ["ExecData", "ExecData", "ExecInput", "ExecResize"]
    assert told == [
        ("reader!1", {"type": "port.ack", "bytes": 3, "chunks": 1}),
        ("reader!1", {"type": "port.ack", "bytes": 2, "chunks": 1}),
        ("reader!1", {"type": "port.ack", "bytes": 0, "chunks": 0, "resized": True}),
    ]


class _Server:
    """The server's side of a terminal session for ``relay``: it records the input frames and answers
    what the test queues (``ack``s, then the exit)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.frames: queue.Queue[tuple[int, bytes]] = queue.Queue()

    def send_binary(self, data: bytes) -> None:
        self.sent.append(data)

    def send_text(self, text: str) -> None:
        pass

    def recv(self) -> tuple[int, bytes]:
        return self.frames.get(timeout=10)

    def close(self, code: int = 1000) -> None:
        pass


def test_the_cli_holds_a_terminals_input_to_the_window_the_server_announced() -> None:
    """``fairway exec -it`` (``relay``) with ``window`` (the server's ``started`` said so) sends at
    most ``EXEC_TTY_WINDOW_CHUNKS`` frames ahead of the ``ack``s, the rest once they come."""
    server = _Server()
    read_end, write_end = os.pipe()
    paste = b"y" * (READ_BYTES * (EXEC_TTY_WINDOW_CHUNKS + 8))
    writer = threading.Thread(target=lambda: (os.write(write_end, paste), os.close(write_end)), daemon=True)
    writer.start()
    result: list[int] = []
    relaying = threading.Thread(
        target=lambda: result.append(relay(server, read_end, io.BytesIO(), raw=False, window=True))
    )  # type: ignore[arg-type]
    relaying.start()
    deadline = time.monotonic() + 5
    while len(server.sent) < EXEC_TTY_WINDOW_CHUNKS and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(server.sent) == EXEC_TTY_WINDOW_CHUNKS  # no ack yet: no more
    for _ in range(EXEC_TTY_WINDOW_CHUNKS + 9):  # the paste's frames and the end of file's
        server.frames.put((OP_TEXT, json.dumps({"type": "ack", "bytes": READ_BYTES, "chunks": 1}).encode()))
    deadline = time.monotonic() + 5
    while b"".join(server.sent) != paste + b"\x04" and time.monotonic() < deadline:
        time.sleep(0.01)
    server.frames.put((OP_TEXT, b'{"type": "exit", "exit_code": 0}'))
    server.frames.put((OP_CLOSE, b""))
    relaying.join(10)
    os.close(read_end)
    assert b"".join(server.sent) == paste + b"\x04"
    assert result == [0]


def test_resizes_go_one_at_a_time_the_latest_kept(started_workload, researcher) -> None:
    """A resize relayed (``resized``) lets the next go: the latest asked for meanwhile, none between."""
    w, attempt = started_workload
    token = create_api_token(researcher)[1]

    async def run() -> None:
        layer = get_channel_layer()
        agent = await layer.new_channel()
        await layer.group_add(gateway.host_group(attempt.host_id), agent)
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w)))
        reader = (await asyncio.wait_for(layer.receive(agent), 10))["reply_to"]
        await layer.send(reader, {"type": "exec.tty.opened", "agent": agent, "ref": 9, "acks_relayed": True})
        await layer.send(reader, {"type": "exec.started"})
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        for rows in (10, 11, 12):
            await comm.send_to(text_data=json.dumps({"type": "resize", "rows": rows, "cols": 80}))
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["rows"], got["relay_ack"]) == ("exec.tty.resize", 10, 0)
        await layer.send(reader, {"type": "port.ack", "bytes": 0, "chunks": 0, "resized": True})
        got = await asyncio.wait_for(layer.receive(agent), 10)
        assert (got["type"], got["rows"]) == ("exec.tty.resize", 12)
        assert await comm.receive_nothing(0.1)  # nothing of it told to the reader
        await comm.disconnect()

    _run(run())
