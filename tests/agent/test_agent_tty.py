"""The agent's side of an interactive session's terminal (agent/runtime/tty.py): input written as the
command reads it and bounded when it does not, output read until the terminal's other side is gone,
a resize seen by the command, and a close that hangs up and kills its process tree. (Through the
attempt's containment, with a real agent and server: tests/e2e/test_exec_tty_e2e.py.)"""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from agent.runtime.isolation import stop_then_kill_tree
from agent.runtime.tty import TTY_MAX_PENDING_INPUT, InputOverflow, TtySession, set_size

pytestmark = pytest.mark.timeout(30)


async def _start(command: list[str]) -> TtySession:
    master, slave = os.openpty()
    set_size(slave, 24, 80)
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    return TtySession(master, proc, stop_then_kill_tree)


async def _read_until(session: TtySession, word: bytes) -> bytes:
    out = b""
    while word not in out:
        chunk = await asyncio.wait_for(session.read(), 10)
        if not chunk:
            break
        out += chunk
    return out


def test_input_output_resize_and_exit() -> None:
    async def run() -> tuple[bytes, int | None]:
        session = await _start(["sh", "-c", "read line; echo got=$line; stty size; exit 3"])
        session.write(b"hello\n")
        out = await _read_until(session, b"got=hello")
        session.resize(40, 120)
        out += await _read_until(session, b"\n")
        while chunk := await asyncio.wait_for(session.read(), 10):
            out += chunk
        code = await session.proc.wait()
        session.finish()
        return out, code

    out, code = asyncio.run(run())
    assert b"got=hello" in out and code == 3


def test_input_a_command_does_not_read_is_bounded_and_a_close_kills_it() -> None:
    async def run() -> tuple[bool, int | None]:
        session = await _start(["sh", "-c", "sleep 977.59 & exec sleep 977.59"])
        overflow = False
        try:
            for _ in range(TTY_MAX_PENDING_INPUT // 4096 + 64):  # far more than the terminal's buffer
                session.write(b"x" * 4095 + b"\n")
        except InputOverflow:
            overflow = True
        await session.close()
        code = await asyncio.wait_for(session.proc.wait(), 10)
        session.finish()
        return overflow, code

    overflow, code = asyncio.run(run())
    assert overflow
    assert code is not None and code < 0  # hung up, then killed
    left = subprocess.run(["pgrep", "-f", "^sleep 977.59$"], capture_output=True, text=True)  # noqa: S603, S607
    assert left.stdout == ""
