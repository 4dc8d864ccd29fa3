"""exl61: ``exec`` in a gang's member (``rank``) and in a re-adopted attempt (readopt46: runs), the agent's side
(docs/jobs.md, "Run a command in a running workload"; the server's: tests/api/test_exl61_exec.py)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest
from agent_testkit import MARKERS, kill_leftovers, kill_markers, run_async, runtime, spec, wait_log

pytestmark = [pytest.mark.timeout(60)]


def test_each_gang_member_runs_the_command_in_its_own_part(state_dir: Path) -> None:
    """A gang's parts run on their hosts under the one wire id: the server picks the member's host
    (``rank``), and its agent runs the command in the part it holds (its ``NODE_RANK``)."""
    other = Path(tempfile.mkdtemp(prefix="fw-exl61-")) / "state"
    other.mkdir()

    async def scenario() -> None:
        parts = [runtime(state_dir)[0], runtime(other)[0]]
        for rank, rt in enumerate(parts):
            await rt.start(spec(7, ["sh", "-c", f"echo up; exec sleep {MARKERS[rank]}"], env={"NODE_RANK": str(rank)}))
            await wait_log(rt, 7, "up")
        for rank, rt in enumerate(parts):
            got = await rt.exec(7, ["sh", "-c", 'echo "$NODE_RANK"'], 10, 4096)
            assert (got.exit_code, got.stdout) == (0, f"{rank}\n".encode())
        for rt in parts:
            await rt.stop(7, 1)

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()
        kill_leftovers(other)
        shutil.rmtree(other.parent, ignore_errors=True)


def test_a_readopted_attempt_runs_a_terminal_with_its_env(state_dir: Path) -> None:
    """readopt46 (was refused, ``readopted``): its environment read back from its command."""

    async def scenario() -> None:
        rt, _exits = runtime(state_dir)
        await rt.start(spec(8, ["sh", "-c", f"echo up; exec sleep {MARKERS[0]}"], env={"NODE_RANK": "5"}))
        await wait_log(rt, 8, "up")
        await rt.close()
        again, _ = runtime(state_dir)
        await again.recover()
        session = await again.exec_tty(8, ["sh", "-c", 'echo "rank $NODE_RANK"'], 24, 80)
        out = b""
        while chunk := await asyncio.wait_for(session.read(), 10):
            out += chunk
        assert await asyncio.wait_for(session.proc.wait(), 10) == 0
        session.finish()
        assert b"rank 5" in out, out
        await again.stop(8, 1)

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()
