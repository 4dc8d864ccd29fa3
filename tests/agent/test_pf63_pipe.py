"""pf63: the agent's side of a session without a terminal (agent/runtime/pipe.py, ``fairway exec
-i``): input written as the command reads it, each piece's writer told once written, its end
closing the pipe, stdout and stderr apart as bytes, and a close that ends what runs. (Through the
attempt's containment, with a real agent and server: tests/e2e/test_pf63_exec_bytes_e2e.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from agent.runtime.isolation import stop_then_kill_tree
from agent.runtime.pipe import PipeSession

pytestmark = pytest.mark.timeout(30)
PIPE = subprocess.PIPE


async def _start(code: str) -> PipeSession:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdin=PIPE, stdout=PIPE, stderr=PIPE, start_new_session=True
    )
    return PipeSession(proc, stop_then_kill_tree)


def test_bytes_in_to_their_end_and_out_apart() -> None:
    high = bytes(range(0x80, 0x100))

    async def run() -> tuple[dict[str, bytes], list[int], int]:
        session = await _start(
            "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d[::-1]); "
            "sys.stderr.buffer.write(b'n=%d' % len(d)); sys.exit(5)"
        )
        written: list[int] = []
        for _ in range(100):
            session.write(high, written.append)
        session.close_stdin()
        got: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        while True:
            stream, data = await asyncio.wait_for(session.read_stream(), 10)
            if not data:
                break
            got[stream] += data
        code = await session.proc.wait()
        session.finish()
        return got, written, code

    got, written, code = asyncio.run(run())
    assert got == {"stdout": (high * 100)[::-1], "stderr": b"n=12800"}
    assert written == [128] * 100 and code == 5


def test_a_close_ends_a_command_that_reads_nothing() -> None:
    async def run() -> int | None:
        session = await _start("import time; time.sleep(977.63)")
        session.write(b"x" * 1000)
        await session.close()
        code = await asyncio.wait_for(session.proc.wait(), 10)
        session.finish()
        return code

    code = asyncio.run(run())
    assert code is not None and code < 0
