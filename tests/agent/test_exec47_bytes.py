"""exec47: a one-shot command's output as it is, through the agent's real process runtime. The
agent decoded it as UTF-8 (bad bytes replaced) into ``exec_output``: binary output (a tar stream,
``head -c 100 /dev/urandom``, a latin-1 file) reached the person altered. Asked with
``exec_bytes``, it answers ``exec_data`` (base64, at most 32 KiB a frame) then ``exec_result``; a
server older than that still asks ``exec`` and gets the text as before."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

from agent_testkit import FakeServer, make_agent, run_async, running, start_msg

from agent.protocol import (
    EXEC_CHUNK_BYTES,
    AttemptEvent,
    Exec,
    ExecBytes,
    ExecData,
    ExecOutput,
    ExecResult,
    Hello,
    Message,
)

OUT = bytes(range(256)) * 200 + b"\xc3"  # NUL, invalid UTF-8, a character cut at the end; 3 chunks
ERR = b"\x00err \xff\xfe \xed\xa0\x80 \xe2\x82"
PRINT = (
    "import sys; sys.stdout.buffer.write(bytes(range(256)) * 200 + b'\\xc3'); "
    "sys.stderr.buffer.write(b'\\x00err \\xff\\xfe \\xed\\xa0\\x80 \\xe2\\x82'); sys.exit(3)"
)


async def _answers(server: FakeServer) -> tuple[list[Message], ExecResult]:
    """What the agent answered the last request until its ``exec_result``."""
    got: list[Message] = []
    while True:
        msg = await server.expect(lambda m: isinstance(m, (ExecData, ExecOutput, ExecResult)), within=15)
        if isinstance(msg, ExecResult):
            return got, msg
        got.append(msg)


def test_exec_bytes_carries_a_commands_output_as_it_is(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(start_msg(7, ["sh", "-c", "echo up; exec sleep 60"], gpus=[0]))
                await server.expect(lambda m: isinstance(m, AttemptEvent) and m.state == "started")
                command = [sys.executable, "-c", PRINT]

                await server.send(ExecBytes(attempt_id=7, command=command, timeout_s=30, max_output=1 << 20))
                frames, end = await _answers(server)
                assert (end.exit_code, end.truncated, end.timed_out) == (3, False, False), end
                assert all(isinstance(f, ExecData) and f.ref == end.ref and not f.eof for f in frames), frames
                data = {
                    s: b"".join(base64.b64decode(f.data) for f in frames if f.stream == s) for s in ("stdout", "stderr")
                }  # type: ignore[attr-defined]
                assert data == {"stdout": OUT, "stderr": ERR}
                assert max(len(base64.b64decode(f.data)) for f in frames) <= EXEC_CHUNK_BYTES  # type: ignore[attr-defined]

                # the cap is of bytes, as before
                await server.send(ExecBytes(attempt_id=7, command=command, timeout_s=30, max_output=1000))
                frames, end = await _answers(server)
                assert end.truncated and end.exit_code == 3
                cut = b"".join(base64.b64decode(f.data) for f in frames if f.stream == "stdout")  # type: ignore[attr-defined]
                assert cut == OUT[:1000]

                # an older server's exec: text, as before (one release)
                await server.send(
                    Exec(attempt_id=7, command=["printf", "h\\303\\251llo \\377"], timeout_s=30, max_output=1000)
                )
                frames, end = await _answers(server)
                assert end.exit_code == 0 and all(isinstance(f, ExecOutput) for f in frames), frames
                assert "".join(f.data for f in frames) == "héllo \ufffd"  # type: ignore[attr-defined]

    run_async(scenario(), timeout=50)
