"""iso48, the docker runtime against podman (skipped without it or without root; docs/isolation.md):
a GPU's device passed out of a container does not outlive its attempt (pid63 closed it for the
process runtime only); what a single-host container sees of the host's Unix sockets."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("docker")

from agent_testkit import host_scratch_dir, needs_root, owner_isolation  # noqa: E402
from device_holders import holders as _holders  # noqa: E402
from test_docker_runtime import podman, run_async, spec  # noqa: E402, F401 -- the podman fixture

import agent.runtime.docker as docker_runtime  # noqa: E402
from agent.runtime.docker import DockerRuntime  # noqa: E402

pytestmark = [pytest.mark.timeout(90), needs_root]

# In the container (the host's Python, its /usr bound read-only): GPU 0's node, opened, handed over a
# pathname socket in a shared directory (Landlock scopes abstract ones only) to a process of the
# same owner outside it; the device cgroup checks opens, not descriptors.
SEND = """
import os, socket, sys, time
fd = os.open("/dev/nvidia0", os.O_RDONLY)
for _ in range(250):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect("/shared/pass.sock")
        break
    except OSError:
        time.sleep(0.02)
socket.send_fds(s, [b"gpu"], [fd])
print("sent", flush=True)
"""
RECEIVE = """
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
s.listen()
print("listening", flush=True)
conn, _ = s.accept()
msg, fds, _flags, _addr = socket.recv_fds(conn, 16, 1)
print("got", msg.decode(), len(fds), flush=True)
time.sleep(60)
"""


@pytest.fixture
def gpu_dir() -> Iterator[Path]:
    """Two GPUs' nodes under ``dev/`` (/dev/full's and /dev/zero's numbers: they open without a
    driver; mode 0666 as the driver's) and ``shared/`` (1777, a shared scratch directory)."""
    base = host_scratch_dir("fw-iso48d-")
    (base / "dev").mkdir(mode=0o755)
    for i, (major, minor) in enumerate(((1, 7), (1, 5))):
        os.mknod(base / "dev" / f"nvidia{i}", 0o20666, os.makedev(major, minor))
        os.chmod(base / "dev" / f"nvidia{i}", 0o666)  # noqa: S103 -- as the driver installs them
    (base / "shared").mkdir()
    os.chmod(base / "shared", 0o1777)  # noqa: S103 -- as /scratch
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_gpu_device_passed_out_of_a_container_does_not_outlive_its_attempt(
    podman: str,  # noqa: F811
    gpu_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/isolation.md (pid63): "the docker runtime does not: a container's device passed out
    to another container of its owner over a shared mount stays open". A container given GPU 0
    (its node, as the NVIDIA toolkit injects it) passes its descriptor to a process of its owner
    outside it; once the container has ended, its GPU goes to another workload, and that process
    still held it. Now the agent kills it before the attempt's end is reported, as for the process
    runtime; root's holders (NVML in the agent, a host daemon) are kept."""
    nodes = {i: str(gpu_dir / "dev" / f"nvidia{i}") for i in (0, 1)}
    rdev = os.stat(nodes[0]).st_rdev
    sock = gpu_dir / "shared" / "pass.sock"
    isolation = owner_isolation()
    alice = isolation.resolve("iso-alice", None, None, (), cluster_allows_root=False)
    made = docker_runtime.container_spec

    def with_its_gpu_node(*args: Any, **kwargs: Any) -> dict[str, Any]:
        spec_kwargs = made(*args, **kwargs)
        spec_kwargs["devices"] = [f"{nodes[0]}:/dev/nvidia0:rw"]  # what the NVIDIA toolkit gives it
        spec_kwargs["volumes"].update({
            "/usr": {"bind": "/usr", "mode": "ro"}, "/usr/lib": {"bind": "/lib", "mode": "ro"},
            "/usr/lib64": {"bind": "/lib64", "mode": "ro"}, str(gpu_dir / "shared"): {"bind": "/shared", "mode": "rw"},
        })  # fmt: skip
        return spec_kwargs

    monkeypatch.setattr(docker_runtime, "container_spec", with_its_gpu_node)
    receiver = subprocess.Popen(  # noqa: S603 -- the owner's login on the host
        ["/usr/bin/python3", "-I", "-c", RECEIVE, str(sock)],
        user=alice.uid, group=alice.gid, extra_groups=[], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    held = os.open(nodes[0], os.O_RDONLY)  # root's (as NVML's in the agent, a host daemon's): kept
    try:
        assert receiver.stdout is not None and receiver.stdout.readline() == "listening\n"

        async def scenario() -> None:
            rt = DockerRuntime(gpu_dir / "state", base_url=podman, nvidia=False, pull=False, isolation=isolation,
                               gpu_nodes=nodes)  # fmt: skip
            exits: asyncio.Queue[object] = asyncio.Queue()
            rt.on_exit = exits.put_nowait
            await rt.recover()
            one = replace(spec(1, "", gpus=1), command=["/usr/bin/python3", "-I", "-c", SEND], owner="iso-alice")
            await rt.start(one)
            await asyncio.wait_for(exits.get(), 30)
            log = rt.read_log(1, 1 << 16)[0].decode()
            assert "sent" in log, log
            assert _holders(rdev, alice.uid) == [], "a process of the owner still holds the ended attempt's GPU"
            await rt.close()

        run_async(scenario(), timeout=60)
        assert receiver.wait(10) == -9 and "got gpu 1" in receiver.stdout.read()
        assert os.fstat(held).st_rdev == rdev
    finally:
        os.close(held)
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    assert "held its GPU's device 1:7 past its end" in caplog.text, caplog.text


def test_a_single_host_container_lists_no_unix_socket_of_the_host(podman: str, gpu_dir: Path) -> None:  # noqa: F811
    """iso48: ``/proc/net/unix`` is its network namespace's table of Unix sockets. A process-runtime
    attempt (the host's namespace, on purpose) lists every socket name of the host
    (``test_an_attempt_lists_another_attempts_socket_name_but_reaches_neither_it_nor_its_cgroup``);
    a single-host container has a network namespace of its own (iso34): none of the host's names,
    abstract or pathname, the agent's and other workloads' included, is in its table."""
    abstract = f"iso48-host-{os.getpid()}"
    path = gpu_dir / "shared" / "iso48-host.sock"
    listening = []
    for address in ("\0" + abstract, str(path)):
        s = socket.socket(socket.AF_UNIX)
        s.bind(address)
        s.listen()
        listening.append(s)
    assert abstract in Path("/proc/net/unix").read_text() and str(path) in Path("/proc/net/unix").read_text()
    isolation = owner_isolation()

    async def scenario() -> None:
        rt = DockerRuntime(gpu_dir / "state", base_url=podman, nvidia=False, pull=False, isolation=isolation)
        exits: asyncio.Queue[object] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.recover()
        await rt.start(replace(spec(1, "cat /proc/net/unix; echo listed", gpus=1), owner="iso-alice"))
        await asyncio.wait_for(exits.get(), 30)
        out = rt.read_log(1, 1 << 20)[0].decode()
        assert "Num" in out and "listed" in out, out  # its own table, read
        assert abstract not in out and str(path) not in out, out
        await rt.close()

    try:
        run_async(scenario(), timeout=60)
    finally:
        for s in listening:
            s.close()


def test_a_containers_mount_table_does_not_name_the_agents_state_directory(podman: str, gpu_dir: Path) -> None:  # noqa: F811
    """iso48: ``/run/fairway`` (the preemption notice) was the engine's bind of the attempt's
    ``<state>/attempts/<id>.d``, and the container's ``mountinfo`` printed that path (a bind's root
    is its path within its file system): the agent's state directory. It is now a small tmpfs of the
    attempt's own, mounted there by the agent for the container's life: the table names ``/`` of
    ``fairway-run``; the notice still reaches the container; nothing stays mounted after its end."""
    state = gpu_dir / "state"
    isolation = owner_isolation()

    async def scenario() -> None:
        rt = DockerRuntime(state, base_url=podman, nvidia=False, pull=False, isolation=isolation)
        exits: asyncio.Queue[object] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.recover()
        script = "cat /proc/self/mountinfo; echo listed; while [ ! -e /run/fairway/preempt ]; do sleep 0.05; done; "
        script += "echo notice: $(cat /run/fairway/preempt)"
        await rt.start(replace(spec(1, script, gpus=1, grace_s=10), owner="iso-alice"))
        for _ in range(400):
            if b"listed" in rt.read_log(1, 1 << 20)[0]:
                break
            await asyncio.sleep(0.05)
        assert os.path.ismount(rt.store.run_dir(1))  # noqa: ASYNC240
        await rt.stop(1, 10, "preempted")
        await asyncio.wait_for(exits.get(), 30)
        out = rt.read_log(1, 1 << 20)[0].decode()
        assert "listed" in out and "notice: " in out and "preempted" in out, out
        assert str(state) not in out and str(gpu_dir) not in out, out
        (line,) = [line for line in out.splitlines() if " /run/fairway " in line]
        assert line.split()[3] == "/" and " - tmpfs fairway-run " in line, line
        assert not os.path.ismount(rt.store.run_dir(1))  # noqa: ASYNC240
        await rt.close()

    run_async(scenario(), timeout=60)
