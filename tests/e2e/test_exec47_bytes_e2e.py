"""exec47, end to end (a real server, channel layer and agent with owner isolation, the process
runtime, as test_exec_e2e): a one-shot ``fairway exec ID -- CMD``'s output as it is. The agent
decoded it as UTF-8 (bad bytes replaced) before sending it, so ``head -c 100 /dev/urandom``, a tar
stream or a latin-1 file came back altered; now its bytes go as ``exec_data`` (base64) and the CLI
writes them to its stdout and stderr unchanged. A text command prints as it did."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any

from tests.e2e.test_exec_e2e import exec_in
from tests.e2e.test_exec_tty_e2e import AS_OWNERS, owner_stack, pytestmark

__all__ = ["pytestmark"]

OUT = bytes(range(256)) * 200 + b"\xc3"  # every byte, NUL and invalid UTF-8 too, across 32 KiB chunks
ERR = b"\x00err \xff\xfe \xed\xa0\x80 \xe2\x82"  # a surrogate's bytes, a cut character
PRINT = (
    "import sys; sys.stdout.buffer.write(bytes(range(256)) * 200 + b'\\xc3'); "
    "sys.stderr.buffer.write(b'\\x00err \\xff\\xfe \\xed\\xa0\\x80 \\xe2\\x82'); sys.exit(3)"
)


def cli(stack: Any, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: S603 -- our own CLI, fixed arguments
        [sys.executable, "-m", "fairway_cli", "--server", stack.base_url, *argv],
        env={**os.environ, "FAIRWAY_TOKEN": stack.token, "HOME": str(stack.state_dir.parent)},
        capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@AS_OWNERS
def test_a_one_shot_commands_bytes_come_back_as_they_are(stack: Any) -> None:
    pk = owner_stack(stack)
    command = ["/usr/bin/python3", "-c", PRINT]

    # the API: the bytes in base64, the text as before (UTF-8, bad bytes replaced)
    status, got = exec_in(stack, pk, {"command": command})
    assert status == 200 and got["exit_code"] == 3, (got, stack.agent_output()[-2000:])
    assert base64.b64decode(got["stdout_base64"]) == OUT
    assert base64.b64decode(got["stderr_base64"]) == ERR
    assert got["stdout"] == OUT.decode(errors="replace") and got["stderr"] == ERR.decode(errors="replace")

    # the CLI writes them unchanged (not a terminal: > file, | tar x)
    done = cli(stack, "exec", str(pk), "--", *command)
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout == OUT
    assert done.stderr == ERR

    # and a text command prints the same as before
    text = cli(stack, "exec", str(pk), "--", "sh", "-c", "printf 'h\\303\\251llo \\342\\234\\223\\n'; echo warn >&2")
    assert (text.returncode, text.stdout, text.stderr) == (0, "héllo ✓\n".encode(), b"warn\n")

    # and -i without a terminal (exec_pipe, binary since pf63) gives the same bytes
    piped = cli(stack, "exec", "-i", str(pk), "--", *command)
    assert (piped.returncode, piped.stdout, piped.stderr) == (3, OUT, ERR)
