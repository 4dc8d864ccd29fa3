"""brk59: a breaker round on ``fairway exec`` in the process runtime (docs/jobs.md, "Run a command
in a running workload")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import run_async
from test_agent_isolation import MARKERS, _kill_markers, _marker_pids, _setup, runtime, spec, wait_log

from agent.runtime.isolation import Isolation, IsolationConfig

pytestmark = [pytest.mark.timeout(60)]


@pytest.mark.parametrize("kind", ["v2", "v1", "none"])
def test_a_daemon_an_exec_leaves_behind_dies_with_the_attempt(state_dir: Path, kind: str) -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=_setup(kind))

    async def scenario() -> None:
        rt, exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"]))
        await wait_log(rt, 1, "up")
        got = await rt.exec(
            1, ["sh", "-c", f"setsid sleep {MARKERS[0]} </dev/null >/dev/null 2>&1 & echo bg"], 10, 4096
        )
        assert got.stdout == b"bg\n"
        await asyncio.sleep(0.2)
        # in the attempt's cgroup it lives on until the attempt's end; without one (the process-tree
        # fallback) nothing would ever find it: it dies with the command (was: lived on for good)
        assert len(_marker_pids()) == (2 if kind != "none" else 1)
        await rt.stop(1, 0.5)
        await asyncio.wait_for(exits.get(), 10)
        await asyncio.sleep(0.1)
        assert _marker_pids() == []

    try:
        run_async(scenario())
    finally:
        _kill_markers()


def test_without_cgroups_an_exec_still_passes_its_exit_code_and_times_out(state_dir: Path) -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=_setup("none"))

    async def scenario() -> None:
        rt, _exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"]))
        await wait_log(rt, 1, "up")
        failed = await rt.exec(1, ["sh", "-c", "echo oops >&2; exit 3"], 10, 4096)
        assert (failed.exit_code, failed.stderr) == (3, b"oops\n")
        killed = await rt.exec(1, ["sh", "-c", "kill -9 $$"], 10, 4096)
        assert killed.exit_code == 137
        missing = await rt.exec(1, ["no-such-program-59"], 10, 4096)
        assert missing.exit_code == 127 and b"cannot run no-such-program-59" in missing.stderr
        slow = await rt.exec(1, ["sh", "-c", f"echo before; sleep {MARKERS[1]}"], 1, 4096)
        assert (slow.exit_code, slow.timed_out, slow.stdout) == (124, True, b"before\n")
        await asyncio.sleep(0.1)
        assert len(_marker_pids()) == 1  # the attempt's own sleep only
        await rt.stop(1, 0.5)

    try:
        run_async(scenario())
    finally:
        _kill_markers()
