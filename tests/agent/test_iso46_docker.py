"""iso46, the docker runtime against podman (skipped without it; docs/isolation.md, "The cgroup
tree"): every container gets a cgroup namespace of its own, whatever the engine's default (Docker's
and Podman's is the host's on a cgroup v1 or hybrid host), so it reads neither the engine's cgroup
path nor another container's."""

from __future__ import annotations

import asyncio
import logging
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
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every container is created with ``cgroupns: private``. Given it (Docker 20.10 on, Podman's
    Docker API since 2025), its ``/proc/self/cgroup`` shows ``/`` for each hierarchy and its cgroup
    namespace is not the host's; an engine that ignores it (Podman 4's API, whose own default on a
    v1 or hybrid host is the host's: ``/libpod_parent/libpod-<id>``, read by the workload) is
    named in the agent's log, once per agent start (never silently), and not in the attempts' logs
    (thr47: every workload's ``fairway logs`` began with the agent's note on the engine). Either way
    no container's cgroup, its own or a running neighbour's, is listed by name under its
    ``/sys/fs/cgroup``."""
    assert container_spec(spec(7, "true"), state_dir, nvidia=False)["cgroupns"] == "private"
    host_ns = str(Path("/proc/self/ns/cgroup").readlink())

    caplog.set_level(logging.INFO, logger="agent.runtime.docker")

    async def scenario() -> tuple[str, str]:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        await rt.start(spec(1, "echo up; sleep 30"))
        await wait_log(rt, 1, "up")
        await rt.start(spec(2, "sleep 0.5; " + PROBE))
        done = await asyncio.wait_for(exits.get(), 30)
        assert done.attempt_id == 2 and done.exit_code == 0
        out = await wait_log(rt, 2, "probed")
        first = rt.read_log(1, 1 << 16)[0].decode()
        await rt.stop(1, 1)
        await rt.close()
        return out, first

    out, first = run_async(scenario())
    agent_log = [r.getMessage() for r in caplog.records if r.name == "agent.runtime.docker"]
    said_by_agent = [m for m in agent_log if SHARED_CGROUP_NS in m]
    # The workloads' logs hold their own output only.
    assert "fairway:" not in out and "fairway:" not in first, (out, first)
    assert out.splitlines()[0].startswith("SELF "), out
    assert first.splitlines()[0] == "up", first
    said = {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines()}
    paths = {entry.split(":", 2)[2] for entry in said["SELF"].split()}
    if said["NS"] == host_ns:  # the engine ignored it: said so, in the agent's log, once for both
        assert len(said_by_agent) == 1, agent_log
        assert said_by_agent[0].startswith(f"fairway: {SHARED_CGROUP_NS}"), agent_log
        assert paths != {"/"}, out
    else:
        assert paths == {"/"} and not said_by_agent, (out, agent_log)
    assert said["FOUND"] == "0", out
