"""End to end: ``/ws/exec/`` → channel layer → the agent's websocket → a real agent (process runtime,
fake GPUs, running as root with owner isolation) → a command on a pseudo-terminal inside the running
attempt's containment, interactively (``fairway exec -it``: docs/jobs.md, "Run a command in a
running workload"); a reader leaving kills it, an idle one is ended, a flood of output to a reader
that reads nothing stays bounded."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import resource
import select
import shutil
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from fairway_cli.wsclient import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket
from scheduler.models import Attempt
from tests.e2e.conftest import searchable_parents
from tests.e2e.test_exec_e2e import OWNER_ISOLATION, OWNER_UID, running_attempt

pytestmark = [
    pytest.mark.timeout(150),  # running_attempt's deadlines (START_TIMEOUT_S), not their usual length
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="a private /tmp and owner identities need root"
    ),
]


AS_OWNERS = pytest.mark.agent_isolation(OWNER_ISOLATION)
"""The stack's agent started with owner isolation (tests/e2e/conftest.py ``stack``): a test that
calls :func:`owner_stack` saves the restart."""


def owner_stack(stack: Any) -> int:
    """The agent with owner isolation (as test_exec_e2e: started so under :data:`AS_OWNERS`, else
    restarted so) and one running workload of rita's."""
    from accounts.models import User

    User.objects.filter(username="rita").update(posix_uid=OWNER_UID)
    searchable_parents(stack.state_dir)
    if stack.isolation != OWNER_ISOLATION:
        hellos = stack.hellos()
        stack.stop_agent()
        stack.isolation = OWNER_ISOLATION
        stack.start_agent()
        stack.wait_until(lambda: stack.hellos() > hellos, 20, "the agent's hello with owner isolation")
    command = ["sh", "-c", "echo ready; exec sleep 300"]
    pk = stack.submit("org/alpha", gpus=1, min_runtime=60, duration=0, command=command, name="tty")
    running_attempt(stack, pk)
    return int(pk)


def session(stack: Any, pk: int, command: list[str], **first: Any) -> tuple[WebSocket, dict[str, Any]]:
    ws = WebSocket(stack.base_url + "/ws/exec/", {"Authorization": f"Token {stack.token}"}, timeout=30)
    ws.send_text(json.dumps({"workload": pk, "command": command, "tty": True, "rows": 30, "cols": 100, **first}))
    kind, payload = ws.recv()
    assert kind == OP_TEXT, payload
    return ws, json.loads(payload)


def read_until(ws: WebSocket, pattern: str, timeout: float = 15) -> tuple[str, dict[str, Any] | None]:
    """Output until ``pattern`` is in it or the session ends (its exit frame)."""
    out = b""
    ws.sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kind, payload = ws.recv()
        if kind == OP_BINARY:
            out += payload
            if pattern and re.search(pattern, out.decode(errors="replace")):
                return out.decode(errors="replace"), None
        elif kind == OP_TEXT:
            frame = json.loads(payload)
            if frame.get("type") != "ack":  # input relayed to the agent (flow49: a terminal's window)
                return out.decode(errors="replace"), frame
        elif kind == OP_CLOSE:
            break
    return out.decode(errors="replace"), None


