"""CPU and memory limits of attempts (DESIGN.md §3.3, docs/isolation.md): the process runtime
writes them into the attempt's cgroups (v2 ``cpu.max``/``memory.max``, v1 ``cpu.cfs_quota_us``/
``memory.limit_in_bytes``) before the command runs; the docker runtime passes ``nano_cpus``,
``mem_limit`` and ``shm_size`` to the engine (for real against podman: tests/agent/test_docker_runtime.py's
fixture). The hello reports the host's CPUs and memory."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agent_testkit import run_async

from agent.gpu.base import machine_resources
from agent.gpu.fake import FakeGpuBackend
from agent.protocol import Hello, Limits, Start, decode, encode
from agent.runtime.base import AttemptSpec
from agent.runtime.isolation import (
    CgroupSetup,
    Isolation,
    IsolationConfig,
    LimitSetup,
    apply_limits,
    detect_cgroups,
    detect_limits,
    limit_files,
    v1_limit_cgroups,
)
from agent.runtime.process import ProcessRuntime

REPO_ROOT = Path(__file__).resolve().parents[2]
M = 1 << 20


def _spec(attempt_id: int, command: list[str], **kw: object) -> AttemptSpec:
    return AttemptSpec(
        attempt_id=attempt_id,
        workload_id=700 + attempt_id,
        command=command,
        gpu_indices=[0],
        gpu_uuids=["GPU-0"],
        grace_s=1,
        **kw,  # type: ignore[arg-type]
    )


def _mounts() -> list[tuple[str, str, str]]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        out.append((parts[1], parts[2], parts[3]))
    return out


def limits_of(pid: int) -> dict[str, str]:
    """The limit files of the cgroups process ``pid`` is in, read from the host's mounts."""
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for point, fstype, opts in _mounts():
            if controllers == "" and fstype == "cgroup2":
                base = Path(point) / path.lstrip("/")
                names = ("cpu.max", "memory.max")
            elif fstype == "cgroup" and controllers and set(controllers.split(",")) <= set(opts.split(",")):
                base = Path(point) / path.lstrip("/")
                names = ("cpu.cfs_quota_us", "memory.limit_in_bytes")
            else:
                continue
            for name in names:
                if (base / name).exists():
                    out[name] = (base / name).read_text().strip()
    return out


def test_limit_files_say_what_each_cgroup_version_gets() -> None:
    assert limit_files(2, 256 * M, "v2") == [
        ("cpu", "cpu.max", "200000 100000"),
        ("memory", "memory.max", str(256 * M)),
        ("memory", "memory.swap.max", "0"),
    ]
    assert ("cpu", "cpu.cfs_quota_us", "200000") in limit_files(2, None, "v1")
    assert limit_files(None, None, "v1") == [] and limit_files(2, M, "none") == []


def test_pids_max_goes_into_the_attempts_v2_cgroup_or_a_v1_pids_cgroup_it_joins(tmp_path: Path) -> None:
    """Where ``pids.max`` is written (plain files standing in for cgroupfs): v2, the attempt's own
    cgroup with ``+pids`` enabled above it, nothing more to join; v1, a cgroup of the attempt's
    name in the pids hierarchy, which the wrapper joins and the attempt's end removes."""
    name = Path("agent-x") / "attempt-7"
    v2 = tmp_path / "unified" / "fairway"
    (v2 / name).mkdir(parents=True)
    setup = LimitSetup("none", pids="v2")
    assert apply_limits(setup, v2 / name, name, None, None, 64) == []
    assert (v2 / name / "pids.max").read_text() == "64"
    assert (v2 / "cgroup.subtree_control").read_text() == "+pids"
    assert (v2 / "agent-x" / "cgroup.subtree_control").read_text() == "+pids"
    v1 = tmp_path / "pids" / "fairway"
    setup = LimitSetup("none", pids="v1", pids_root=v1)
    assert apply_limits(setup, v2 / name, name, None, None, 64) == [v1 / name]
    assert (v1 / name / "pids.max").read_text() == "64"
    assert v1_limit_cgroups(setup, name) == [v1 / name]
    assert apply_limits(setup, v2 / name, tmp_path / "other", None, None, None) == []  # pids_max 0: none


def test_without_a_cgroup_the_limits_are_not_enforced_and_the_host_says_so() -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none", note="test"))
    assert isolation.limits == LimitSetup("none", note="no usable cgroup (test)", pids_note="no usable cgroup (test)")
    status = isolation.status()
    assert status["limits"] == "none"
    assert any("CPU and memory requests are not enforced" in w for w in status["warnings"])


@pytest.mark.skipif(os.geteuid() != 0, reason="writing cgroup limits needs root here")
def test_the_process_runtime_limits_cpus_and_memory_through_the_attempts_cgroup(state_dir: Path) -> None:
    setup = detect_cgroups("auto")
    limits = detect_limits(setup)
    if limits.kind == "none":
        pytest.skip(f"no cgroup with cpu and memory controllers here ({limits.note})")
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=setup)

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation)
        exits: asyncio.Queue = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        record = await rt.start(_spec(1, ["sh", "-c", "sleep 30"], cpus=2, memory=256 * M))
        assert record.pid is not None
        seen = limits_of(record.pid)
        if limits.kind == "v2":
            assert seen["cpu.max"] == "200000 100000" and seen["memory.max"] == str(256 * M)
        else:
            assert seen["cpu.cfs_quota_us"] == "200000" and seen["memory.limit_in_bytes"] == str(256 * M)
        # no limits asked: none written (the host's defaults)
        free = await rt.start(_spec(2, ["sh", "-c", "sleep 30"]))
        assert free.pid is not None
        other = limits_of(free.pid)
        assert other.get("memory.limit_in_bytes", "max") != str(256 * M) and other.get("memory.max") != str(256 * M)
        await rt.stop(1, 0.2, "canceled")
        await rt.stop(2, 0.2, "canceled")
        for _ in range(2):
            await asyncio.wait_for(exits.get(), 10)
        # the limit cgroups go with the attempt
        for base in (limits.cpu, limits.memory):
            if base is not None:
                assert not any(base.rglob("attempt-1"))

    run_async(scenario())


def test_hello_and_start_carry_resources_and_old_peers_still_parse() -> None:
    hello = Hello(id=1, host="h", agent_version="1", gpus=[], attempts=[], cpus=64, memory=512 << 30)
    assert decode(encode(hello)) == hello
    old = encode(Hello(id=1, host="h", agent_version="1", gpus=[], attempts=[])).replace(
        ',"cpus":null,"memory":null', ""
    )
    assert decode(old).cpus is None  # an agent older than the fields
    start = Start(
        id=2, attempt_id=5, workload_id=6, image="", command=["true"], env={}, gpu_uuids=[], gpu_indices=[],
        grace_s=1, limits=Limits(cpus=4, memory=M, shared_memory=M),
    )  # fmt: skip
    assert decode(encode(start)).limits == Limits(4, M, M)
    with pytest.raises(Exception, match="cpus"):
        decode(encode(hello).replace('"cpus":64', '"cpus":0'))


def test_the_fake_backend_offers_8_cpus_and_64g_per_gpu_and_a_real_host_its_own() -> None:
    assert FakeGpuBackend("h", 4).host_resources() == (32, 256 << 30)
    assert FakeGpuBackend("h", 4, cpus=10, memory=M).host_resources() == (10, M)
    cpus, memory = machine_resources()
    assert cpus and cpus >= 1 and memory and memory > 64 * M
    assert machine_resources(Path("/nonexistent"))[1]  # sysconf when /proc/meminfo is missing
