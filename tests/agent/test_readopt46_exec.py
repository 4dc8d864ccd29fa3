"""readopt46: ``exec`` in an attempt that a restarted agent re-adopted (docs/isolation.md, docs/jobs.md,
"Run a command in a running workload"). The environment is never on disk: the new agent reads it
back from the attempt's command (``/proc/<pid>/environ``, root), checking that the pid is still that
command's (its parent, start time and cgroup); where it cannot, the exec is refused as before
(``readopted``; a command that replaced its own environment: tests/agent/test_agent_exec.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_testkit import MARKERS, needs_mount_ns, needs_root, owner_isolation, run_async, runtime, spec, wait_log

import agent.runtime.process as process_module
from agent.runtime.base import ExecError

pytestmark = [pytest.mark.timeout(60)]

PROBE = 'id -u; id -G; pwd; cat /tmp/note; echo "$HF_TOKEN"; echo "$TMPDIR"; cat /proc/self/cgroup; ps -o pid= -p 1'


@needs_root
@needs_mount_ns
def test_exec_after_an_agent_restart_reads_the_attempts_env_back(open_state: Path) -> None:
    """The same command, run in the attempt before and after the agent's restart, says the same: its
    owner, groups, directory, private /tmp, secret, cgroups and PID namespace."""
    command = f"echo kept > /tmp/note; echo up; exec sleep {MARKERS[0]}"

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", command], owner="ro-alice", env={"HF_TOKEN": "alice-secret"}))
        await wait_log(rt, 1, "up")
        before = await rt.exec(1, ["sh", "-c", PROBE], 10, 4096)
        assert before.exit_code == 0 and b"alice-secret" in before.stdout, before
        await rt.close()
        again, _ = runtime(open_state, owner_isolation())
        await again.recover()
        after = await again.exec(1, ["sh", "-c", PROBE], 10, 4096)
        assert (after.exit_code, after.stdout, after.stderr) == (0, before.stdout, b""), (before, after)
        assert after.stdout.decode().splitlines()[0] == str(a.uid) != "0"  # the owner, never root
        session = await again.exec_pipe(1, ["sh", "-c", 'echo "$HF_TOKEN"'])  # fairway exec -i too
        session.close_stdin()
        assert await session.read_stream() == ("stdout", b"alice-secret\n")
        assert await session.proc.wait() == 0
        session.finish()
        await again.stop(1, 1)

    run_async(scenario(), timeout=40)


async def _readopted(state_dir: Path, attempt_id: int, marker: str, secret: str):  # noqa: ANN202
    """Attempt ``attempt_id`` (``HF_TOKEN=secret``, sleeping as ``marker``) started by one agent,
    then re-adopted by a new one (the first closed): the new agent's runtime."""
    rt, _exits = runtime(state_dir)
    cmd = ["sh", "-c", f"echo up; exec sleep {marker}"]
    await rt.start(spec(attempt_id, cmd, env={"HF_TOKEN": secret}))
    await wait_log(rt, attempt_id, "up")
    await rt.close()
    again, _ = runtime(state_dir)
    await again.recover()
    return again


def test_exec_after_an_agent_restart_as_the_agent(state_dir: Path) -> None:
    """An agent that runs attempts as itself (mode ``agent``, the library default) reads it back too."""

    async def scenario() -> None:
        again = await _readopted(state_dir, 2, MARKERS[1], "agent-secret")
        got = await again.exec(2, ["sh", "-c", 'echo "$HF_TOKEN"'], 10, 4096)
        assert (got.exit_code, got.stdout) == (0, b"agent-secret\n"), got
        await again.stop(2, 1)

    run_async(scenario(), timeout=40)


def test_a_reused_pid_is_refused_as_before(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's pid taken by another process between the look-up and the read (its start time
    differs at the second look): its environment is not the attempt's, the refusal's words."""
    real = process_module._parent_and_start

    def reused(pid: int) -> tuple[int, int] | None:
        got = real(pid)
        return None if got is None else (got[0], got[1] + 1)  # another process: started later, same pid

    async def scenario() -> None:
        again = await _readopted(state_dir, 4, MARKERS[0], "x")
        monkeypatch.setattr(process_module, "_parent_and_start", reused)
        with pytest.raises(ExecError) as refused:
            await again.exec(4, ["true"], 10, 100)
        assert refused.value.code == "readopted"
        monkeypatch.setattr(process_module, "_parent_and_start", real)
        got = await again.exec(4, ["sh", "-c", 'echo "$HF_TOKEN"'], 10, 100)  # the same pid, checked: its own
        assert got.stdout == b"x\n"
        await again.stop(4, 1)

    run_async(scenario(), timeout=40)
