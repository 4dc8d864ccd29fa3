"""pid63: the process runtime's isolation leftovers (docs/isolation.md). PID 1 of an attempt's PID
namespace shows a short command line (its whole Python source before); the ``hidepid`` fallback
(no PID namespace) hides other users' processes; what ``/proc/net/unix`` and the cgroup tree show
an attempt; a GPU's device opened in an attempt and handed out of it does not outlive it. Real
processes, as root."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import (
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    run_async,
    runtime,
    spec,
)

from agent.runtime import process

pytestmark = [pytest.mark.timeout(60), needs_root, needs_mount_ns]

SECRET_ARG = "--hf-token=pid63-alices-token"  # noqa: S105 -- a test value
# ``ps -e -o pid,args`` without procps: every process /proc lists, its pid and command line
PS = r'for d in /proc/[0-9]*; do echo "PS ${d#/proc/} $(tr "\0" " " <$d/cmdline 2>/dev/null)"; done'


def _ps(text: str) -> dict[int, str]:
    """The ``PS`` lines of ``text``: pid → command line."""
    out = {}
    for line in text.splitlines():
        if line.startswith("PS "):
            pid, _, args = line[3:].partition(" ")
            out[int(pid)] = args.strip()
    return out


# --- 1: PID 1's command line --------------------------------------------------------------------------


def test_pid_1_of_an_attempt_shows_a_short_command_line(open_state: Path) -> None:
    """``ps`` in an attempt: PID 1, the wrapper, was ``python -I -c <its whole source>`` (pages of
    it in ``ps aux``). Now the wrapper's file, the attempt's exit file and the command, as
    ``docker-init -- COMMAND``; nothing of the agent's configuration, nor the go it holds."""
    script = (
        'printf "LEN %s\\n" "$(wc -c </proc/1/cmdline)"; '
        'printf "CMDLINE %s\\n" "$(tr "\\0\\n" "  " </proc/1/cmdline)"; '
        'printf "ARGS %s\\n" "$(ps -o args= -p 1)"'
    )

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", script, "probe-arg"], owner="pid-alice"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 1)
        assert done.exit_code == 0, out
        said = {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines()}
        size, cmdline = int(said["LEN"]), said["CMDLINE"]
        assert size < len(script) + 400, out  # the command's own, and a few paths (the source: 15 kB)
        assert "import " not in cmdline and "libc" not in cmdline, cmdline  # no source
        words = cmdline.split()
        assert words[1:3] == ["-I", str(process.ATTEMPT_INIT)], cmdline
        assert words[3] == str(rt.store.exit_path(1)) and words[4] == "--", cmdline
        assert words[5].endswith("/sh") and words[6] == "-c" and words[-1] == "probe-arg", cmdline  # the command
        assert said["ARGS"] == cmdline.strip(), out  # as ps shows it

    run_async(scenario())