def host_pid(stack: Any, pid: int) -> int:
    """The host's number of a session's ``$$`` (``pid``): pidns61, its number in the attempt's PID
    namespace, is that of a process under the stack's agent whose last ``NSpid`` it is."""
    from agent.runtime.isolation import descendants

    assert stack.agent is not None
    for found in descendants(stack.agent.pid):
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{found}/status").read_text()
            numbers = next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[1:]
            if len(numbers) > 1 and int(numbers[-1]) == pid:
                return found
    return pid  # no PID namespace of the attempt's own: the host's number


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@AS_OWNERS
def test_an_interactive_session_runs_in_the_attempts_containment(stack: Any) -> None:
    pk = owner_stack(stack)

    # When rita opens a shell on a terminal in her running workload
    ws, started = session(stack, pk, ["sh"])
    assert started == {"type": "started", "attempt": 1, "host": "h1", "window": True}, started  # flow49
    # a keystroke's echo, end to end (the terminal's echo: through the agent and back)
    took = []
    for ch in "echo":
        began = time.monotonic()
        ws.send_binary(ch.encode())
        read_until(ws, re.escape(ch))
        took.append(time.monotonic() - began)
    ws.send_binary(b"\x15")  # ^U: the line dropped
    print(f"keystroke echo end to end: median {sorted(took)[len(took) // 2] * 1000:.1f} ms, max {max(took) * 1000:.1f}")
    ws.send_binary(b"id -u; tty; echo $FAIRWAY_WORKLOAD_ID; stty size; echo opened >$(tty); exit 3\n")
    out, end = read_until(ws, "")

    # Then it ran as rita, on a terminal of the size asked for, with the attempt's environment
    assert end == {"type": "exit", "exit_code": 3, "timed_out": False}, out
    lines = [line.strip().removeprefix("$ ") for line in out.splitlines()]
    assert str(OWNER_UID) in lines, out
    assert any(re.fullmatch(r"/dev/pts/\d+", line) for line in lines), out
    assert str(pk) in lines and "30 100" in lines, out
    assert "opened" in lines, out  # its terminal is its own: /dev/pts/N opens for it (as after login)
    ws.close()

    # and a resize reaches the command's terminal
    ws, _ = session(stack, pk, ["sh"])
    ws.send_text(json.dumps({"type": "resize", "rows": 50, "cols": 132}))
    time.sleep(0.3)
    ws.send_binary(b"stty size; exit\n")
    out, end = read_until(ws, "")
    assert "50 132" in out and end is not None and end["exit_code"] == 0, (out, end, stack.agent_output()[-3000:])
    ws.close()

    # and the CLI does it on a terminal of its own: raw mode, exit code passed, the terminal restored
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    cli = subprocess.Popen(  # noqa: S603 -- our own CLI, fixed arguments
        [sys.executable, "-m", "fairway_cli", "--server", stack.base_url, "exec", "-it", str(pk), "--", "sh"],
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        env={**os.environ, "FAIRWAY_TOKEN": stack.token, "HOME": str(stack.state_dir.parent)},
    )  # fmt: skip
    seen = b""
    deadline = time.monotonic() + 20
    sent = False
    while cli.poll() is None and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            seen += os.read(master, 4096)
        if not sent and b"$" in seen:  # the shell's prompt
            os.write(master, b"echo cli-$((40+2)); exit 4\r")
            sent = True
    while select.select([master], [], [], 0.2)[0]:
        try:
            seen += os.read(master, 4096)
        except OSError:
            break
    assert cli.wait(10) == 4, seen
    assert b"cli-42" in seen, seen
    assert termios.tcgetattr(slave) == before  # raw mode undone
    os.close(master)
    os.close(slave)

    # and a session in a workload not running is refused with the one-shot exec's code
    ws, refused = session(stack, 999999, ["sh"])
    assert refused["type"] == "error" and refused["code"] == "not_found"


@AS_OWNERS
def test_a_reader_leaving_kills_the_session_and_idle_ones_end(stack: Any, settings: Any) -> None:
    pk = owner_stack(stack)

    # When the reader of a session goes away without a word (its socket closed)
    ws, _ = session(stack, pk, ["sh", "-c", "echo pid=$$; sleep 1000.59 & wait"])
    out, _ = read_until(ws, r"pid=\d+\r?\n")
    pid = host_pid(stack, int(re.search(r"pid=(\d+)\r?\n", out).group(1)))  # type: ignore[union-attr]
    assert not gone(pid)
    ws.sock.close()
    # Then its process tree is killed
    began = time.monotonic()
    while not gone(pid) and time.monotonic() - began < 10:
        time.sleep(0.1)
    assert gone(pid), stack.agent_output()
    out = subprocess.run(["pgrep", "-u", str(OWNER_UID), "-f", "sleep 1000.59"], capture_output=True, text=True)  # noqa: S603, S607
    assert out.stdout == "", out.stdout

    # And a session nothing goes in or out of ends after FAIRWAY_EXEC_IDLE_TIMEOUT
    settings.FAIRWAY_EXEC_IDLE_TIMEOUT = 1
    ws, _ = session(stack, pk, ["sleep", "100"])
    began = time.monotonic()
    out, end = read_until(ws, "", timeout=20)
    assert end is not None and end["timed_out"] is True and end["exit_code"] == 128 + 1, (out, end)  # SIGHUP
    assert time.monotonic() - began < 8
    ws.close()


@AS_OWNERS
def test_a_flood_to_a_reader_that_does_not_read_stays_bounded(stack: Any) -> None:
    pk = owner_stack(stack)
    # When a session's command writes as fast as it may and its reader reads nothing for a while
    ws, _ = session(stack, pk, ["sh", "-c", "echo pid=$$; exec yes 0123456789012345678901234567890123456789"])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB: the server runs in this process
    time.sleep(4)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    # Then what waits anywhere is the agent's window (256 KiB) and the sockets' buffers, not GBs
    assert grown_kib < 64 * 1024, f"the server grew by {grown_kib} KiB"
    # and the reader gets the output once it reads, from its start, the session going on (held
    # back, not ended: a channel filled by an unbounded sender would have ended it)
    out, _ = read_until(ws, r"pid=\d+\r?\n")  # exl61: its whole number (a chunk may end inside it)
    pid = host_pid(stack, int(re.search(r"pid=(\d+)\r?\n", out).group(1)))  # type: ignore[union-attr]
    ws.sock.settimeout(30)  # 8 MiB in 256 KiB windows, each acknowledged: slow on a loaded 2-core box
    got = 0
    while got < 8 << 20:
        kind, payload = ws.recv()
        assert kind == OP_BINARY, payload
        got += len(payload)
    # and when it leaves, the command is killed; the attempt runs on
    ws.close()
    began = time.monotonic()
    while not gone(pid) and time.monotonic() - began < 30:
        time.sleep(0.1)
    assert gone(pid)
    assert Attempt.objects.filter(workload_id=pk, ended_at__isnull=True).exists()
