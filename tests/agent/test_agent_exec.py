"""``exec``: a one-shot command inside a running attempt's containment (docs/jobs.md, "Run a command
in a running workload"): its owner's identity, cgroup, private /tmp, environment; killed at its
timeout; its output capped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.runtime.base import ExecError

pytestmark = [pytest.mark.timeout(60)]


@needs_root
@needs_mount_ns
def test_exec_runs_as_the_owner_in_the_attempts_cgroup_tmp_and_env(open_state: Path) -> None:
    write = f"echo alice-note > /tmp/note; cat /proc/self/cgroup; echo written; sleep {MARKERS[0]}"
    other = f"echo bob-note > /tmp/note; echo written; sleep {MARKERS[1]}"

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", write], owner="ex-alice", env={"HF_TOKEN": "alice-secret"}))
        await rt.start(spec(2, ["sh", "-c", other], owner="ex-bob"))
        await wait_log(rt, 1, "written")
        await wait_log(rt, 2, "written")
        assert a.pid is not None and a.uid is not None
        got = await rt.exec(1, ["sh", "-c", 'id -u; cat /tmp/note; echo "$HF_TOKEN"; cat /proc/self/cgroup'], 10, 4096)
        lines = got.stdout.decode().splitlines()
        assert got.exit_code == 0, got
        assert lines[0] == str(a.uid) and lines[0] != "0"  # the owner, never root
        assert lines[1:3] == ["alice-note", "alice-secret"]  # its own /tmp and env, not bob's
        # its cgroups, as the attempt's own processes see them (in its cgroup namespace: each its root, iso46)
        assert "\n".join(lines[3:]) == log_of(rt, 1).split("written")[0].strip()
        theirs = await rt.exec(2, ["cat", "/tmp/note"], 10, 4096)  # noqa: S108 -- the attempt's private /tmp
        assert theirs.stdout == b"bob-note\n"
        # the exit code and stderr pass through; a missing program is 127
        failed = await rt.exec(1, ["sh", "-c", "echo oops >&2; exit 3"], 10, 4096)
        assert (failed.exit_code, failed.stderr, failed.timed_out) == (3, b"oops\n", False)
        missing = await rt.exec(1, ["no-such-program-58"], 10, 4096)
        assert missing.exit_code == 127 and b"cannot run no-such-program-58" in missing.stderr
        await rt.stop(1, 1)
        await rt.stop(2, 1)
        with pytest.raises(ExecError) as ended:
            await rt.exec(1, ["true"], 10, 4096)
        assert ended.value.code == "not_running"

    run_async(scenario(), timeout=40)


def test_exec_is_killed_at_its_timeout_and_its_output_capped(open_state: Path) -> None:
    async def scenario() -> None:
        rt, _exits = runtime(open_state)
        await rt.start(spec(3, ["sh", "-c", f"echo up; sleep {MARKERS[2]}"]))
        await wait_log(rt, 3, "up")
        loop = asyncio.get_running_loop()
        began = loop.time()
        slow = await rt.exec(3, ["sh", "-c", "echo before; sleep 30; echo after"], 1, 4096)
        assert (slow.exit_code, slow.timed_out, slow.stdout) == (124, True, b"before\n")
        assert loop.time() - began < 5
        big = await rt.exec(3, ["sh", "-c", "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2"], 10, 1000)
        assert (len(big.stdout), len(big.stderr), big.truncated, big.exit_code) == (1000, 10, True, 0)
        await rt.stop(3, 1)

    run_async(scenario(), timeout=40)


def test_an_agent_restarted_since_the_start_refuses_exec_in_words(open_state: Path) -> None:
    """Where the environment cannot be read back from the attempt's command (readopt46: here it
    replaced its own, ``env -i``; tests/agent/test_readopt46_exec.py reads it back)."""

    async def scenario() -> None:
        rt, _exits = runtime(open_state)
        await rt.start(spec(4, ["sh", "-c", f"echo up; exec env -i sleep {MARKERS[2]}"]))
        await wait_log(rt, 4, "up")
        await rt.close()
        again, _ = runtime(open_state)
        await again.recover()
        with pytest.raises(ExecError) as refused:
            await again.exec(4, ["true"], 10, 100)
        assert refused.value.code == "readopted" and "restart" in str(refused.value)  # exl61: its own code
        assert "cannot be read back from its command" in str(refused.value)
        await again.stop(4, 1)

    run_async(scenario(), timeout=40)
