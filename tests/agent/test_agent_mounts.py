"""Mounts in the process runtime (docs/jobs.md): it starts in the first mount and exposes every
mount's host path as ``FAIRWAY_MOUNT_<NAME>``; a missing directory fails the start."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from agent_testkit import run_async

from agent.protocol import Mount, Start, decode, encode
from agent.runtime.base import AttemptSpec, StartError
from agent.runtime.process import ProcessRuntime
from agent.state import AttemptRecord


def _spec(attempt_id: int, command: list[str], mounts: tuple[Mount, ...]) -> AttemptSpec:
    return AttemptSpec(
        attempt_id=attempt_id, workload_id=70, command=command, gpu_indices=[0], gpu_uuids=["GPU-0"], mounts=mounts
    )


def test_a_process_starts_in_its_first_mount_with_their_paths_in_env(state_dir: Path, tmp_path: Path) -> None:
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    mounts = (
        Mount(name="work", host_path=str(work), container_path="/work", read_only=False),
        Mount(name="data-sets", host_path=str(data), container_path="/datasets"),
    )
    show = (
        "import os; print(os.getcwd()); print(os.environ['FAIRWAY_MOUNT_WORK'], os.environ['FAIRWAY_MOUNT_DATA_SETS'])"
    )

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir)
        exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.start(_spec(1, [sys.executable, "-c", show], mounts))
        assert (await asyncio.wait_for(exits.get(), 10)).exit_code == 0
        assert rt.read_log(1, 4096)[0].decode().splitlines() == [str(work), f"{work} {data}"]
        with pytest.raises(StartError, match="not a directory on this host"):
            await rt.start(_spec(2, [sys.executable, "-c", "pass"], (Mount("gone", str(tmp_path / "gone"), "/g"),)))
        assert rt.get(2).state == "failed_to_start"

    run_async(scenario())


def test_mounts_travel_in_the_start_message_and_are_optional_on_the_wire() -> None:
    msg = Start(
        attempt_id=1,
        workload_id=2,
        image="",
        command=["true"],
        env={},
        gpu_uuids=[],
        gpu_indices=[],
        grace_s=5,
        mounts=[Mount("data", "/d", "/data", True)],
    )
    assert decode(encode(msg)).mounts == [Mount("data", "/d", "/data", True)]
    import json

    plain = json.loads(encode(msg))
    del plain["mounts"]  # a server older than the field
    assert not decode(json.dumps(plain)).mounts
    assert "mounts" not in json.loads(encode(replace(msg, mounts=[])))  # agents older than it take the start


def test_a_relative_program_is_found_in_the_directory_it_starts_in(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """try44: ``fairway submit -v code -- ./train.py`` failed to start ("command not found or not
    executable: ./train.py") although ./train.py was in the first mount, where the attempt starts
    (docs/jobs.md): the program was looked for in the agent's own working directory. It is looked
    for where the attempt starts, and a refusal names that directory."""
    code, elsewhere = tmp_path / "code", tmp_path / "agent-cwd"
    code.mkdir()
    elsewhere.mkdir()
    script = code / "train.py"
    script.write_text(f"#!{sys.executable}\nimport os\nprint('trained in', os.getcwd())\n")
    script.chmod(0o755)
    monkeypatch.chdir(elsewhere)  # the agent's own directory holds no train.py
    mounts = (Mount(name="code", host_path=str(code), container_path="/code", read_only=False),)

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir)
        exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.start(_spec(1, ["./train.py"], mounts))
        assert (await asyncio.wait_for(exits.get(), 10)).exit_code == 0
        assert rt.read_log(1, 4096)[0].decode().splitlines() == [f"trained in {code}"]
        with pytest.raises(StartError, match=f"command not found or not executable: ./missing.py \\(in {code}\\)"):
            await rt.start(_spec(2, ["./missing.py"], mounts))

    run_async(scenario())
