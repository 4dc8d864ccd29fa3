"""brk59: the server's side of ``exec`` on an agent's connection (scheduler.consumers)."""

from __future__ import annotations

import asyncio
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
