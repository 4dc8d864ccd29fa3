"""exl61, end to end with a real agent: an interactive session whose reader vanished without a word
(no close, no reset: a laptop shut, a cable out) ends within a bound, not at the idle timeout:
idle, by the web process's keepalive (its pings unanswered); flooded, its socket's buffers full (the
keepalive's close waits on them), once a send has waited ``READER_STALL_S``."""

from __future__ import annotations

import functools
import re
import time
from typing import Any

import pytest
import uvicorn

from scheduler import exec_session
from tests.e2e import conftest as e2e
from tests.e2e.test_exec_tty_e2e import gone, owner_stack, pytestmark, read_until, session

__all__ = ["pytestmark"]


def _pid(ws: Any) -> int:
    out, _ = read_until(ws, r"pid=\d+\r?\n")  # its whole number: output may cut it in two
    return int(re.search(r"pid=(\d+)\r?\n", out).group(1))  # type: ignore[union-attr]


def _ended_within(pid: int, seconds: float) -> float:
    began = time.monotonic()
    while not gone(pid) and time.monotonic() - began < seconds:
        time.sleep(0.1)
    assert gone(pid)
    return time.monotonic() - began


def test_a_reader_gone_without_a_word_ends_its_session(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pk = owner_stack(stack)
    # Given web processes that ping every 0.5 s and close a socket whose pong is 0.5 s late (serve.py:
    # 120 s and 60 s), and a send that may wait 1 s for a reader (READER_STALL_S: 180 s)
    monkeypatch.setattr(e2e.uvicorn, "Config", functools.partial(uvicorn.Config, ws_ping_interval=0.5,
                                                                 ws_ping_timeout=0.5))  # fmt: skip
    monkeypatch.setattr(exec_session, "READER_STALL_S", 1.0)
    hellos = stack.hellos()
    stack.stop_server()
    stack.start_server()
    stack.wait_until(lambda: stack.hellos() > hellos, 30, "the agent back")

    # When the reader of an idle session stops answering (it reads nothing more: no pong)
    ws, _ = session(stack, pk, ["sh", "-c", "echo pid=$$; sleep 1000.61 & wait"])
    pid = _pid(ws)
    # Then the keepalive closes its socket and its processes are killed, long before the idle timeout
    took = _ended_within(pid, 15)
    print(f"an idle session of a reader gone: ended after {took:.1f} s (ping 0.5 s + pong 0.5 s)")
    ws.sock.close()

    # When the reader of a session flooding it with output stops reading (its buffers fill)
    ws, _ = session(stack, pk, ["sh", "-c", "echo pid=$$; exec yes 0123456789012345678901234567890123456789"])
    pid = _pid(ws)
    # Then the stalled send ends the session and the command is killed
    took = _ended_within(pid, 20)
    print(f"a flooded session of a reader gone: ended after {took:.1f} s (READER_STALL_S 1 s)")
    ws.sock.close()
