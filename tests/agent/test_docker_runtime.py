"""The docker runtime, for real, against podman's Docker-compatible API (skipped without podman).

A session fixture starts ``podman system service`` on a private socket and storage (runc, the
ulimits of hosts whose hard ``nofile`` limit is below podman's default) and builds a tiny image
FROM scratch with a static busybox: no registry is needed. The NVIDIA device request cannot be
run here (no GPU); its construction is checked without an engine.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_testkit import needs_root, owner_isolation
from agent_testkit import run_async as _run_async

from agent.runtime.base import AttemptSpec, RuntimeUnavailable, StartError
from agent.runtime.isolation import IsolationConfig
from agent.state import AttemptRecord

docker = pytest.importorskip("docker")
from agent.runtime.docker import LABEL_ATTEMPT, DockerRuntime, container_name, container_spec  # noqa: E402

IMAGE = "localhost/fairway-test-busybox:latest"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


T = TypeVar("T")
SCENARIO_TIMEOUT_S = 120.0
"""A scenario's whole limit: real containers through podman, whose own waits (an exit 30 s, a log
line 20 s) are longer than agent_testkit's 20 s default; under a full ``make test`` a container's
start alone took most of that default (the fresh clone of session 41: a TimeoutError between the
exit and its log line)."""


def run_async(coro: Coroutine[Any, Any, T], timeout: float = SCENARIO_TIMEOUT_S) -> T:
    return _run_async(coro, timeout)


def _podman_usable() -> str | None:
    """Why podman cannot be used here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc busybox-static)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not Path("/bin/busybox").exists():
        return "a static /bin/busybox is needed (apt-get install busybox-static)"
    return None


