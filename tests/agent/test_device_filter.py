"""The device filter of the process runtime (fix30; docs/isolation.md, "GPUs, process runtime"):
a cgroup v2 eBPF program refuses the host's other GPUs' devices to an attempt, whatever path
reaches them. Before, the other GPUs' nodes were only covered by a mode-000 stand-in in the
attempt's mount namespace: the same device by another path (a node made before, or
``/proc/<pid>/root/dev/nvidia<n>`` of a process of the owner's outside the attempt) opened.

The program is checked against the plain rule (:func:`devices.allows`) on random inputs by
interpreting it, on any kernel; the tests that load it into the kernel skip where the kernel, the
privileges or cgroup v2 lack it (CI's kernel may differ).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agent_testkit import (
    host_scratch_dir,
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    run_async,
    runtime,
    spec,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.runtime import devices
from agent.runtime.isolation import DeviceSetup, Isolation, IsolationConfig, _devices_v1
from agent.runtime.process import ProcessRuntime, denied_devices

NVIDIA_MAJOR = 195
MINORS = (200, 201, 202)  # not a real GPU's (0..), nor nvidia-modeset (254) or nvidiactl (255)

_isolation = owner_isolation(allow_root=True) if os.geteuid() == 0 else None
needs_filter = pytest.mark.skipif(
    _isolation is None or _isolation.devices is None or _isolation.devices.kind != "bpf",
    reason=f"no cgroup v2 device filter here ({_isolation.devices.note if _isolation and _isolation.devices else ''})",
)

devs = st.tuples(st.integers(0, 4095), st.integers(0, (1 << 20) - 1))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    denied=st.lists(devs, max_size=8),
    access=st.sampled_from([1, 2, 4, 6, 7]),
    dev_type=st.sampled_from([1, 2]),
    asked=st.one_of(devs, st.just((NVIDIA_MAJOR, 0))),
    pick=st.booleans(),
)
def test_the_program_refuses_exactly_the_denied_character_devices(denied, access, dev_type, asked, pick):
    """The instructions as the kernel would run them agree with the rule, for block and character
    devices, every access (mknod, read, write), a device denied or not."""
    if pick and denied:
        asked = denied[len(denied) // 2]
    major, minor = asked
    got = devices.run_program(devices.program(denied), access << 16 | dev_type, major, minor)
    assert got == int(devices.allows(denied, dev_type, major, minor))


def test_only_character_device_nodes_are_filtered(tmp_path: Path) -> None:
    """The fake backend's nodes are regular files (nothing to refuse: the stand-in hides them);
    NVML's are character devices; a missing one is skipped."""
    regular = tmp_path / "nvidia0"
    regular.write_text("")
    assert devices.char_devices([str(regular), str(tmp_path / "gone"), "/dev/null", "/dev/null"]) == [(1, 3)]


def test_the_devices_refused_are_the_other_gpus_less_any_the_attempt_holds() -> None:
    nodes = {0: "/dev/null", 1: "/dev/zero", 2: "/dev/full", 3: "/dev/../dev/null", 4: "/nonexistent"}
    assert denied_devices(nodes, [0]) == [(1, 5), (1, 7)]  # GPU 3's node is GPU 0's device
    assert denied_devices(nodes, [1, 2]) == [(1, 3)]
    assert denied_devices(nodes, [0, 1, 2, 3, 4]) == []
    assert denied_devices({}, [0]) == []


def test_the_host_warns_when_it_hides_gpus_by_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Isolation, "is_root", property(lambda self: True))
    config = IsolationConfig(mode="owner", nss=False)
    without = Isolation(config, devices=DeviceSetup("none", note="kernel says no")).status()
    assert without["devices"] == "none"
    assert any("no device filter for attempts (kernel says no)" in w for w in without["warnings"])
    with_filter = Isolation(config, devices=DeviceSetup("bpf", Path("/sys/fs/cgroup"))).status()
    assert with_filter["devices"] == "bpf"
    assert not any("device filter" in w for w in with_filter["warnings"])


@pytest.fixture
def nodes() -> Iterator[tuple[dict[int, str], str]]:
    """Three GPUs' nodes as the NVML backend names them (character devices 195:minor, mode 0666 as
    the driver makes them; no driver behind them here: opening one that is let through says
    ENXIO), and the second GPU's device again at another path."""
    if os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    base = host_scratch_dir("fw-dev30-")  # not under the private /tmp, /var/tmp or /dev/shm
    (base / "dev").mkdir(mode=0o755)
    found = {}
    for i, minor in enumerate(MINORS):
        path = base / "dev" / f"nvidia{i}"
        os.mknod(path, 0o20666, os.makedev(NVIDIA_MAJOR, minor))
        os.chmod(path, 0o666)  # noqa: S103 -- as the driver installs them
        found[i] = str(path)
    alias = base / "elsewhere-nvidia1"
    os.mknod(alias, 0o20666, os.makedev(NVIDIA_MAJOR, MINORS[1]))
    os.chmod(alias, 0o666)  # noqa: S103
    try:
        yield found, str(alias)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Opens each path read-write (as CUDA does), then tries to make the device anew: what errno says.
