"""brk41: the agent against a server whose commands would put two attempts on one GPU."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import FakeServer, make_agent, run_async, running, standin, start_msg

from agent import client as agent_client
from agent.protocol import AttemptEvent, Heartbeat, Hello, Stop


def test_a_start_waits_for_its_gpus_while_another_attempt_still_holds_them(state_dir: Path) -> None:
    """Given attempt 20 running on GPU 1 (as one the server ended as lost, placed anew while its
    process runs on), when a ``start`` of attempt 21 names GPUs 1 and 2, then 21 does not run
    beside it: it starts once 20 has exited (its stop, grace included), never on a GPU still held.
    Before, both ran on GPU 1 at once, two owners' work sharing one device's memory."""

    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)) as _task:
            await server.expect(lambda m: isinstance(m, Hello))
            await server.send(start_msg(20, standin(60), gpus=[1]))
            await server.expect_event(20, "started")

            await server.send(start_msg(21, standin(60), gpus=[1, 2]))
            await asyncio.sleep(0.6)  # three heartbeats: 21 still waits
            beat = await server.expect(lambda m: isinstance(m, Heartbeat))
            assert isinstance(beat, Heartbeat) and beat.running == [20]
            await server.send(start_msg(21, standin(60), gpus=[1, 2]))  # repeated: still the one start

            await server.send(Stop(attempt_id=20, reason="lost", grace_s=5))
            assert (await server.expect_event(20, "exited")).exit_code == 143
            await server.expect_event(21, "started")
            await server.send(Stop(attempt_id=21, reason="done", grace_s=5))
            await server.expect_event(21, "exited")

    run_async(scenario(), timeout=30)


def test_a_start_stopped_or_timed_out_while_it_waits_for_its_gpus_never_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``stop`` for an attempt waiting for its GPUs ends it ``stopped`` (nothing ran); a wait
    past :data:`agent.client.GPU_WAIT_S` ends it ``failed_to_start``, naming who holds them."""
    monkeypatch.setattr(agent_client, "GPU_WAIT_S", 1.0)

    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)) as _task:
            await server.expect(lambda m: isinstance(m, Hello))
            await server.send(start_msg(30, standin(60), gpus=[0]))
            await server.expect_event(30, "started")

            await server.send(start_msg(31, standin(60), gpus=[0]))
            await asyncio.sleep(0.3)
            await server.send(Stop(attempt_id=31, reason="canceled", grace_s=5))
            stopped = await server.expect_event(31, "stopped")
            assert "waited for its GPUs" in (stopped.message or "")

            await server.send(start_msg(32, standin(60), gpus=[3, 0]))
            failed = await server.expect(lambda m: isinstance(m, AttemptEvent) and m.attempt_id == 32, within=5)
            assert isinstance(failed, AttemptEvent) and failed.state == "failed_to_start"
            assert "GPU 0 by attempt 30" in (failed.message or "")
            await server.send(Stop(attempt_id=30, reason="done", grace_s=5))
            await server.expect_event(30, "exited")

    run_async(scenario(), timeout=30)


def test_join_writes_its_config_through_no_file_planted_at_its_temporary_name(tmp_path: Path) -> None:
    """brk41: ``fairway-agent join`` wrote the config (the host token) to ``.<name>.<pid>`` beside
    it, opened without ``O_EXCL`` and following links: in a directory another user may write (a
    ``--config`` under a shared directory), a link planted at that predictable name made the root
    agent truncate and overwrite the file it pointed to with the config, and a file planted there
    (the planter's, readable by them) received the token. The temporary file is a new one of the agent's
    (``mkstemp``), whatever lies in the directory."""
    import os

    from agent.join import write_config

    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    config = tmp_path / "agent.yaml"
    pid = os.getpid()
    (tmp_path / f".agent.yaml.{pid}").symlink_to(victim)
    write_config(config, {"host_token": "fwh_secret"})
    assert victim.read_text() == "keep\n"
    assert "fwh_secret" in config.read_text() and (config.stat().st_mode & 0o777) == 0o600
    assert not config.is_symlink()


def test_a_start_whose_env_names_hold_an_equals_sign_fails_to_start(state_dir: Path) -> None:
    """A server sending an env name with ``=`` (``CUDA_VISIBLE_DEVICES=0,1,2,3``) gets
    ``failed_to_start`` naming it, nothing run; before, the process runtime reported ``started``
    and its exec then refused the name (exit 126), and the docker runtime passed the engine an
    entry for a variable the agent sets itself."""
    from dataclasses import replace

    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)) as _task:
            await server.expect(lambda m: isinstance(m, Hello))
            start = start_msg(40, standin(1), gpus=[0])
            await server.send(replace(start, env={"CUDA_VISIBLE_DEVICES=0,1,2,3": "x", "OK": "1"}))
            failed = await server.expect_event(40, "failed_to_start")
            assert "cannot contain '='" in (failed.message or "") and "CUDA_VISIBLE_DEVICES=0,1,2,3" in failed.message

    run_async(scenario(), timeout=30)
