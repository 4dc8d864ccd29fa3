"""iso58, the docker runtime against podman (skipped without it; docs/isolation.md): a container's
output must not fill the engine's disk, whatever the agent's own copy keeps."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("docker")

from agent_testkit import bobs_home, needs_root  # noqa: E402
from test_docker_runtime import podman, run_async, runtime, spec  # noqa: E402, F401 -- the podman fixture

from agent.protocol import Mount  # noqa: E402
from agent.runtime.base import StartError  # noqa: E402
from agent.runtime.docker import LABEL_ATTEMPT, DockerRuntime, container_spec  # noqa: E402

CAP = 1 << 20
FLOOD = "head -c 24000000 /dev/zero | tr '\\0' x; echo; echo THE-END; sleep 3"  # 24 MB, then still running


def test_the_engine_keeps_a_containers_output_to_the_log_cap_too(state_dir: Path, podman: str) -> None:  # noqa: F811
    """iso58: the agent capped its own copy of a container's output (``log_max_bytes``) but the
    engine kept the whole of it in its log (Docker's ``json-file`` and Podman's ``k8s-file``
    rotate nothing by default): 24 MB of a 1 MiB cap stayed on the engine's disk until the container
    was removed, so one workload printing without end filled the host's disk
    (``/var/lib/docker``, ``/var/lib/containers``). The container's log now rotates at the cap
    (``log_config``); the agent still gets the tail."""
    assert container_spec(spec(1, "true"), state_dir, nvidia=False, log_max_bytes=CAP)["log_config"] == {
        "Type": "json-file",
        "Config": {"max-size": str(CAP // 2), "max-file": "2"},
    }

    async def scenario() -> None:
        rt, exits = runtime(state_dir, podman)
        rt.log_max_bytes = CAP
        await rt.recover()
        await rt.start(spec(1, FLOOD))
        (container,) = rt.client.containers.list(all=True, filters={"label": f"{LABEL_ATTEMPT}=1"})
        peak = 0
        while exits.empty():
            await asyncio.sleep(0.05)
            path = container.attrs.get("LogPath") or ""
            if path and os.path.exists(path):  # noqa: ASYNC240
                peak = max(peak, os.stat(path).st_size)  # noqa: ASYNC240
            if not path:
                await asyncio.to_thread(container.reload)
        assert (await exits.get()).exit_code == 0
        assert container.attrs.get("LogPath"), container.attrs
        assert 0 < peak <= CAP, f"the engine kept {peak} bytes of output, the cap is {CAP}"
        assert rt.read_log(1, 100)[0].endswith(b"\nTHE-END\n")
        await rt.close()

    run_async(scenario())


@needs_root
def test_a_mount_whose_path_leads_where_its_owner_cannot_reach_fails_to_start(podman: str) -> None:  # noqa: F811
    """iso58: the engine binds a mount's host path as root, following symlinks, so a path that a
    workload's owner can change (``/scratch/{user}`` in a world-writable ``/scratch``; a
    ``budgets`` mount's subdirectory) made into a symlink to a directory under another owner's
    0700 home put that directory in the container, where its owner read the files it holds (mode
    0644: their home's mode was all that kept them). A container's mount must now lie where its
    owner reaches it on the host, as the process runtime checks for its working directory: the
    start fails naming the directory."""
    base = Path(tempfile.mkdtemp(prefix="fw-iso58-", dir="/var/lib"))
    try:
        os.chmod(base, 0o755)  # noqa: S103 -- as /var/lib: others may traverse
        isolation, bob, home = bobs_home(base)  # bob's home, 0700, and in it a directory of mode 0755
        scratch = base / "scratch"  # world-writable, sticky: the owner's entry is the owner's to change
        scratch.mkdir()
        os.chmod(scratch, 0o1777)  # noqa: S103 -- a shared scratch space
        (scratch / "iso-alice").symlink_to(home / "notes")
        mounts = (
            Mount(name="scratch", host_path=str(scratch / "iso-alice"), container_path="/scratch", read_only=False),
        )

        async def scenario() -> None:
            rt = DockerRuntime(base / "state", base_url=podman, nvidia=False, pull=False, isolation=isolation)
            exits: asyncio.Queue[object] = asyncio.Queue()
            rt.on_exit = exits.put_nowait
            await rt.recover()
            with pytest.raises(StartError) as info:
                await rt.start(replace(spec(1, "cat /scratch/plan.txt"), owner="iso-alice", mounts=mounts))
            assert "cannot reach mount scratch" in str(info.value) and f"{home} is not searchable" in str(info.value)
            assert not rt.client.containers.list(all=True, filters={"label": f"{LABEL_ATTEMPT}=1"})
            # the same directory through a path its owner reaches: bound as before
            os.chmod(home, 0o755)  # noqa: S103
            await rt.start(replace(spec(2, "cat /scratch/plan.txt"), owner="iso-alice", mounts=mounts))
            await asyncio.wait_for(exits.get(), 30)
            assert rt.read_log(2, 100)[0] == b"bob's plan\n"
            await rt.close()

        run_async(scenario())
    finally:
        shutil.rmtree(base, ignore_errors=True)