PROBE = r"""
import os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDWR))
        print("opened", p)
    except OSError as e:
        print("refused", p, os.strerror(e.errno))
try:
    os.mknod("/tmp/made", 0o20666, os.makedev(195, 201))
    print("mknod made")
except OSError as e:
    print("mknod refused", os.strerror(e.errno))
print("probed")
"""


def cgroup_setup(kind: str) -> Isolation:
    """The test's isolation with the device filter of ``kind`` (skips where this host lacks it)."""
    if kind == "bpf":
        if _isolation is None or _isolation.devices is None or _isolation.devices.kind != "bpf":
            pytest.skip("no cgroup v2 device filter here")
        return _isolation
    found = _devices_v1() if os.geteuid() == 0 else "not root"
    if not isinstance(found, DeviceSetup):
        pytest.skip(f"no v1 devices controller here ({found})")
    isolation = owner_isolation(allow_root=True)
    isolation.devices = found
    return isolation


@needs_root
@needs_mount_ns
@pytest.mark.parametrize("kind", ["bpf", "v1"])
@pytest.mark.parametrize("who", ["owner", "root"])
def test_another_gpus_device_is_refused_whatever_the_path(open_state: Path, nodes, who: str, kind: str) -> None:
    """fix30: an attempt given GPU 0 of 3 opened GPU 1's device through a node at another path
    (the stand-in covers /dev/nvidia1 only). Its cgroup now refuses GPU 1's and GPU 2's devices
    themselves (EPERM), by any path; its own device is let through (ENXIO: no driver here), and
    the host's processes still reach every one. ``bpf``: the eBPF filter on its cgroup v2; ``v1``:
    a cgroup of the v1 ``devices`` controller (removed with the attempt)."""
    isolation = cgroup_setup(kind)
    gpu_nodes, alias = nodes
    extra = {"owner_uid": 0, "owner_gid": 0, "allow_root": True} if who == "root" else {}
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("needs a system python3 the owner's account can run")
    own, other = gpu_nodes[0], gpu_nodes[1]

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation, gpu_nodes=gpu_nodes)
        command = [python, "-c", PROBE, own, other, alias]
        await rt.start(replace(spec(1, command, owner="iso-alice", **extra), gpu_indices=[0], gpu_uuids=["a"]))
        done = await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 1)
        assert done.exit_code == 0 and "probed" in out, out
        assert f"refused {own} No such device or address" in out, out  # reached: the driver's answer
        assert f"refused {alias} Operation not permitted" in out, out  # the cgroup's answer
        # the node itself stays covered by the stand-in: not the device either way
        assert f"refused {other} {'Permission denied' if who == 'owner' else 'Read-only file system'}" in out, out
        assert "mknod refused Operation not permitted" in out, out  # no CAP_MKNOD, and the filter
        assert "hidden by path only" not in out, out

    run_async(scenario())
    if kind == "v1":  # its devices cgroup went with it
        assert isolation.devices is not None and isolation.devices.root is not None
        name = ProcessRuntime(open_state, isolation=isolation)._cgroup_name(1)
        assert not (isolation.devices.root / name).exists()
    # outside the attempt, the same nodes reach the device (ENXIO), not the filter
    for path in (own, alias):
        with pytest.raises(OSError) as caught:
            os.open(path, os.O_RDWR)
        assert caught.value.errno == 6  # ENXIO


@needs_root
@needs_mount_ns
def test_an_attempt_without_the_filter_says_so(open_state: Path, nodes) -> None:
    """Where the kernel or the cgroups cannot filter devices, the other GPUs' nodes are hidden by
    path only, and the attempt's log says so (as the host's isolation warnings do)."""
    gpu_nodes, _alias = nodes
    isolation = owner_isolation(allow_root=True)
    isolation.devices = DeviceSetup("none", note="no BPF here")

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation, gpu_nodes=gpu_nodes)
        await rt.start(replace(spec(1, ["true"], owner="iso-alice"), gpu_indices=[0], gpu_uuids=["a"]))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 0
        assert "fairway: the host's other GPUs are hidden by path only (no BPF here)" in log_of(rt, 1)

    run_async(scenario())


@needs_filter
def test_a_device_policy_above_that_would_be_overridden_is_left_alone() -> None:
    """A program attached with BPF_F_ALLOW_OVERRIDE above the attempt's cgroup (a runtime's device
    policy) would be replaced by ours, not added to: the agent refuses to attach; with
    BPF_F_ALLOW_MULTI (systemd, runc) both apply."""
    assert _isolation is not None and _isolation.devices is not None and _isolation.devices.root is not None
    root = _isolation.devices.root
    top = root / f"fw-dev30-test-{os.getpid()}"
    child = top / "attempt"
    child.mkdir(parents=True)
    try:
        assert devices.overriding_ancestor(child, root) is None
        prog = devices.load([(NVIDIA_MAJOR, MINORS[2])])
        try:
            devices._attach_fd(top, prog, 1)  # BPF_F_ALLOW_OVERRIDE
        finally:
            os.close(prog)
        assert devices.overriding_ancestor(child, root) == top
        with pytest.raises(OSError, match="would override"):
            devices.attach(child, [(NVIDIA_MAJOR, MINORS[0])], root)
    finally:
        child.rmdir()
        top.rmdir()
