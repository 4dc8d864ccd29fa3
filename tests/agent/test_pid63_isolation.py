"""pid63: the process runtime's isolation leftovers (docs/isolation.md). PID 1 of an attempt's PID
namespace shows a short command line (its whole Python source before); the ``hidepid`` fallback
(no PID namespace) hides other users' processes; what ``/proc/net/unix`` and the cgroup tree show
an attempt; a GPU's device opened in an attempt and handed out of it does not outlive it. Real
processes, as root."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    kill_markers,
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    patch_attempt_init,
    run_async,
    runtime,
    spec,
)

from agent.runtime import process
from agent.runtime.isolation import descendants

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


# --- 2: the hidepid fallback --------------------------------------------------------------------------

NEWPID = 'check(libc.unshare(0x20000000), "unshare(CLONE_NEWPID)")'


async def _running(attempt_id: int, marker: str, root: int) -> list[int]:
    """The host pids of the attempt whose wrapper is ``root`` once ``sleep marker`` runs in it."""
    for _ in range(200):
        pids = descendants(root)
        if any(marker in Path(f"/proc/{p}/cmdline").read_text() for p in pids if Path(f"/proc/{p}").exists()):  # noqa: ASYNC240
            return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"sleep {marker} never ran in attempt {attempt_id}")


def test_without_a_pid_namespace_an_attempt_sees_no_process_of_another_user(
    open_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where ``unshare(CLONE_NEWPID)`` is refused (forced here), the attempt's ``/proc`` is iso61's
    (``hidepid=invisible``, the host's numbering): its log says so, it sees its own processes by
    their host pids, and none of another owner's attempt (running meanwhile), nor root's (the
    agent, the wrappers, the host's init)."""
    patch_attempt_init(monkeypatch, tmp_path, NEWPID, 'check(-1, "unshare(CLONE_NEWPID)")')

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", f'sleep {MARKERS[0]}; : "$0"', SECRET_ARG], owner="pid-alice"))
        assert a.pid is not None
        alice = await _running(1, MARKERS[0], a.pid)
        b = await rt.start(spec(2, ["sh", "-c", f"echo me $$; {PS}"], owner="pid-bob"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        assert "fairway: no PID namespace of the attempt's own" in out, out  # the fallback was taken
        seen = _ps(out)
        me = int(out.split("me ", 1)[1].split()[0])
        assert me in seen and me > 1, seen  # its own shell, by its host pid (no namespace of its own)
        assert not set(seen) & {*alice, a.pid}, seen  # nothing of alice's attempt
        assert SECRET_ARG not in out and MARKERS[0] not in out, out
        assert not set(seen) & {1, os.getpid(), b.pid}, seen  # root's: the host's init, the agent, its wrapper
        assert "pytest" not in out, out
        await rt.stop(1, 1)

    try:
        run_async(scenario())
    finally:
        kill_markers()
