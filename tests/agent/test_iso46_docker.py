"""iso46, the docker runtime against podman (skipped without it; docs/isolation.md, "The cgroup
tree"): every container gets a cgroup namespace of its own, whatever the engine's default (Docker's
and Podman's is the host's on a cgroup v1 or hybrid host), so it reads neither the engine's cgroup
path nor another container's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("docker")

from test_docker_runtime import podman, run_async, runtime, spec, wait_log  # noqa: E402, F401 -- the podman fixture

from agent.runtime.docker import SHARED_CGROUP_NS, container_spec  # noqa: E402

PROBE = (
    'echo "SELF $(tr "\\n" " " </proc/self/cgroup)"; '
    'echo "NS $(readlink /proc/self/ns/cgroup)"; '
    'echo "FOUND $(find /sys/fs/cgroup -name "*libpod*" 2>/dev/null | wc -l)"; echo probed'
)


def test_a_container_asks_for_a_cgroup_namespace_of_its_own_and_says_when_it_got_the_hosts(
    state_dir: Path,
    podman: str,  # noqa: F811
) -> None:
    """Every container is created with ``cgroupns: private``. Given it (Docker 20.10 on, Podman's
    Docker API since 2025), its ``/proc/self/cgroup`` shows ``/`` for each hierarchy and its cgroup
    namespace is not the host's; an engine that ignores it (Podman 4's API, whose own default on a
    v1 or hybrid host is the host's: ``/libpod_parent/libpod-<id>``, read by the workload) is
    named in the attempt's log (never silently). Either way no container's cgroup, its own or a
    running neighbour's, is listed by name under its ``/sys/fs/cgroup``."""
    assert container_spec(spec(7, "true"), state_dir, nvidia=False)["cgroupns"] == "private"
    host_ns = str(Path("/proc/self/ns/cgroup").readlink())

    async def scenario() -> str:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        await rt.start(spec(1, "echo up; sleep 30"))
        await wait_log(rt, 1, "up")
        await rt.start(spec(2, "sleep 0.5; " + PROBE))
        done = await asyncio.wait_for(exits.get(), 30)
        assert done.attempt_id == 2 and done.exit_code == 0
        out = await wait_log(rt, 2, "probed")
        await rt.stop(1, 1)
        await rt.close()
        return out

    out = run_async(scenario())
    said = {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines()}
    paths = {entry.split(":", 2)[2] for entry in said["SELF"].split()}
    if said["NS"] == host_ns:  # the engine ignored it: said so
        assert f"fairway: {SHARED_CGROUP_NS}" in out, out
        assert paths != {"/"}, out
    else:
        assert paths == {"/"} and SHARED_CGROUP_NS not in out, out
    assert said["FOUND"] == "0", out
