"""iso61, the docker runtime against podman (skipped without it or without root; docs/isolation.md):
a container's mount is bound from the directory its owner opened, not from a path looked up again
later by the engine as root."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("docker")

from agent_testkit import bobs_home, host_scratch_dir, needs_root  # noqa: E402
from test_docker_runtime import podman, run_async, spec  # noqa: E402, F401 -- the podman fixture

import agent.runtime.docker as docker_runtime  # noqa: E402
from agent.protocol import Mount  # noqa: E402
from agent.runtime.base import StartError  # noqa: E402
from agent.runtime.docker import LABEL_ATTEMPT, DockerRuntime  # noqa: E402


def _output(rt: DockerRuntime, attempt_id: int) -> bytes:
    """The container's output in the attempt's log, without any agent line (``fairway: …``; the
    note on an engine that left it in the host's cgroup namespace, iso46, is the agent's log's
    since thr47)."""
    lines = rt.read_log(attempt_id, 1 << 16)[0].splitlines(keepends=True)
    return b"".join(line for line in lines if not line.startswith(b"fairway: "))


@needs_root
def test_a_mount_swapped_for_a_symlink_after_its_check_never_binds_another_owners_directory(
    podman: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """iso61: the agent checked that a container's mount lies where its owner reaches it, then the
    engine bound the path, as root and following symlinks (iso58 left it open). ``/scratch/alice``
    in a world-writable ``/scratch`` is alice's entry: swapped for a symlink into bob's 0700 home
    in between, the container read bob's files. The swap is made at the two moments that matter,
    deterministically: right after the check (the start now fails: alice's own open of the path is
    refused) and right before the engine's bind (the container still gets alice's directory, the
    one she opened)."""
    base = host_scratch_dir("fw-iso61-")
    try:
        isolation, _bob, home = bobs_home(base)
        alice = isolation.resolve("iso-alice", None, None, (), cluster_allows_root=False)
        scratch = base / "scratch"
        scratch.mkdir()
        os.chmod(scratch, 0o1777)  # noqa: S103 -- a shared scratch space: each entry is its owner's to change
        mine = scratch / "iso-alice"

        def alices_own() -> None:
            """alice's scratch directory, a real one holding her plan."""
            if mine.is_symlink():
                mine.unlink()
            shutil.rmtree(scratch / "moved", ignore_errors=True)
            mine.mkdir()
            (mine / "plan.txt").write_text("alice's plan\n")
            os.chown(mine, alice.uid, alice.gid)

        def swap() -> None:
            """What alice's login on the host does: her directory moved away, a symlink in its place."""
            mine.rename(scratch / "moved")
            mine.symlink_to(home / "notes")

        def swapping_after(fn: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                result = fn(*args, **kwargs)
                swap()
                return result

            return wrapped

        def swapping_before(fn: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                swap()
                return fn(*args, **kwargs)

            return wrapped

        mounts = (Mount(name="scratch", host_path=str(mine), container_path="/scratch", read_only=False),)

        async def scenario() -> None:
            rt = DockerRuntime(base / "state", base_url=podman, nvidia=False, pull=False, isolation=isolation)
            exits: asyncio.Queue[object] = asyncio.Queue()
            rt.on_exit = exits.put_nowait
            await rt.recover()

            # the swap between the agent's check and the moment of use: nothing of bob's is bound
            alices_own()
            with monkeypatch.context() as m:
                m.setattr(docker_runtime, "mount_problem", swapping_after(docker_runtime.mount_problem))
                try:
                    await rt.start(replace(spec(1, "cat /scratch/plan.txt"), owner="iso-alice", mounts=mounts))
                except StartError as exc:
                    assert "cannot reach mount scratch" in str(exc) and "Permission denied" in str(exc), exc
                    assert not rt.client.containers.list(all=True, filters={"label": f"{LABEL_ATTEMPT}=1"})
                else:
                    await asyncio.wait_for(exits.get(), 30)
                    assert b"bob's plan" not in rt.read_log(1, 100)[0]

            # the swap between the owner's open and the engine's bind: the container gets what she opened
            alices_own()
            with monkeypatch.context() as m:
                m.setattr(DockerRuntime, "_create_and_start", swapping_before(DockerRuntime._create_and_start))
                await rt.start(replace(spec(2, "cat /scratch/plan.txt"), owner="iso-alice", mounts=mounts))
            await asyncio.wait_for(exits.get(), 30)
            assert _output(rt, 2) == b"alice's plan\n"

            # no swap: the mount is bound as before, writable where asked
            alices_own()
            await rt.start(replace(spec(3, "sleep 1; cat /scratch/plan.txt; echo out > /scratch/o"), owner="iso-alice",
                                   mounts=mounts))  # fmt: skip
            await asyncio.wait_for(exits.get(), 30)
            assert _output(rt, 3) == b"alice's plan\n"
            assert (mine / "o").read_text() == "out\n" and (mine / "o").stat().st_uid == alice.uid
            # the binds the engine was given are gone from the host once it holds its own
            assert not list((base / "state" / "mounts").iterdir())
            assert str(base) not in Path("/proc/self/mountinfo").read_text()  # noqa: ASYNC240
            await rt.close()

        run_async(scenario())
    finally:
        shutil.rmtree(base, ignore_errors=True)
