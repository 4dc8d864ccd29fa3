"""brk59: ``exec`` in the docker runtime at its timeout, against a fake engine."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent_testkit import run_async

from agent.runtime.base import StoredRuntime
from agent.runtime.docker import DockerRuntime
from agent.state import AttemptRecord


def test_an_exec_whose_process_ended_is_not_killed_by_its_old_pid(state_dir: Path) -> None:
    """Docker keeps an exec's stream open while a process it started holds its output (``sh -c
    'sleep 1000 &'``): at the timeout the agent killed, as root, the process tree of the engine's
    ``Pid`` of an exec that had ended, a pid the host may have given another process since. Only
    a running exec's is killed."""
    decoy = subprocess.Popen(["sleep", "30"])  # noqa: S607 -- the process that took the pid since
    released = threading.Event()

    def stream() -> Any:
        released.wait(10)
        yield (b"bg\n", None)

    inspected = {"Pid": decoy.pid, "Running": False, "ExitCode": 0}
    api = SimpleNamespace(
        exec_create=lambda *a, **k: {"Id": "e1"},
        exec_start=lambda *a, **k: stream(),
        exec_inspect=lambda *_: dict(inspected),
    )
    rt = object.__new__(DockerRuntime)
    StoredRuntime.__init__(rt, state_dir)
    rt.client = SimpleNamespace(
        api=api, containers=SimpleNamespace(get=lambda _name: SimpleNamespace(id="c1", attrs={"Config": {}}))
    )
    rt._exits, rt._closed = {}, threading.Event()
    rt._records[5] = AttemptRecord(attempt_id=5, workload_id=1, state="running")
    try:
        got = run_async(rt.exec(5, ["sh", "-c", "sleep 1000 &"], 1, 100), timeout=20)
        assert got.timed_out and got.exit_code == 124
        time.sleep(0.05)
        assert decoy.poll() is None, "the decoy holding the ended exec's pid was killed"
    finally:
        released.set()
        decoy.kill()
        decoy.wait()


def test_an_exec_stream_held_open_does_not_hold_a_thread_of_the_agents_executor(state_dir: Path) -> None:
    """The same exec (a background child holds its output): the stream's reader ran on the event
    loop's default executor, which every ``to_thread`` of the agent shares (stops, logs, the GPU
    readings of its heartbeats), and read on after the answer until that child ended: a dozen such
    commands left the agent no thread. The reader has a thread of its own."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    released = threading.Event()

    def stream() -> Any:
        released.wait(60)
        yield (b"bg\n", None)

    api = SimpleNamespace(
        exec_create=lambda *a, **k: {"Id": "e1"},
        exec_start=lambda *a, **k: stream(),
        exec_inspect=lambda *_: {"Pid": 0, "Running": False, "ExitCode": 0},
    )
    rt = object.__new__(DockerRuntime)
    StoredRuntime.__init__(rt, state_dir)
    rt.client = SimpleNamespace(
        api=api, containers=SimpleNamespace(get=lambda _name: SimpleNamespace(id="c1", attrs={"Config": {}}))
    )
    rt._exits, rt._closed = {}, threading.Event()
    rt._records[5] = AttemptRecord(attempt_id=5, workload_id=1, state="running")

    async def scenario() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        got = await asyncio.wait_for(rt.exec(5, ["sh", "-c", "sleep 1000 &"], 1, 100), 20)
        assert got.timed_out
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 3) == "free"

    try:
        run_async(scenario(), timeout=30)
    finally:
        released.set()


def test_an_exec_stream_that_loses_its_framing_answers_what_it_read_and_the_exit_code(state_dir: Path) -> None:
    """docker-py sometimes reads payload bytes as a frame header ("0 is not a valid stream",
    docker/docker-py#3160; met under load with podman's socket): the ``ValueError`` ended the
    exec with no answer but "exec_failed", though the command ran. The output read so far comes
    back, said cut, with the command's exit code from the engine once it has ended."""
    states = iter([{"Pid": 0, "Running": True}, {"Pid": 0, "Running": True}])

    def stream() -> Any:
        yield (b"first part\n", None)
        raise ValueError("0 is not a valid stream")

    api = SimpleNamespace(
        exec_create=lambda *a, **k: {"Id": "e1"},
        exec_start=lambda *a, **k: stream(),
        exec_inspect=lambda *_: next(states, {"Pid": 0, "Running": False, "ExitCode": 3}),
    )
    rt = object.__new__(DockerRuntime)
    StoredRuntime.__init__(rt, state_dir)
    rt.client = SimpleNamespace(
        api=api, containers=SimpleNamespace(get=lambda _name: SimpleNamespace(id="c1", attrs={"Config": {}}))
    )
    rt._exits, rt._closed = {}, threading.Event()
    rt._records[5] = AttemptRecord(attempt_id=5, workload_id=1, state="running")
    got = run_async(rt.exec(5, ["sh", "-c", "head -c 100000 /dev/zero; exit 3"], 10, 1000), timeout=20)
    assert (got.stdout, got.truncated, got.timed_out, got.exit_code) == (b"first part\n", True, False, 3)