@pytest.fixture(scope="session")
def podman() -> Iterator[str]:
    """``unix://`` URL of a private podman API service holding the test image. Its directory is
    short and its own: podman refuses a run root longer than 50 characters, which pytest-xdist's
    temporary paths (``…/popen-gw0/podman0/run``) are."""
    why = _podman_usable()
    if why is not None:
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="fwpod-"))
    try:
        yield from _podman_service(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _podman_service(base: Path) -> Iterator[str]:
    (base / "containers.conf").write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(base / "containers.conf")}
    storage = ["--root", str(base / "root"), "--runroot", str(base / "run"), "--storage-driver", "vfs"]
    context = base / "image"
    context.mkdir()
    shutil.copy("/bin/busybox", context / "busybox")
    (context / "Containerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    build = subprocess.run(  # noqa: S603
        ["podman", *storage, "build", "-q", "-t", IMAGE, str(context)],  # noqa: S607
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    if build.returncode != 0:
        pytest.skip(f"podman cannot build here: {build.stderr.strip().splitlines()[-1:]}")
    socket_path = base / "podman.sock"
    service = subprocess.Popen(  # noqa: S603
        ["podman", *storage, "system", "service", "--time=0", f"unix://{socket_path}"],  # noqa: S607
        env=env, stdout=subprocess.DEVNULL, stderr=(base / "service.log").open("wb"),
    )  # fmt: skip
    url = f"unix://{socket_path}"
    try:
        for _ in range(100):
            if socket_path.exists():
                try:
                    docker.DockerClient(base_url=url).ping()
                    break
                except Exception:  # noqa: BLE001, S110 -- not up yet
                    pass
            time.sleep(0.1)
        else:
            pytest.skip(f"podman service did not start: {(base / 'service.log').read_text()[-500:]}")
        yield url
    finally:
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
        subprocess.run(  # noqa: S603
            ["podman", *storage, "rm", "-af", "-t", "0"],  # noqa: S607
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )


def spec(attempt_id: int, script: str, gpus: int = 2, grace_s: int = 5, image: str = IMAGE) -> AttemptSpec:
    return AttemptSpec(
        attempt_id=attempt_id,
        workload_id=900 + attempt_id,
        command=["sh", "-c", script],
        gpu_indices=list(range(gpus)),
        gpu_uuids=[f"GPU-d0c{i}" for i in range(gpus)],
        env={"MASTER_ADDR": "h1", "NODE_RANK": "0", "GREETING": "hello from the workload"},
        image=image,
        grace_s=grace_s,
    )


def runtime(state_dir: Path, url: str) -> tuple[DockerRuntime, asyncio.Queue[AttemptRecord]]:
    rt = DockerRuntime(state_dir, base_url=url, nvidia=False, pull=False)
    exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
    rt.on_exit = exits.put_nowait
    return rt, exits


async def wait_log(rt: DockerRuntime, attempt_id: int, text: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        data = rt.read_log(attempt_id, 1 << 20)[0].decode()
        if text in data:
            return data
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} not in the log of attempt {attempt_id}: {data!r}")


def test_the_container_requests_its_gpus_by_uuid_from_nvidia(tmp_path: Path) -> None:
    kwargs = container_spec(spec(7, "true", gpus=3), tmp_path / "7.d", nvidia=True)
    (request,) = kwargs["device_requests"]
    assert request["Driver"] == "nvidia" and request["DeviceIDs"] == ["GPU-d0c0", "GPU-d0c1", "GPU-d0c2"]
    assert request["Capabilities"] == [["gpu"]] and request["Count"] == 0
    assert kwargs["labels"] == {LABEL_ATTEMPT: "7", "fairway.workload": "907"}
    assert kwargs["environment"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-d0c0,GPU-d0c1,GPU-d0c2"
    assert kwargs["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1,2"  # a container sees only its own GPUs
    assert kwargs["environment"]["FAIRWAY_PREEMPT_FILE"] == "/run/fairway/preempt"
    assert kwargs["volumes"] == {str(tmp_path / "7.d"): {"bind": "/run/fairway", "mode": "ro"}}
    assert "device_requests" not in container_spec(spec(7, "true"), tmp_path, nvidia=False)


def test_an_unreachable_engine_fails_at_start_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailable) as info:
        DockerRuntime(tmp_path, base_url=f"unix://{tmp_path}/no.sock")
    assert "no Docker Engine API at unix://" in str(info.value) and "\n" not in str(info.value)


def test_container_runs_with_env_and_labels_and_reports_its_exit_code(state_dir: Path, podman: str) -> None:
    async def scenario() -> None:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        script = 'echo "$GREETING $FAIRWAY_ATTEMPT $FAIRWAY_WORKLOAD_ID $NVIDIA_VISIBLE_DEVICES $MASTER_ADDR"; '
        script += "echo oops >&2; exit 3"
        await rt.start(spec(1, script))
        record = await asyncio.wait_for(exits.get(), 30)
        assert (record.attempt_id, record.state, record.exit_code) == (1, "exited", 3)
        log = await wait_log(rt, 1, "oops")
        assert "hello from the workload 1 901 GPU-d0c0,GPU-d0c1 h1" in log
        # the exited container is removed once its exit is recorded
        assert not rt.client.containers.list(all=True, filters={"label": f"{LABEL_ATTEMPT}=1"})
        with pytest.raises(StartError, match="cannot start container"):
            await rt.start(spec(2, "true", image="localhost/no-such-image:1"))
        assert rt.get(2).state == "failed_to_start"
        await rt.close()

    run_async(scenario())


def test_stop_sends_sigterm_with_the_preemption_notice_then_sigkill(state_dir: Path, podman: str) -> None:
    async def scenario() -> None:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        polite = "trap 'cat $FAIRWAY_PREEMPT_FILE; exit 0' TERM; echo ready; while :; do sleep 0.1; done"
        stubborn = "echo ready; while :; do sleep 0.1; done"  # PID 1 without a handler ignores SIGTERM
        await rt.start(spec(3, polite, grace_s=10))
        await rt.start(spec(4, stubborn, grace_s=1))
        await wait_log(rt, 3, "ready")
        await wait_log(rt, 4, "ready")

        t0 = time.monotonic()
        first = await rt.stop(3, 10, "preempted")
        assert first.exit_code == 0 and time.monotonic() - t0 < 8
        log = await wait_log(rt, 3, "FAIRWAY_PREEMPT_REASON=preempted")
        assert "FAIRWAY_PREEMPT_DEADLINE=" in log

        second = await rt.stop(4, 1, "canceled")
        assert (second.exit_code, second.killed) == (137, True)
        assert {(await exits.get()).attempt_id, (await exits.get()).attempt_id} == {3, 4}
        await rt.close()

    run_async(scenario())


def test_a_restarted_agent_finds_its_containers_by_label(state_dir: Path, podman: str) -> None:
    async def first_agent() -> None:
        rt, _ = runtime(state_dir, podman)
        await rt.recover()
        await rt.start(spec(5, "echo long; sleep 10; exit 4"))  # still running at the recover, on a loaded box
        await rt.start(spec(6, "echo short; exit 6"))
        await wait_log(rt, 5, "long")
        await rt.close()  # the agent goes away; its containers stay

    async def second_agent() -> None:
        await asyncio.sleep(1.5)  # the short one has exited meanwhile
        rt, exits = runtime(state_dir, podman)
        seen: dict[int, AttemptRecord] = {}

        async def exit_of(attempt_id: int) -> AttemptRecord:  # exits in any order (a loaded machine)
            while attempt_id not in seen:
                got = await asyncio.wait_for(exits.get(), 30)
                seen[got.attempt_id] = got
            return seen[attempt_id]

        await rt.recover()
        short = rt.get(6)
        assert short is not None
        if short.state == "running":  # found exited by label: its exit is collected at once
            short = await exit_of(6)
        assert (short.attempt_id, short.exit_code) == (6, 6)
        assert short.exited_mono is not None  # with its real exit time
        assert rt.get(5).state == "running"
        record = await exit_of(5)
        assert (record.attempt_id, record.exit_code) == (5, 4)
        assert "long" in (await wait_log(rt, 5, "long"))  # the log copied again from the start
        assert not rt.client.containers.list(all=True, filters={"name": container_name(5)})
        await rt.close()

    run_async(first_agent())
    run_async(second_agent())


@needs_root
def test_a_container_runs_as_its_owner_and_reads_its_preemption_notice(state_dir: Path, podman: str) -> None:
    from dataclasses import replace

    isolation = owner_isolation(cgroup="off")

    async def scenario() -> None:
        rt = DockerRuntime(state_dir, base_url=podman, nvidia=False, pull=False, isolation=isolation)
        exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.recover()
        script = "trap 'cat $FAIRWAY_PREEMPT_FILE; exit 0' TERM; echo uid=$(id -u) gid=$(id -g); "
        script += "while :; do sleep 0.1; done"
        await rt.start(replace(spec(5, script, grace_s=10), owner="iso-alice"))
        expected = isolation.resolve("iso-alice")
        await wait_log(rt, 5, f"uid={expected.uid} gid={expected.gid}")
        await rt.stop(5, 10, "preempted")
        await wait_log(rt, 5, "FAIRWAY_PREEMPT_REASON=preempted")
        assert (await exits.get()).exit_code == 0
        with pytest.raises(StartError, match="root"):
            await rt.start(replace(spec(6, "true"), owner="ops", owner_uid=0))
        await rt.close()

    run_async(scenario())


def test_the_container_gets_its_cpu_memory_and_shm_limits(state_dir: Path, podman: str) -> None:
    """``start.limits`` reach the engine (DESIGN.md §3.3): NanoCpus, Memory (no swap beyond it) and a
    private /dev/shm of the asked size; without limits none are set, and IPC is private all the same
    (the host's was shared: another attempt's /dev/shm files were visible), half the host's memory."""
    mib = 1 << 20
    bare = container_spec(spec(9, "true"), state_dir, nvidia=False)
    assert "nano_cpus" not in bare and "mem_limit" not in bare
    assert bare["ipc_mode"] == "private"
    assert bare["shm_size"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    capped = container_spec(replace(spec(9, "true"), memory=256 * mib), state_dir, nvidia=False)
    assert capped["shm_size"] == 256 * mib
    assert bare["pids_limit"] == 8192  # isolation.pids_max, as the process runtime's pids.max
    assert container_spec(spec(9, "true"), state_dir, nvidia=False, pids_max=0)["pids_limit"] == -1

    async def scenario() -> None:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        limited = replace(spec(5, "df -k /dev/shm; sleep 30"), cpus=2, memory=256 * mib, shared_memory=64 * mib)
        await rt.start(limited)
        log = await wait_log(rt, 5, "/dev/shm")  # noqa: S108 -- inside the container
        (container,) = rt.client.containers.list(filters={"label": f"{LABEL_ATTEMPT}=5"})
        host = container.attrs["HostConfig"]
        assert host["NanoCpus"] == 2_000_000_000
        assert host["Memory"] == 256 * mib and host["MemorySwap"] == 256 * mib
        assert host["ShmSize"] == 64 * mib
        assert host["PidsLimit"] == 8192
        assert " 65536 " in log  # the container's /dev/shm is 64 MiB (1K blocks)
        await rt.stop(5, 1, "canceled")
        await asyncio.wait_for(exits.get(), 30)
        await rt.close()

    run_async(scenario())


def test_mounts_are_bound_read_only_or_writable_with_their_env(state_dir: Path, tmp_path: Path, podman: str) -> None:
    """Catalog mounts (docs/jobs.md): bound at their container path, ``ro`` refused writes,
    ``FAIRWAY_MOUNT_<NAME>`` the container path."""
    from dataclasses import replace

    from agent.protocol import Mount

    data, scratch = tmp_path / "data", tmp_path / "scratch"
    data.mkdir()
    scratch.mkdir()
    (data / "train.txt").write_text("tokens\n")
    mounts = (
        Mount(name="data-sets", host_path=str(data), container_path="/datasets", read_only=True),
        Mount(name="scratch", host_path=str(scratch), container_path="/scratch", read_only=False),
    )
    kwargs = container_spec(replace(spec(8, "true"), mounts=mounts), tmp_path / "8.d", nvidia=False)
    assert kwargs["volumes"][str(data)] == {"bind": "/datasets", "mode": "ro"}
    assert kwargs["environment"]["FAIRWAY_MOUNT_DATA_SETS"] == "/datasets"

    async def scenario() -> None:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        script = 'cat "$FAIRWAY_MOUNT_DATA_SETS/train.txt"; echo x > /datasets/new || echo ro-refused; '
        script += 'echo out > "$FAIRWAY_MOUNT_SCRATCH/result" && echo rw-ok'
        await rt.start(replace(spec(8, script), mounts=mounts))
        assert (await asyncio.wait_for(exits.get(), 30)).exit_code == 0
        log = await wait_log(rt, 8, "rw-ok")
        assert "tokens" in log and "ro-refused" in log
        assert (scratch / "result").read_text() == "out\n" and not (data / "new").exists()
        await rt.close()

    run_async(scenario())


def test_an_attempt_whose_container_never_started_before_an_agent_restart_failed_to_start(state_dir: Path) -> None:
    """An agent that died during an image pull left a ``running`` record without a start and no
    container: it never ran, so the new agent says it failed to start (an exit would have the
    server date its start at the placement and charge it); one that did start and whose container
    is gone exited."""
    import threading
    from types import SimpleNamespace

    from agent.runtime.base import StoredRuntime
    from agent.state import AttemptStore, current_boot_id

    rt = object.__new__(DockerRuntime)  # no engine here: containers.list is all recover asks of it
    StoredRuntime.__init__(rt, state_dir)
    rt.client = SimpleNamespace(containers=SimpleNamespace(list=lambda **_: []))
    rt._exits, rt._closed = {}, threading.Event()
    store = AttemptStore(state_dir)
    store.save(AttemptRecord(attempt_id=31, workload_id=1, state="running", boot_id=current_boot_id()))
    store.save(
        AttemptRecord(attempt_id=32, workload_id=2, state="running", boot_id=current_boot_id(), started_mono=1.0)
    )

    run_async(rt.recover())

    pulled, ran = rt.get(31), rt.get(32)
    assert pulled is not None and (pulled.state, pulled.reported) == ("failed_to_start", False)
    assert "before the container was started" in pulled.message
    assert ran is not None and ran.state == "exited"


# --- iso34: containers on the host's network shared its abstract unix sockets --------------------------


def test_a_single_host_attempt_gets_a_network_of_its_own_and_a_gang_part_the_hosts(tmp_path: Path) -> None:
    single = container_spec(spec(7, "true"), tmp_path, nvidia=False)  # no NNODES: one host
    assert single["network_mode"] == "bridge"
    one = replace(spec(7, "true"), env={"NNODES": "1", "MASTER_ADDR": "localhost"})
    assert container_spec(one, tmp_path, nvidia=False)["network_mode"] == "bridge"
    gang = replace(spec(7, "true"), env={"NNODES": "2", "MASTER_ADDR": "h1", "NODE_RANK": "1"})
    assert container_spec(gang, tmp_path, nvidia=False)["network_mode"] == "host"  # ranks meet at host addresses
    assert container_spec(spec(7, "true"), tmp_path, nvidia=False, network="host")["network_mode"] == "host"
    assert IsolationConfig().container_network == "private"
    assert IsolationConfig.parse({"container_network": "host"}).container_network == "host"
    with pytest.raises(ValueError, match="container_network must be one of private, host"):
        IsolationConfig.parse({"container_network": "bridge"})


NETNS = 'echo "netns $(readlink /proc/self/ns/net) unix $(grep -c "@{name}" /proc/net/unix)"'


def test_single_host_containers_see_no_abstract_socket_of_the_host_or_each_other(state_dir: Path, podman: str) -> None:
    """iso32 left the docker runtime's containers on the host's network namespace (``network_mode:
    host``), so every container reached every other's abstract unix sockets (``@name``: no file,
    no permission), and the host's; the engine applies no Landlock. A single-host attempt's
    container now has a network namespace of its own (the engine's bridge: its own loopback, ports
    and abstract sockets, outbound traffic as before); a gang's part keeps the host's (its ranks
    meet at the hosts' addresses), as the process runtime's attempts do."""
    import socket

    name = f"fw-iso34-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # an abstract socket of the host's network namespace
    listener.listen(1)
    host_netns = os.readlink("/proc/self/ns/net")

    async def scenario() -> dict[int, str]:
        rt, exits = runtime(state_dir, podman)
        await rt.recover()
        # each lives a while after its line, so the two single-host containers' namespaces exist at
        # once (a namespace's inode is reused once it is gone: two back-to-back ones read alike)
        script = NETNS.format(name=name) + "; sleep 3"
        await rt.start(spec(1, script))
        await rt.start(spec(2, script))
        gang = replace(spec(3, script), env={"NNODES": "2", "MASTER_ADDR": "h1", "NODE_RANK": "0"})
        await rt.start(gang)
        for _ in range(3):
            assert (await asyncio.wait_for(exits.get(), 30)).exit_code == 0
        logs = {i: await wait_log(rt, i, "unix") for i in (1, 2, 3)}
        # the probe's own line (any agent line, "fairway: …", skipped)
        out = {i: next(x for x in text.splitlines() if x.startswith("netns ")).split() for i, text in logs.items()}
        await rt.close()
        return {i: f"{words[1]} {words[3]}" for i, words in out.items()}

    try:
        seen = run_async(scenario())
    finally:
        listener.close()
    assert seen[3] == f"{host_netns} 1", seen  # the gang's part: the host's namespace, its sockets
    for i in (1, 2):
        netns, count = seen[i].split()
        assert netns != host_netns and count == "0", seen  # its own: none of the host's sockets
    assert seen[1] != seen[2], seen  # nor each other's namespace


def test_a_container_gains_no_privileges_through_a_setuid_file_of_its_image(state_dir: Path, podman: str) -> None:
    """brk41: the container of an owner's attempt ran as ``--user uid:gid``, but without
    ``no-new-privileges``: any image a submitter builds can hold a setuid-root file (``chmod u+s``
    on a shell), and running it made the workload uid 0 in its container with the engine's default
    capabilities (``DAC_OVERRIDE``: every file of the shared mounts, whoever owns it), which the
    two root consents (docs/isolation.md) are there to refuse. As the process runtime's wrapper
    does (``no_new_privs``), every container now runs with ``no-new-privileges``: the kernel's
    flag is set in it (``NoNewPrivs: 1``), so setuid and file capabilities raise nothing."""
    from dataclasses import replace

    assert "no-new-privileges" in container_spec(spec(7, "true"), state_dir, nvidia=False)["security_opt"]
    isolation = owner_isolation(cgroup="off")

    async def scenario() -> None:
        rt = DockerRuntime(state_dir, base_url=podman, nvidia=False, pull=False, isolation=isolation)
        exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.recover()
        await rt.start(replace(spec(41, "echo uid=$(id -u); grep NoNewPrivs /proc/self/status"), owner="iso-alice"))
        assert (await asyncio.wait_for(exits.get(), 30)).exit_code == 0
        log = await wait_log(rt, 41, "NoNewPrivs")
        assert f"uid={isolation.resolve('iso-alice').uid}" in log
        assert re.search(r"NoNewPrivs:\s*1", log), log
        await rt.close()

    run_async(scenario())


@needs_root
def test_exec_runs_in_the_container_as_its_owner_with_its_env_timeout_and_cap(state_dir: Path, podman: str) -> None:
    """``exec`` (docs/jobs.md, "Run a command in a running workload"): the engine's exec in the
    attempt's container, as the container's user (the owner), with its environment; killed at
    its timeout (124), each stream cut at ``max_output``."""
    from dataclasses import replace

    from agent.runtime.base import ExecError

    isolation = owner_isolation(cgroup="off")

    async def scenario() -> None:
        rt = DockerRuntime(state_dir, base_url=podman, nvidia=False, pull=False, isolation=isolation)
        rt.on_exit = lambda record: None
        await rt.recover()
        await rt.start(
            replace(spec(7, "echo note > /dev/shm/note; echo ready; sleep 300", grace_s=1), owner="iso-alice")
        )
        await wait_log(rt, 7, "ready")
        expected = isolation.resolve("iso-alice")
        got = await rt.exec(
            7, ["sh", "-c", 'id -u; cat /dev/shm/note; echo "$GREETING"; echo err >&2; exit 4'], 10, 4096
        )
        assert (got.exit_code, got.stdout, got.stderr) == (
            4,
            f"{expected.uid}\nnote\nhello from the workload\n".encode(),
            b"err\n",
        )
        slow = await rt.exec(7, ["sh", "-c", "echo before; sleep 30; echo after"], 1, 4096)
        assert (slow.exit_code, slow.timed_out, slow.stdout) == (124, True, b"before\n")
        big = await rt.exec(7, ["head", "-c", "100000", "/dev/zero"], 10, 1000)
        # at most the cap, said cut (fewer bytes where docker-py lost the stream's framing under
        # load: docker/docker-py#3160, test_brk59_docker_exec)
        assert (len(big.stdout) <= 1000, big.truncated, big.exit_code) == (True, True, 0)
        await rt.stop(7, 1)
        with pytest.raises(ExecError) as ended:
            await rt.exec(7, ["true"], 10, 100)
        assert ended.value.code == "not_running"
        await rt.close()

    run_async(scenario())


def test_a_forwarded_port_is_reached_in_the_containers_own_network(state_dir: Path, podman: str) -> None:
    """``fairway port-forward`` (pf61; docs/jobs.md, "Reach a port in a running workload"): the
    connection is made in the container's network namespace (its own loopback, where nothing of the
    host's listens), as the container's user, and handed to the agent; nothing listening there is
    ``port_refused``; an attempt not running, ``not_running``."""
    from agent.runtime.base import ExecError

    isolation = owner_isolation(cgroup="off")

    async def scenario() -> None:
        rt = DockerRuntime(state_dir, base_url=podman, nvidia=False, pull=False, isolation=isolation)
        rt.on_exit = lambda record: None
        await rt.recover()
        script = "echo ready; echo hello-from-the-container | nc -l -p 8317 127.0.0.1; sleep 300"
        await rt.start(replace(spec(8, script, grace_s=1), owner="iso-alice"))
        await wait_log(rt, 8, "ready")
        loop = asyncio.get_running_loop()
        for _ in range(100):  # nc's listen comes a moment after the echo
            try:
                conn = await rt.connect_port(8, 8317)
                break
            except ExecError as exc:
                assert exc.code == "port_refused", exc
                await asyncio.sleep(0.1)
        conn.setblocking(False)
        assert await asyncio.wait_for(loop.sock_recv(conn, 100), 10) == b"hello-from-the-container\n"
        conn.close()
        with pytest.raises(ExecError) as refused:
            await rt.connect_port(8, 8316)
        assert refused.value.code == "port_refused" and "refused" in str(refused.value).lower()
        await rt.stop(8, 1)
        with pytest.raises(ExecError) as ended:
            await rt.connect_port(8, 8317)
        assert ended.value.code == "not_running"
        await rt.close()

    run_async(scenario())


def test_exec_after_an_agent_restart_runs_with_the_containers_env(state_dir: Path, podman: str) -> None:
    """readopt46: the engine keeps a container's environment (secrets included), and its exec carries
    it: an agent restarted since the start runs the command as the first one would."""

    async def scenario() -> None:
        rt, _ = runtime(state_dir, podman)
        await rt.recover()
        await rt.start(spec(9, "echo up; sleep 30"))
        await wait_log(rt, 9, "up")
        await rt.close()
        again, _ = runtime(state_dir, podman)
        await again.recover()
        got = await again.exec(9, ["sh", "-c", 'echo "$GREETING"'], 10, 4096)
        assert (got.exit_code, got.stdout) == (0, b"hello from the workload\n"), got
        await again.stop(9, 1)
        await again.close()

    run_async(scenario())
