"""brk59: the server's side of ``exec`` on an agent's connection (scheduler.consumers)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agent import protocol
from scheduler.consumers import MAX_PENDING_EXECS, AgentConsumer, _PendingExec
from scheduler.models import Host


class _Layer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        self.sent.append((channel, message))


def test_execs_whose_requesters_gave_up_do_not_hold_the_connections_slots() -> None:
    """An exec the agent never answered (its task failed, a runtime error) stayed pending for the
    connection's life: 16 of them and every later exec on the host was answered ``busy`` until the
    agent reconnected. Past its requester's wait (the timeout and the grace) it is let go."""

    async def run() -> None:
        c = AgentConsumer()
        c.host, c.seq, c.hello_done, c.closing, c.socket_closed = Host(pk=988, name="h"), 100, True, False, False
        c.channel_layer = layer = _Layer()
        sent: list[protocol.Message] = []

        async def send_msg(msg: protocol.Message) -> None:
            c.seq += 1
            sent.append(msg)

        c.send_msg = send_msg  # type: ignore[method-assign]
        gone = time.monotonic() - 1
        c.exec_requests = {n: _PendingExec(f"stale-{n}", 10, deadline=gone) for n in range(MAX_PENDING_EXECS)}
        event = {"attempt_id": 5, "command": ["true"], "timeout_s": 10, "max_output": 100, "reply_to": "fresh"}
        await c.exec_request(event)
        assert layer.sent == [] and len(sent) == 1 and isinstance(sent[0], protocol.Exec)
        assert list(c.exec_requests) == [101]
        # live ones still count: the 17th is refused at once
        c.exec_requests = {n: _PendingExec(f"live-{n}", 10, deadline=time.monotonic() + 60) for n in range(16)}
        await c.exec_request({**event, "reply_to": "late"})
        assert layer.sent == [("late", {"type": "exec.reply", "error": "busy"})]

    asyncio.run(run())


def test_brk61_a_session_whose_reader_left_before_its_id_came_is_closed_by_its_channel() -> None:
    """brk61: the reader's close without a ``ref`` (it left before ``exec.tty.opened``) names its
    channel; the connection holding a session of that reader closes it, any other does nothing."""

    async def run() -> None:
        c = AgentConsumer()
        c.host, c.seq, c.hello_done, c.closing, c.socket_closed = Host(pk=989, name="h"), 10, True, False, False
        sent: list[protocol.Message] = []

        async def send_msg(msg: protocol.Message) -> None:
            sent.append(msg)

        c.send_msg = send_msg  # type: ignore[method-assign]
        c.tty_sessions = {4: "reader-a", 6: "reader-b"}
        await c.exec_tty_close({"type": "exec.tty.close", "reply_to": "reader-c"})
        assert sent == [] and c.tty_sessions == {4: "reader-a", 6: "reader-b"}
        await c.exec_tty_close({"type": "exec.tty.close", "reply_to": "reader-b"})
        assert sent == [protocol.ExecClose(ref=6)] and c.tty_sessions == {4: "reader-a"}

    asyncio.run(run())


def test_brk61_a_session_is_told_the_id_its_exec_tty_is_sent_with() -> None:
    """brk61: ``exec_tty_open`` took the next message id (``seq + 1``), told the reader, then sent
    the ``exec_tty``: a message the connection sent meanwhile (an ack of the inbox's task, the
    hub's flush of a start: other tasks) took that id, so the session was recorded under the
    other message's id, its output dropped and its input sent to no session of the agent's (the
    reader saw "started" and nothing more, the command ran to the idle timeout)."""

    async def run() -> None:
        c = AgentConsumer()
        c.host, c.seq, c.hello_done, c.closing, c.socket_closed = Host(pk=990, name="h"), 20, True, False, False
        c.tty_sessions, c.channel_name = {}, "agent-990"
        wire: list[dict[str, Any]] = []

        async def send(text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False) -> None:
            wire.append(json.loads(text_data or ""))

        c.send = send  # type: ignore[method-assign]

        class Layer(_Layer):
            async def send(self, channel: str, message: dict[str, Any]) -> None:
                await super().send(channel, message)
                await c.send_msg(protocol.Ack(ack=3))  # another task's message, while this one awaited

        c.channel_layer = layer = Layer()
        event = {"attempt_id": 5, "command": ["bash"], "rows": 24, "cols": 80, "idle_s": 60, "reply_to": "reader"}
        await c.exec_tty_open(event)
        ((_to, opened),) = layer.sent
        (tty,) = [m for m in wire if m["type"] == "exec_tty"]
        assert opened["ref"] == tty["id"] and c.tty_sessions == {tty["id"]: "reader"}

    asyncio.run(run())
