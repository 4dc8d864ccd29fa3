"""The process runtime runs real process groups: env, logs, SIGTERM, SIGKILL, re-adoption."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from pathlib import Path

import agent_testkit
import pytest
from agent_testkit import REPO_ROOT, run_async, standin

from agent.runtime import process as process_runtime
from agent.runtime.base import AttemptSpec, StartError
from agent.runtime.process import ProcessRuntime, proc_start_time
from agent.state import AttemptRecord, AttemptStore


def spec(
    attempt_id: int, command: list[str], gpus: list[int] | None = None, env: dict[str, str] | None = None
) -> AttemptSpec:
    gpus = [2, 3] if gpus is None else gpus
    return AttemptSpec(
        attempt_id=attempt_id,
        workload_id=40 + attempt_id,
        command=command,
        gpu_indices=gpus,
        gpu_uuids=[f"GPU-uuid-{i}" for i in gpus],
        env=env or {},
        grace_s=5,
    )


def runtime_with_exits(state_dir: Path) -> tuple[ProcessRuntime, asyncio.Queue[AttemptRecord]]:
    runtime = ProcessRuntime(state_dir, cwd=REPO_ROOT)
    exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
    runtime.on_exit = exits.put_nowait
    return runtime, exits


async def wait_for_log(runtime: ProcessRuntime, attempt_id: int, text: str) -> None:
    for _ in range(200):
        if text.encode() in runtime.read_log(attempt_id, 1 << 20)[0]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in the log of attempt {attempt_id}")


def test_attempt_runs_with_its_gpus_and_env_and_reports_exit_code(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRWAY_TOKEN", "secret-host-token")
    show_env = (
        "import os; print(*(f'{k}={os.environ.get(k)}' for k in "
        "['CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES', 'FAIRWAY_WORKLOAD_ID', 'FAIRWAY_ATTEMPT', "
        "'MY_VAR', 'FAIRWAY_TOKEN']), sep='\\n'); raise SystemExit(3)"
    )

    async def scenario() -> None:
        runtime, exits = runtime_with_exits(state_dir)
        record = await runtime.start(spec(1, [sys.executable, "-c", show_env], env={"MY_VAR": "x"}))
        assert record.state == "running"
        assert record.proc_start == proc_start_time(record.pid or 0)

        exited = await asyncio.wait_for(exits.get(), 10)

        assert (exited.attempt_id, exited.state, exited.exit_code) == (1, "exited", 3)
        log = runtime.read_log(1, 4096)[0].decode()
        assert log.splitlines() == [
            "CUDA_VISIBLE_DEVICES=2,3",
            "NVIDIA_VISIBLE_DEVICES=GPU-uuid-2,GPU-uuid-3",
            "FAIRWAY_WORKLOAD_ID=41",
            "FAIRWAY_ATTEMPT=1",
            "MY_VAR=x",
            "FAIRWAY_TOKEN=None",  # the agent's own settings never reach a workload
        ]
        assert runtime.running_ids() == []

    run_async(scenario())


def test_standin_runs_to_exit_zero_and_fails_with_one(state_dir: Path) -> None:
    async def scenario() -> None:
        runtime, exits = runtime_with_exits(state_dir)
        await runtime.start(spec(1, standin(0.3)))
        await runtime.start(spec(2, standin(0.3, "--fail"), gpus=[4]))

        codes = {}
        for _ in range(2):
            record = await asyncio.wait_for(exits.get(), 10)
            codes[record.attempt_id] = record.exit_code

        assert codes == {1: 0, 2: 1}
        assert b"CUDA_VISIBLE_DEVICES=4" in runtime.read_log(2, 4096)[0]

    run_async(scenario())


def test_stop_sends_sigterm_to_the_group(state_dir: Path) -> None:
    async def scenario() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        await runtime.start(spec(1, standin(60)))
        await wait_for_log(runtime, 1, "running 60 s")
        began = time.monotonic()

        record = await runtime.stop(1, grace_s=10)

        assert record is not None
        assert (record.state, record.exit_code, record.killed) == ("exited", 143, False)
        assert time.monotonic() - began < 5
        assert b"SIGTERM received" in runtime.read_log(1, 4096)[0]

    run_async(scenario())


def test_stop_sends_each_process_one_sigterm(state_dir: Path) -> None:
    """Given a trainer that checkpoints on its first SIGTERM and quits at once on a second (the
    common "again to force" pattern), when the attempt is stopped, then it gets exactly one
    SIGTERM: the stop signalled the attempt's cgroup (or tree) and then its process group again,
    so every process got two, and the second cut its checkpoint short."""
    trainer = (
        "import signal, sys, time\n"
        "got = []\n"
        "def on_term(signum, frame):\n"
        "    got.append(signum)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "print('ready', flush=True)\n"
        "while not got: time.sleep(0.01)\n"
        "time.sleep(0.5)\n"
        "print(f'sigterms {len(got)}', flush=True)\n"
        "sys.exit(143)\n"
    )

    async def scenario() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        await runtime.start(spec(1, [sys.executable, "-c", trainer]))
        await wait_for_log(runtime, 1, "ready")

        record = await runtime.stop(1, grace_s=10)

        assert record is not None and record.exit_code == 143
        assert b"sigterms 1\n" in runtime.read_log(1, 4096)[0]

    run_async(scenario())


def test_stop_escalates_to_sigkill_after_the_grace(state_dir: Path) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )

    async def scenario() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        record = await runtime.start(spec(1, [sys.executable, "-c", stubborn]))
        await wait_for_log(runtime, 1, "ready")
        began = time.monotonic()

        await runtime.stop(1, grace_s=0.5)

        assert (record.state, record.exit_code, record.killed) == ("exited", 137, True)
        assert 0.5 <= time.monotonic() - began < 5

    run_async(scenario())


def test_command_not_found_fails_to_start_and_stays_failed(state_dir: Path) -> None:
    async def scenario() -> None:
        runtime, _ = runtime_with_exits(state_dir)

        with pytest.raises(StartError, match="no-such-trainer"):
            await runtime.start(spec(1, ["no-such-trainer", "--epochs", "3"]))
        again = await runtime.start(spec(1, ["no-such-trainer"]))

        assert again.state == "failed_to_start"
        assert runtime.running_ids() == []

    run_async(scenario())


def test_start_of_a_known_attempt_runs_nothing_new(state_dir: Path) -> None:
    async def scenario() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        first = await runtime.start(spec(1, standin(60)))

        second = await runtime.start(spec(1, standin(60)))

        assert second is first
        assert runtime.running_ids() == [1]
        await runtime.stop(1, grace_s=5)

    run_async(scenario())


def test_restarted_runtime_readopts_a_running_attempt_and_gets_its_exit_code(state_dir: Path) -> None:
    async def first_agent() -> int:
        runtime, _ = runtime_with_exits(state_dir)
        record = await runtime.start(spec(1, standin(60)))
        await wait_for_log(runtime, 1, "running 60 s")
        await runtime.close()  # the agent goes away; the attempt must not
        assert record.pid is not None
        return record.pid

    async def second_agent(pid: int) -> None:
        runtime, _ = runtime_with_exits(state_dir)
        await runtime.recover()
        assert runtime.running_ids() == [1]
        os.kill(pid, 0)  # still alive

        record = await runtime.stop(1, grace_s=5)

        assert record is not None
        assert (record.state, record.exit_code) == ("exited", 143)  # from the wrapper's exit file

    pid = run_async(first_agent())
    run_async(second_agent(pid))


def test_exit_while_the_agent_was_away_is_found_with_its_code_and_age(state_dir: Path) -> None:
    async def first_agent() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        await runtime.start(spec(1, standin(0.2, "--fail")))
        await runtime.close()

    async def second_agent() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        await runtime.recover()
        record = runtime.get(1)
        assert record is not None
        assert (record.state, record.exit_code, record.reported) == ("exited", 1, False)
        age = record.age_s(time.clock_gettime(time.CLOCK_BOOTTIME), runtime.boot_id)
        assert age is not None and 0.3 < age < 10

    run_async(first_agent())
    time.sleep(1.5)
    run_async(second_agent())


def test_acknowledged_exits_are_kept_until_the_retention_ends(state_dir: Path) -> None:
    async def scenario() -> None:
        runtime, exits = runtime_with_exits(state_dir)
        await runtime.start(spec(1, [sys.executable, "-c", "pass"]))
        record = await asyncio.wait_for(exits.get(), 10)
        runtime.mark_reported([1])

        runtime.prune()
        assert runtime.get(1) is record
        record.finished_wall = time.time() - 2 * 24 * 3600
        runtime.prune()

        assert runtime.get(1) is None
        assert not list((state_dir / "attempts").iterdir())

    run_async(scenario())


def test_a_start_cut_short_by_the_agent_stopping_leaves_an_attempt_the_next_agent_owns(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An agent stopped (SIGTERM) while a start was in progress cancelled the start after the
    # wrapper was spawned: the command ran on, recorded nowhere (no agent re-adopted, stopped or
    # reported it; the e2e teardown found it running 120 s later).
    spawned = threading.Event()
    hand_over = process_runtime._hand_over

    def slow_hand_over(fd: int, payload: bytes) -> None:
        spawned.set()
        time.sleep(0.3)  # the agent's stop arrives meanwhile
        hand_over(fd, payload)

    monkeypatch.setattr(process_runtime, "_hand_over", slow_hand_over)

    async def first_agent() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        starting = asyncio.create_task(runtime.start(spec(1, standin(120))))
        assert await asyncio.to_thread(spawned.wait, 10)
        starting.cancel()  # what Agent.run's shutdown does to its tasks
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await runtime.close()

    async def second_agent() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        await runtime.recover()
        assert runtime.running_ids() == [1]  # re-adopted: its wrapper is alive and recorded
        await wait_for_log(runtime, 1, "running 120 s")

        record = await runtime.stop(1, grace_s=5)

        assert record is not None and (record.state, record.exit_code) == ("exited", 143)

    run_async(first_agent())
    run_async(second_agent())
    assert agent_testkit.processes_of(state_dir) == []


def test_the_attempt_is_recorded_before_the_agent_first_waits_on_its_wrapper(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An agent killed (SIGKILL) between the wrapper's spawn and the end of the start must leave a
    # record that the next agent re-adopts, as the docker runtime records before it creates.
    on_disk: list[AttemptRecord] = []
    read_status = process_runtime._read_status

    def read_status_and_look(fd: int) -> bytes:
        status = read_status(fd)
        on_disk.extend(AttemptStore(state_dir).load_all())
        return status

    monkeypatch.setattr(process_runtime, "_read_status", read_status_and_look)

    async def scenario() -> None:
        runtime, _ = runtime_with_exits(state_dir)
        record = await runtime.start(spec(1, standin(60)))
        await runtime.stop(1, grace_s=5)
        ((early),) = on_disk
        assert (early.attempt_id, early.state, early.pid, early.proc_start) == (
            1,
            "running",
            record.pid,
            record.proc_start,
        )
        assert early.cgroup == record.cgroup

    run_async(scenario())


def test_the_start_line_names_the_workload(state_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """try43: the agent's log named an attempt only by its wire id (``attempt 8325578641763426498
    started``), which nothing an operator sees (``fairway ls``, the pages: workload #1) shows; the
    start line now names the workload too, so a host's log can be read beside the queue."""

    async def scenario() -> None:
        runtime, exits = runtime_with_exits(state_dir)
        with caplog.at_level("INFO", logger="agent.runtime.process"):
            await runtime.start(spec(7, standin(0.1)))
        await asyncio.wait_for(exits.get(), 10)

    run_async(scenario())
    (line,) = [r.getMessage() for r in caplog.records if "started" in r.getMessage()]
    assert line.startswith("attempt 7 (workload #47) started: pid "), line
