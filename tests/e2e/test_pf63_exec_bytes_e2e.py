"""pf63, end to end (a real server, channel layer and agent with owner isolation, as
test_exec_tty_e2e): a session's bytes as they are. ``fairway exec -it``: bytes 0x80-0xff that are
not UTF-8 reach the command and come back unchanged (they read U+FFFD); ``fairway exec -i`` without
``-t``: stdin piped to the command, no terminal, its end reaching it, stdout and stderr apart and
its exit code back (kubectl's ``exec -i``; it was refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from fairway_cli.wsclient import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket
from tests.e2e.test_exec_tty_e2e import AS_OWNERS, owner_stack, pytestmark, session

__all__ = ["pytestmark"]

HIGH = bytes(range(0x80, 0x100))
RAW_ECHO = (
    "import sys, termios, tty; tty.setraw(0, termios.TCSANOW); print('ready', flush=True); "
    "data = sys.stdin.buffer.read(128); sys.stdout.buffer.write(data.hex().encode() + b'|' + bytes(range(128, 256)))"
)
PIPE = (
    "import sys; data = sys.stdin.buffer.read(); sys.stdout.buffer.write(data[::-1]); "
    "sys.stderr.buffer.write(b'err:' + bytes([len(data) % 256])); sys.exit(7)"
)


def _frames(ws: WebSocket, timeout: float = 20) -> tuple[list[bytes], dict[str, Any] | None]:
    """Binary frames until the session's last text frame (exit or error)."""
    frames: list[bytes] = []
    ws.sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kind, payload = ws.recv()
        if kind == OP_BINARY:
            frames.append(payload)
        elif kind == OP_TEXT:
            frame = json.loads(payload)
            if frame.get("type") in ("exit", "error"):
                return frames, frame
        elif kind == OP_CLOSE:
            break
    return frames, None


@AS_OWNERS
def test_a_terminal_sessions_bytes_are_carried_as_they_are(stack: Any) -> None:
    pk = owner_stack(stack)
    ws, started = session(stack, pk, ["/usr/bin/python3", "-c", RAW_ECHO])
    assert started["type"] == "started", started
    out = b""
    while b"ready" not in out:
        kind, payload = ws.recv()
        assert kind == OP_BINARY, payload
        out += payload
    ws.send_binary(HIGH)
    frames, end = _frames(ws)
    out = b"".join(frames)
    assert end is not None and end["exit_code"] == 0, (out, end, stack.agent_output()[-2000:])
    assert HIGH.hex().encode() + b"|" + HIGH in out, out  # both ways, no U+FFFD
    ws.close()


@AS_OWNERS
def test_stdin_is_piped_without_a_terminal_to_its_end(stack: Any) -> None:
    pk = owner_stack(stack)
    data = HIGH * 3000  # 384 000 bytes: more than a window (256 KiB) ahead of the acks
    ws, started = session(stack, pk, ["/usr/bin/python3", "-c", PIPE], tty=False)
    assert started["type"] == "started", started
    sent = acked = 0
    ws.sock.settimeout(20)
    while sent < len(data):
        while sent - acked + 32 * 1024 > 256 * 1024:  # the window: acks of what the command took
            kind, payload = ws.recv()
            assert kind == OP_TEXT, payload
            frame = json.loads(payload)
            assert frame["type"] == "ack", frame
            acked += frame["bytes"]
        ws.send_binary(data[sent : sent + 32 * 1024])
        sent += 32 * 1024
    ws.send_text(json.dumps({"type": "eof"}))
    frames, end = _frames(ws)
    assert end == {"type": "exit", "exit_code": 7, "timed_out": False}, (end, stack.agent_output()[-2000:])
    stdout = b"".join(f[1:] for f in frames if f[:1] == b"\x01")
    stderr = b"".join(f[1:] for f in frames if f[:1] == b"\x02")
    assert stdout == data[::-1] and stderr == b"err:" + bytes([len(data) % 256])
    ws.close()

    # and the CLI does it: cat data | fairway exec -i ID -- CMD
    cli = subprocess.run(  # noqa: S603 -- our own CLI, fixed arguments
        [sys.executable, "-m", "fairway_cli", "--server", stack.base_url, "exec", "-i", str(pk), "--"]
        + ["/usr/bin/python3", "-c", PIPE],
        input=data, capture_output=True, timeout=60, check=False,
        env={**os.environ, "FAIRWAY_TOKEN": stack.token, "HOME": str(stack.state_dir.parent)},
    )  # fmt: skip
    assert cli.returncode == 7, cli.stderr
    assert cli.stdout == data[::-1]
    assert cli.stderr == b"err:" + bytes([len(data) % 256]), cli.stderr
