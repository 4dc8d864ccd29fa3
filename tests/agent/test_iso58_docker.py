"""iso58, the docker runtime against podman (skipped without it; docs/isolation.md): a container's
output must not fill the engine's disk, whatever the agent's own copy keeps."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

pytest.importorskip("docker")

from test_docker_runtime import podman, run_async, runtime, spec  # noqa: E402, F401 -- the podman fixture

from agent.runtime.docker import LABEL_ATTEMPT, container_spec  # noqa: E402

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
