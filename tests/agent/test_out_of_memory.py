"""An attempt killed at its memory limit says so (tryout28): it reported "wrapper ended before its
command ran (exit -9)" with no word of memory. The cgroup's ``oom_kill`` count (v2
``memory.events``, v1 ``memory.oom_control``) or the engine's ``State.OOMKilled`` makes the end
reason name the limit, as Slurm's OUT_OF_MEMORY and Kubernetes' OOMKilled do."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from agent_testkit import run_async

from agent.runtime.docker import container_out_of_memory
from agent.runtime.isolation import (
    Isolation,
    IsolationConfig,
    cgroup_out_of_memory,
    cgroup_pids_limit,
    detect_cgroups,
    detect_limits,
    oom_kill_count,
    out_of_memory_message,
    pids_limit_message,
    pids_max_hits,
)
from agent.runtime.process import ProcessRuntime
from tests.agent.test_resource_limits import REPO_ROOT, M, _spec

V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n"
V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"


def test_the_oom_kill_count_is_read_from_either_cgroup_version():
    assert oom_kill_count(V2_EVENTS) == 1
    assert oom_kill_count(V1_OOM_CONTROL) == 2
    assert oom_kill_count("low 0\nhigh 0\n") == 0  # an old kernel's v1 file: no count
    assert oom_kill_count("oom_kill x\n") == 0


def test_the_message_names_the_limit_only_when_something_was_killed():
    assert out_of_memory_message(0, 256 * M) == ""
    words = out_of_memory_message(1, 256 * M)
    assert "out of memory" in words and "memory limit (256M)" in words
    assert "memory limit" in out_of_memory_message(1, None) and "limit (" not in out_of_memory_message(1, None)


def test_the_cgroup_files_decide_v2_and_v1(tmp_path: Path):
    v2, v1, quiet = tmp_path / "v2", tmp_path / "v1", tmp_path / "quiet"
    for d in (v2, v1, quiet):
        d.mkdir()
    (v2 / "memory.events").write_text(V2_EVENTS)
    (v2 / "memory.max").write_text(f"{64 * M}\n")
    (v1 / "memory.oom_control").write_text(V1_OOM_CONTROL)
    (v1 / "memory.limit_in_bytes").write_text(f"{3 << 29}\n")
    (quiet / "memory.events").write_text("oom 0\noom_kill 0\n")
    assert "memory limit (64M)" in cgroup_out_of_memory([v2])
    assert "memory limit (1536M)" in cgroup_out_of_memory([tmp_path / "absent", v1])
    assert cgroup_out_of_memory([quiet, tmp_path / "absent"]) == ""


def test_the_docker_runtime_reads_the_engines_oom_killed():
    attrs = {"State": {"OOMKilled": True, "ExitCode": 137}, "HostConfig": {"Memory": 512 * M}}
    assert "memory limit (512M)" in container_out_of_memory(attrs)
    assert container_out_of_memory({"State": {"OOMKilled": False}, "HostConfig": {"Memory": 512 * M}}) == ""
    assert container_out_of_memory({}) == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="writing cgroup limits needs root here")
def test_a_command_over_its_memory_limit_ends_saying_so(state_dir: Path) -> None:
    setup = detect_cgroups("auto")
    limits = detect_limits(setup)
    if limits.kind == "none":
        pytest.skip(f"no cgroup with cpu and memory controllers here ({limits.note})")
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=setup)
    hog = [sys.executable, "-c", "b = bytearray(512 << 20); b[::4096] = b'x' * len(b[::4096])"]

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation)
        exits: asyncio.Queue = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.start(_spec(1, hog, memory=64 * M))
        record = await asyncio.wait_for(exits.get(), 30)
        assert record.exit_code != 0
        assert "out of memory" in record.message and "memory limit (64M)" in record.message, record.message

    run_async(scenario())


# --- iso34: an attempt at its pids limit said nothing of it --------------------------------------------

BOMB = """
import os, sys, time
n = 0
while True:
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
    except OSError as e:
        print("refused at", n, e.strerror, flush=True)
        sys.exit(1)
    n += 1
"""


def test_the_pids_limit_hits_are_read_from_pids_events():
    assert pids_max_hits("max 3\n") == 3
    assert pids_max_hits("max 0\n") == 0
    assert pids_max_hits("max 2\nmax.imposed 5\n") == 2  # newer kernels add lines
    assert pids_max_hits("") == 0 and pids_max_hits("max x\n") == 0
    assert pids_limit_message(0, 64) == ""
    words = pids_limit_message(3, 64)
    assert words.startswith("out of tasks:") and "pids limit (64 tasks" in words and "3 forks failed" in words
    assert "1 fork failed" in pids_limit_message(1, None) and "limit (" not in pids_limit_message(1, None)


def test_the_pids_files_are_read_in_whichever_cgroup_has_them(tmp_path: Path):
    v2, v1, quiet = tmp_path / "v2", tmp_path / "v1", tmp_path / "quiet"
    for d in (v2, v1, quiet):
        d.mkdir()
    (v2 / "pids.events").write_text("max 4\n")
    (v2 / "pids.max").write_text("64\n")
    (v1 / "pids.events").write_text("max 1\n")
    (v1 / "pids.max").write_text("max\n")
    (quiet / "pids.events").write_text("max 0\n")
    assert "pids limit (64 tasks" in cgroup_pids_limit([tmp_path / "absent", v2])
    assert "1 fork failed" in cgroup_pids_limit([quiet, v1]) and "limit (" not in cgroup_pids_limit([v1])
    assert cgroup_pids_limit([quiet, tmp_path / "absent"]) == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="writing cgroup limits needs root here")
def test_a_command_that_hits_its_pids_limit_ends_saying_so(state_dir: Path) -> None:
    """iso34: a fork bomb stopped at ``pids.max`` (iso32) ended with no word of why its forks
    failed; the cgroup's ``pids.events`` ``max`` count, read before it goes, now says so."""
    setup = detect_cgroups("auto")
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True, pids_max=32), cgroups=setup)
    assert isolation.limits is not None
    if isolation.limits.pids == "none":
        pytest.skip(f"no pids controller here ({isolation.limits.pids_note})")

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation)
        exits: asyncio.Queue = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.start(_spec(1, [sys.executable, "-c", BOMB]))
        record = await asyncio.wait_for(exits.get(), 30)
        assert record.exit_code == 1, rt.read_log(1, 4096)[0]
        assert record.message.startswith("out of tasks:"), record.message
        assert "pids limit (32 tasks" in record.message, record.message
        await rt.start(_spec(2, [sys.executable, "-c", "print('fine')"]))
        assert (await asyncio.wait_for(exits.get(), 30)).message == ""  # no word where nothing failed

    run_async(scenario())
