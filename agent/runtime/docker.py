"""The ``docker`` runtime: each attempt is a container, through the Docker Engine API (the ``docker``
SDK, called from threads; podman's Docker-compatible API works too).

- The container gets the attempt's image, command and env, ``NVIDIA_VISIBLE_DEVICES`` (UUIDs),
  ``CUDA_VISIBLE_DEVICES`` (0..n-1: a container sees only its own GPUs), ``FAIRWAY_WORKLOAD_ID``,
  ``FAIRWAY_ATTEMPT`` and ``FAIRWAY_PREEMPT_FILE`` (``/run/fairway/preempt``, from the attempt's
  run directory mounted read-only), a network namespace of its own (the engine's bridge) unless it
  is a gang's part (the host's network: its ranks meet at the hosts' addresses), a private IPC
  namespace, and labels
  ``fairway.attempt``/``fairway.workload``. GPUs are requested by UUID as an NVIDIA device request
  (``--gpus device=UUID,...``) when ``nvidia`` is on (the ``nvml`` backend; fake GPUs have none).
- Output: a thread per container follows its logs into ``<id>.log`` (capped like the process
  runtime's); an agent that re-adopts a container copies its log again from the start.
- Stop: preemption notice, SIGTERM, the grace period, SIGKILL.
- After an agent restart, containers are found again by label; one that ended meanwhile is
  reported with its exit code and exit time, then removed. Containers are removed once their exit
  is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.runtime import devices
from agent.runtime.base import (
    AttemptSpec,
    ExecError,
    ExecOutcome,
    RuntimeUnavailable,
    StoredRuntime,
    handed_connection,
    mount_env,
)
from agent.runtime.isolation import (
    DEFAULT_PIDS_MAX,
    Identity,
    Isolation,
    IsolationConfig,
    mount_problem,
    mount_run_tmpfs,
    out_of_memory_message,
    stage_dirs_as,
    stop_then_kill_tree,
    unmount_run_tmpfs,
    unstage,
)
from agent.state import AttemptRecord, monotonic_s, open_private_append, write_preempt_notice

try:
    import docker
    from docker.errors import APIError, DockerException, ImageNotFound, NotFound
    from docker.types import DeviceRequest, LogConfig
except ImportError:  # pragma: no cover -- the agent's requirements install it
    docker = None

log = logging.getLogger(__name__)

LABEL_ATTEMPT = "fairway.attempt"
LABEL_WORKLOAD = "fairway.workload"
RUN_DIR_IN_CONTAINER = "/run/fairway"


NETNS_CONNECT = Path(__file__).with_name("netns_connect.py")
"""A forwarded connection (``fairway port-forward``) into a container, run as ``python -I
NETNS_CONNECT NS PORT UID GID SHARED`` by the agent with a Unix socket as its stdin: it enters the
container's network namespace (NS: a descriptor of ``/proc/<pid>/ns/net`` of its first process),
takes the container's user (UID -1: the agent's own), connects to 127.0.0.1 (else ::1) there and
hands the connected socket to the agent (SCM_RIGHTS): the container's own network, as it sees it.
SHARED 1: that network is the host's (a gang's part, ``container_network: host``), where another
uid's server may hold the port: one not of the container's user is refused (``PEER_UID_CHECK``)."""


def _container_ids(user: str) -> tuple[int, int]:
    """``Config.User`` of a container (``uid[:gid]``, numbers: the runtime sets them) as (uid, gid);
    (-1, -1) for none (a root container: both consents, docs/isolation.md)."""
    if not user:
        return -1, -1
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        raise ExecError("failed", f"the container's user {user!r} is not uid:gid")
    return int(uid), int(gid or uid)


def container_name(attempt_id: int) -> str:
    """The container name of an attempt (unique: attempt ids are never reused)."""
    return f"fairway-attempt-{attempt_id}"


def container_spec(
    spec: AttemptSpec,
    run_dir: Path,
    *,
    nvidia: bool,
    identity: Identity | None = None,
    pids_max: int = DEFAULT_PIDS_MAX,
    network: str = "private",
    log_max_bytes: int = 64 * 1024 * 1024,
) -> dict[str, Any]:
    """Keyword arguments of ``containers.create`` for ``spec`` (pure: tested without an engine).

    With an ``identity`` that the agent switches to, the container runs as ``--user uid:gid``
    with its extra groups (``--group-add``), whatever the image's ``USER`` says. ``pids_max``: the
    host's ``isolation.pids_max`` (0: no limit). ``network``: the host's
    ``isolation.container_network`` (:func:`network_mode`). ``log_max_bytes``: the agent's cap of an
    attempt's log, which the engine's own log of the container keeps to as well (:func:`engine_log`)."""
    env = dict(spec.env)
    env.update(
        NVIDIA_VISIBLE_DEVICES=",".join(spec.gpu_uuids) if spec.gpu_uuids else "void",
        CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(len(spec.gpu_uuids))),
        FAIRWAY_WORKLOAD_ID=str(spec.workload_id),
        FAIRWAY_ATTEMPT=str(spec.attempt_id),
        FAIRWAY_PREEMPT_FILE=f"{RUN_DIR_IN_CONTAINER}/preempt",
    )
    env.update(mount_env(spec.mounts, in_container=True))
    volumes = {str(run_dir): {"bind": RUN_DIR_IN_CONTAINER, "mode": "ro"}}
    for m in spec.mounts:  # docs/jobs.md: bound at the catalog's container path; the image's workdir stays
        volumes[m.host_path] = {"bind": m.container_path, "mode": "ro" if m.read_only else "rw"}
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "environment": env,
        "name": container_name(spec.attempt_id),
        "labels": {LABEL_ATTEMPT: str(spec.attempt_id), LABEL_WORKLOAD: str(spec.workload_id)},
        "network_mode": network_mode(spec, network),
        "volumes": volumes,
        "detach": True,
        # As the process runtime's wrapper (no_new_privs): a setuid-root file or a file capability
        # in the image raises nothing, so ``--user`` holds (brk41: a setuid shell made an owner's
        # workload root in its container, with the engine's default capabilities).
        "security_opt": ["no-new-privileges"],
        # A cgroup namespace of its own (iso46; docs/isolation.md, "The cgroup tree"): the engines'
        # default only on cgroup v2; on a v1 or hybrid host the host's, where /proc/self/cgroup showed
        # the engine's path and the container's id.
        "cgroupns": "private",
        "log_config": engine_log(log_max_bytes),
    }
    if identity is not None and identity.switch:
        kwargs["user"] = f"{identity.uid}:{identity.gid}"
        if identity.groups:
            kwargs["group_add"] = [str(g) for g in identity.groups]
    if nvidia and spec.gpu_uuids:
        kwargs["device_requests"] = [
            DeviceRequest(driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])
        ]
    kwargs.update(resource_limits(spec, pids_max))
    return kwargs


SHARED_CGROUP_NS = (
    "the engine gave the container the host's cgroup namespace (it ignored cgroupns private, as Podman's Docker"
    " API did before 2025): /proc/self/cgroup shows the engine's cgroup path and the container's id"
)
"""What the agent's log says, once, where the engine ignored ``cgroupns: private`` (docs/isolation.md)."""


def engine_log(log_max_bytes: int) -> Any:
    """The container's ``LogConfig``: the engine's log of its output rotates at the agent's cap
    (iso58; docs/isolation.md). The agent follows that log into its own capped copy; the engine's
    copy is only what the agent has yet to read, but ``json-file`` (Docker's default; Podman's
    ``k8s-file`` alike) kept every byte until the container was removed, so a workload printing
    without end filled the engine's disk. Two files of half the cap each, as Docker rotates them
    (Podman truncates at ``max-size``): at most ``log_max_bytes`` on the engine's disk."""
    return LogConfig(type=LogConfig.types.JSON, config={"max-size": str(max(1, log_max_bytes // 2)), "max-file": "2"})


def is_gang_part(spec: AttemptSpec) -> bool:
    """Whether ``spec`` is one host's part of a gang (the server's ``NNODES`` above 1)."""
    nodes = spec.env.get("NNODES", "")
    return nodes.isdigit() and int(nodes) > 1


def network_mode(spec: AttemptSpec, network: str = "private") -> str:
    """The container's network (docs/isolation.md, "The network"): with ``private`` (the default
    ``isolation.container_network``), a network namespace of its own on the engine's bridge for a
    single-host attempt (its own loopback, ports and abstract unix sockets; outbound traffic
    through the engine's NAT), the host's for a gang's part, whose ranks meet at the hosts'
    addresses (``MASTER_ADDR``, NCCL); with ``host``, the host's for every attempt."""
    return "host" if network == "host" or is_gang_part(spec) else "bridge"


def resource_limits(spec: AttemptSpec, pids_max: int = DEFAULT_PIDS_MAX) -> dict[str, Any]:
    """``containers.create`` arguments enforcing ``start.limits`` (DESIGN.md §3.3, docs/isolation.md):
    ``nano_cpus`` (CPU time of ``cpus`` CPUs), ``mem_limit`` with ``memswap_limit`` equal (no swap
    beyond it), and always a private IPC namespace (another attempt's ``/dev/shm`` is never seen;
    the host's was shared before): its ``/dev/shm`` is ``shm_size``, the shared memory asked, else
    what the process runtime's tmpfs gets without a size (half the host's memory, tmpfs's default),
    at most the memory asked (shared memory is part of it). ``pids_limit``: the host's
    ``isolation.pids_max``, as the process runtime's ``pids.max`` (-1, no limit, for 0: not the
    engine's default, Podman's 2048)."""
    out: dict[str, Any] = {
        "ipc_mode": "private",
        "shm_size": default_shm_size(spec),
        "pids_limit": pids_max or -1,
    }
    if spec.cpus is not None:
        out["nano_cpus"] = spec.cpus * 1_000_000_000
    if spec.memory is not None:
        out["mem_limit"] = spec.memory
        out["memswap_limit"] = spec.memory
    return out


def default_shm_size(spec: AttemptSpec) -> int:
    """The attempt's ``/dev/shm`` bytes: its shared memory, else half the host's memory (as a tmpfs
    mounted without a size), never above its memory request. Docker's own default, 64 MiB, breaks
    data loaders that pass batches through shared memory (PyTorch's)."""
    if spec.shared_memory is not None:
        return spec.shared_memory
    half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    return min(half, spec.memory) if spec.memory is not None else half


def container_out_of_memory(attrs: dict[str, Any]) -> str:
    """The end reason of a container the engine reports killed at its memory limit
    (``State.OOMKilled``), naming the limit (``HostConfig.Memory``); "" otherwise."""
    state = attrs.get("State") or {}
    if not state.get("OOMKilled"):
        return ""
    limit = (attrs.get("HostConfig") or {}).get("Memory")
    return out_of_memory_message(1, limit if isinstance(limit, int) else None)


def _parse_engine_time(text: str) -> float | None:
    """An engine timestamp (RFC 3339, nanoseconds) as unix seconds; None for the zero time."""
    if not text or text.startswith("0001-"):
        return None
    main, _, frac = text.rstrip("Z").partition(".")
    tz = ""
    for sep in ("+", "-"):
        if sep in frac:
            frac, _, rest = frac.partition(sep)
            tz = sep + rest
    try:
        stamp = datetime.fromisoformat(main + (tz or "+00:00")).timestamp()
    except ValueError:
        return None
    return stamp + (float("0." + frac) if frac.isdigit() else 0.0)


class DockerRuntime(StoredRuntime):
    """Runs attempts as containers of the engine at ``base_url`` (None: ``DOCKER_HOST`` or the
    default socket). Records and logs live under ``state_dir`` as for the process runtime.

    Raises:
        RuntimeUnavailable: the SDK is missing or the engine does not answer (one-line reason).
    """

    def __init__(
        self,
        state_dir: Path,
        base_url: str | None = None,
        *,
        nvidia: bool = True,
        log_max_bytes: int = 64 * 1024 * 1024,
        pull: bool = True,
        isolation: Isolation | None = None,
        gpu_nodes: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(state_dir, log_max_bytes)
        self.gpu_nodes = dict(gpu_nodes or {})  # each GPU's device node by index: swept at a container's end
        # None: the image's own user (the library default of tests); the agent passes its own.
        self.isolation = isolation or Isolation(IsolationConfig(mode="agent", allow_root=True, cgroup="off"))
        if docker is None:
            raise RuntimeUnavailable("the docker runtime needs the docker package (pip install docker)")
        try:
            self.client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
            self.client.ping()
        except DockerException as exc:
            where = base_url or "DOCKER_HOST or the default socket"
            raise RuntimeUnavailable(f"no Docker Engine API at {where}: {str(exc).splitlines()[0][:200]}") from None
        self.nvidia = nvidia
        self.pull = pull
        self._exits: dict[int, asyncio.Future[int | None]] = {}
        self._closed = threading.Event()
        self._said_cgroup_ns = False  # the agent's log has said once that the engine ignores cgroupns

    # --- lifecycle ------------------------------------------------------------------------------

    async def recover(self) -> None:
        staged = self.store.state_dir / "mounts"  # an agent that died in the middle of a start
        if staged.is_dir() and not staged.is_symlink():
            for staging in staged.iterdir():
                await asyncio.to_thread(unstage, staging)
        for record in self.store.load_all():
            self._records[record.attempt_id] = record
            if record.state != "running":  # one that an agent that died at its end left mounted
                await asyncio.to_thread(unmount_run_tmpfs, self.store.run_dir(record.attempt_id))
        containers = await asyncio.to_thread(self.client.containers.list, all=True, filters={"label": LABEL_ATTEMPT})
        found: dict[int, Any] = {}
        for container in containers:
            try:
                found[int(container.labels[LABEL_ATTEMPT])] = container
            except (KeyError, ValueError):
                continue
        for attempt_id, container in sorted(found.items()):
            record = self._records.get(attempt_id)
            if record is None:
                # Created by an agent that died before saving its record: adopt it, so the hello
                # reports it and the server decides (attempt ids fence off what it no longer wants).
                record = AttemptRecord(
                    attempt_id=attempt_id,
                    workload_id=int(container.labels.get(LABEL_WORKLOAD, "0") or 0) or attempt_id,
                    state="running",
                    boot_id=self.boot_id,
                    started_mono=monotonic_s(),
                )
                self._records[attempt_id] = record
                self.store.save(record)
            if record.state != "running":
                await asyncio.to_thread(self._remove, container)  # exit already recorded
                continue
            log.info("re-adopted attempt %d (container %s, %s)", attempt_id, container.short_id, container.status)
            self.store.log_path(attempt_id).unlink(missing_ok=True)  # copied again from the start
            self._watch(record, container)
        for record in list(self._records.values()):
            if record.state == "running" and record.attempt_id not in found and record.started_mono is None:
                # Saved before its container existed (an image pull) by an agent that died then:
                # it never ran, so it failed to start (an exit would have the server charge it).
                record.state = "failed_to_start"
                record.message = "the agent restarted before the container was started"
                record.finished_wall = time.time()
                self.store.save(record)
                log.info("attempt %d: never started (the agent restarted during its start)", record.attempt_id)
            elif record.state == "running" and record.attempt_id not in found:
                unmount_run_tmpfs(self.store.run_dir(record.attempt_id))
                self._finish(record, None, None)
                log.info("attempt %d: its container is gone (exit code unknown)", record.attempt_id)
        self.prune()

    async def start(self, spec: AttemptSpec) -> AttemptRecord:
        existing = self._records.get(spec.attempt_id)
        if existing is not None:
            return existing
        record = self._new_record(spec)
        if not spec.image:
            self._fail(record, "the docker runtime needs an image")
        ident = await self._identity(record, spec)
        staging = self.store.state_dir / "mounts" / str(spec.attempt_id)
        if ident.switch:  # the engine binds as root: only where the owner reaches on the host (iso58)
            who = f"user {ident.user} (uid {ident.uid})"
            for m in spec.mounts:
                if (problem := mount_problem(str(m.host_path), ident.uid, {ident.gid, *ident.groups})) is not None:
                    self._fail(record, f"{who} cannot reach mount {m.name}: {problem}")
            # ... and what it binds is the directory the owner reached now, not the path looked up
            # again by the engine as root (iso61: a component swapped for a symlink in between)
            await asyncio.to_thread(unstage, staging)
            try:
                staged = await asyncio.to_thread(stage_dirs_as, ident, [str(m.host_path) for m in spec.mounts], staging)
            except OSError as exc:
                name = next((m.name for m in spec.mounts if str(m.host_path) == exc.filename), "")
                where = f"{exc.filename}: " if exc.filename else ""
                self._fail(record, f"{who} cannot reach mount {name or 'paths'}: {where}{exc.strerror}")
            bound = tuple(replace(m, host_path=path) for m, path in zip(spec.mounts, staged, strict=True))
            spec = replace(spec, mounts=bound)
        try:
            return await self._start(record, spec, ident)
        finally:  # the engine has bound them (or the start failed): its binds hold on without these
            await asyncio.to_thread(unstage, staging)

    async def _start(self, record: AttemptRecord, spec: AttemptSpec, ident: Identity) -> AttemptRecord:
        self.store.ensure_private()
        run_dir = self.store.run_dir(spec.attempt_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        if ident.switch:
            os.chown(run_dir, os.geteuid(), ident.gid)
            os.chmod(run_dir, 0o750)  # noqa: S103 -- the attempt's group reads its notice
        if self.isolation.is_root:  # its mountinfo names no path of the agent's (iso48)
            try:
                unmount_run_tmpfs(run_dir)  # one left by an agent that died: not stacked
                st = run_dir.stat()
                mount_run_tmpfs(run_dir, st.st_uid, st.st_gid, st.st_mode & 0o777)
            except OSError as exc:  # the directory itself, as before
                log.warning("attempt %d: no tmpfs on its run directory: %s", spec.attempt_id, exc)
        kwargs = container_spec(
            spec,
            run_dir,
            nvidia=self.nvidia,
            identity=ident,
            pids_max=self.isolation.config.pids_max,
            network=self.isolation.config.container_network,
            log_max_bytes=self.log_max_bytes,
        )
        if ident.switch:
            record.uid = ident.uid  # whose processes its GPUs' sweep looks at when it ends (iso48)
        self._records[spec.attempt_id] = record
        self.store.save(record)  # before the container exists: a restarted agent finds one or the other
        try:
            container = await asyncio.to_thread(self._create_and_start, kwargs)
        except (DockerException, OSError) as exc:
            await asyncio.to_thread(self._remove_by_name, container_name(spec.attempt_id))
            unmount_run_tmpfs(run_dir)
            del self._records[spec.attempt_id]
            self._fail(record, f"cannot start container: {str(exc).splitlines()[0][:500]}")
        record.started_mono = monotonic_s()
        self.store.save(record)
        await asyncio.to_thread(self._say_shared_cgroup_ns, record, container)
        self._watch(record, container)
        log.info("attempt %d (workload #%d) started: container %s, image %s, GPUs %s", spec.attempt_id,
                 spec.workload_id, container.short_id, spec.image, spec.gpu_uuids or "-")  # fmt: skip
        return record

    def _say_shared_cgroup_ns(self, record: AttemptRecord, container: Any) -> None:
        """Say in the agent's log, once per agent start, when the engine left a container in the
        host's cgroup namespace although ``cgroupns: private`` was asked (iso46: Podman 4's Docker
        API ignores it, and its own default on a v1 or hybrid host is the host's): its
        ``/proc/self/cgroup`` then shows the engine's cgroup path and the container's id. It is the
        engine's, the same for every container, so it is the agent's to say, not each workload's:
        the attempt's log holds the workload's output only (thr47: every ``fairway logs`` began
        with it). Nothing is said of a container gone already, or one whose pid the agent cannot
        read; once said, nothing is looked at again."""
        if self._said_cgroup_ns:
            return
        try:
            container.reload()
            pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
            shared = pid > 0 and os.stat(f"/proc/{pid}/ns/cgroup").st_ino == os.stat("/proc/self/ns/cgroup").st_ino
        except (DockerException, OSError, ValueError, TypeError):
            return
        if shared:
            self._said_cgroup_ns = True
            log.warning("fairway: %s (first seen with attempt %d; said once)", SHARED_CGROUP_NS, record.attempt_id)

    def _create_and_start(self, kwargs: dict[str, Any]) -> Any:
        try:
            self.client.images.get(kwargs["image"])
        except ImageNotFound:
            if not self.pull:
                raise
            log.info("pulling %s", kwargs["image"])
            self.client.images.pull(kwargs["image"])
        container = self.client.containers.create(**kwargs)
        container.start()
        return container

    async def connect_port(self, attempt_id: int, port: int) -> socket.socket:
        """A TCP connection to ``port`` on 127.0.0.1 in the attempt's container's network namespace,
        made there as the container's user (:data:`NETNS_CONNECT`) and handed to the agent."""
        record = self._records.get(attempt_id)
        if record is None or record.state != "running":
            raise ExecError("not_running", f"attempt {attempt_id} is not running on this host")
        try:
            container = await asyncio.to_thread(self.client.containers.get, container_name(attempt_id))
        except NotFound:
            raise ExecError("not_running", f"attempt {attempt_id} has no container on this host") from None
        except (DockerException, OSError) as exc:
            raise ExecError("failed", f"the engine could not say: {str(exc).splitlines()[0][:500]}") from None
        pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
        if pid <= 0:
            raise ExecError("not_running", f"attempt {attempt_id}'s container is not running")
        uid, gid = _container_ids((container.attrs.get("Config") or {}).get("User") or "")
        try:
            ns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise ExecError("failed", f"cannot reach the container's network namespace: {exc}") from None
        try:  # brk62: the namespace held is the container's only if it still runs with that pid
            now = await asyncio.to_thread(self.client.containers.get, container_name(attempt_id))
            state = now.attrs.get("State") or {}
            same = bool(state.get("Running")) and int(state.get("Pid") or 0) == pid
        except (DockerException, OSError, ValueError, TypeError):
            same = False
        shared = 0
        if not same:
            os.close(ns)
            raise ExecError("not_running", f"attempt {attempt_id}'s container is not running")
        with contextlib.suppress(OSError):  # the agent's network: the host's, shared by other owners' work
            shared = int(os.fstat(ns).st_ino == os.stat("/proc/self/ns/net").st_ino)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-I", str(NETNS_CONNECT), str(ns), str(port), str(uid), str(gid), str(shared),
                    stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    env={"PATH": "/usr/bin:/bin"}, pass_fds=(ns,),
                )  # fmt: skip
            except OSError as exc:
                raise ExecError("failed", f"cannot start the connection's helper: {exc}") from None
            finally:
                os.close(ns)
                theirs.close()
            _, said_bytes = await proc.communicate()
            said = said_bytes.decode(errors="replace").strip().splitlines()
            last = said[-1] if said else ""
            if last.startswith("refused "):
                raise ExecError("port_refused", last.removeprefix("refused "))
            if last.startswith("fail "):
                raise ExecError("failed", last.removeprefix("fail "))
            return handed_connection(mine, port, proc.returncode, last)
        finally:
            mine.close()

    async def exec(self, attempt_id: int, command: list[str], timeout_s: float, max_output: int) -> ExecOutcome:
        """Run ``command`` in the attempt's container (the engine's exec: the container's
        namespaces, cgroup and environment) as the container's own user (``--user``: the owner),
        no TTY, no stdin; at the timeout its process (the engine's ``Pid``, on this host) and what
        it started are killed."""
        record = self._records.get(attempt_id)
        if record is None or record.state != "running":
            raise ExecError("not_running", f"attempt {attempt_id} is not running on this host")
        try:
            container = await asyncio.to_thread(self.client.containers.get, container_name(attempt_id))
            user = (container.attrs.get("Config") or {}).get("User") or ""
            exec_id = (
                await asyncio.to_thread(
                    self.client.api.exec_create,
                    container.id,
                    command,
                    stdout=True,
                    stderr=True,
                    stdin=False,
                    tty=False,
                    user=user,
                    privileged=False,
                )  # fmt: skip
            )["Id"]
            stream = await asyncio.to_thread(self.client.api.exec_start, exec_id, stream=True, demux=True)
        except NotFound:
            raise ExecError("not_running", f"attempt {attempt_id} has no container on this host") from None
        except (DockerException, OSError) as exc:
            raise ExecError("failed", f"the engine could not run it: {str(exc).splitlines()[0][:500]}") from None
        kept: dict[int, list[bytes]] = {0: [], 1: []}
        sizes = [0, 0]
        cut = [False]

        desync = [False]

        def read() -> None:
            try:
                for pair in stream:
                    for i, chunk in enumerate(pair or (None, None)):
                        if not chunk:
                            continue
                        room = max_output - sizes[i]
                        if len(chunk) > room:
                            cut[0], chunk = True, chunk[: max(room, 0)]
                        if chunk:
                            kept[i].append(chunk)
                            sizes[i] += len(chunk)
            except ValueError as exc:  # "N is not a valid stream": docker-py read payload as a frame header
                # (docker/docker-py#3160, seen under load with podman's socket): the rest of the
                # output is lost, the command ran; said as cut, its exit code still read below
                log.warning("exec in attempt %s: the engine's output stream lost its framing (%s)", attempt_id, exc)
                cut[0] = desync[0] = True

        # A thread of its own, not the loop's default executor that every to_thread of the agent
        # shares: a process the command started that holds its output keeps the engine's stream
        # open past the answer, to that process's end (brk59: a dozen such left the agent none).
        loop = asyncio.get_running_loop()
        reading: asyncio.Future[None] = loop.create_future()
        reading.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved

        def settle(error: BaseException | None) -> None:
            if not reading.done():
                if error is None:
                    reading.set_result(None)
                else:
                    reading.set_exception(error)

        def read_to_end() -> None:
            error: BaseException | None = None
            try:
                read()
            except Exception as exc:  # noqa: BLE001 -- handed to the waiting coroutine
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the agent's end)
                loop.call_soon_threadsafe(settle, error)

        threading.Thread(target=read_to_end, name=f"exec-{attempt_id}", daemon=True).start()
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(reading), timeout_s)
        except TimeoutError:
            timed_out = True
            running = await asyncio.to_thread(self.client.api.exec_inspect, exec_id)
            pid = running.get("Pid") or 0
            # an exec that ended (a process it started holds its output open) is not killed by its
            # pid, which the host may have given another process since (brk59)
            if pid > 0 and running.get("Running"):
                await asyncio.to_thread(stop_then_kill_tree, pid)
            with contextlib.suppress(TimeoutError, DockerException, OSError):
                await asyncio.wait_for(asyncio.shield(reading), 5.0)
        except (DockerException, OSError) as exc:
            raise ExecError("failed", f"the engine's stream failed: {str(exc).splitlines()[0][:500]}") from None
        info = await asyncio.to_thread(self.client.api.exec_inspect, exec_id)
        deadline = time.monotonic() + timeout_s
        while desync[0] and not timed_out and info.get("Running") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # its output no longer read here: its end read from the engine
            info = await asyncio.to_thread(self.client.api.exec_inspect, exec_id)
        code = 124 if timed_out else int(info.get("ExitCode") if info.get("ExitCode") is not None else 1)
        out, err = b"".join(kept[0]), b"".join(kept[1])
        return ExecOutcome(code, out, err, cut[0], timed_out)

    def _remove_by_name(self, name: str) -> None:
        with contextlib.suppress(DockerException, OSError):
            self._remove(self.client.containers.get(name))

    @staticmethod
    def _remove(container: Any) -> None:
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except (DockerException, OSError) as exc:
            log.warning("cannot remove container %s: %s", container.short_id, exc)

    def _watch(self, record: AttemptRecord, container: Any) -> None:
        """Follow the container's logs into the attempt's log in a thread, then collect its exit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int | None] = loop.create_future()
        self._exits[record.attempt_id] = future
        path = self.store.log_path(record.attempt_id)

        def follow() -> None:
            code: int | None = None
            finished: float | None = None
            oom = ""
            try:
                with open_private_append(path) as out:
                    for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                        out.write(chunk)
                        out.flush()
                code = int(container.wait().get("StatusCode"))
                container.reload()
                finished = _parse_engine_time(container.attrs.get("State", {}).get("FinishedAt", ""))
                oom = container_out_of_memory(container.attrs)
            except (DockerException, OSError, ValueError, TypeError) as exc:
                if self._closed.is_set():
                    return
                log.warning("attempt %d: lost track of container %s: %s", record.attempt_id, container.short_id, exc)
            if self._closed.is_set():
                return
            self._reclaim_gpus(record)  # before its end is reported: its GPUs go on
            self._remove(container)
            unmount_run_tmpfs(self.store.run_dir(record.attempt_id))
            loop.call_soon_threadsafe(self._exited, record, code, finished, oom)

        threading.Thread(target=follow, name=f"attempt-{record.attempt_id}", daemon=True).start()

    def _reclaim_gpus(self, record: AttemptRecord) -> None:
        """Kill every process of the ended container's user that still holds one of its GPUs'
        devices outside a running container given that GPU (iso48; the process runtime's since
        pid63, docs/isolation.md): a descriptor the container passed out over a Unix socket in a
        shared mount (to another container of its owner, or the owner's login) outlived it, and with
        it the GPU, which goes to the next workload; the engine's device cgroup checks opens only.
        The container's own processes are gone with its PID namespace. Root's holders (NVML, the
        engine's hooks, ``nvidia-persistenced``) and the agent's own uid are never swept."""
        uid = record.uid
        indices = [i for i in record.gpu_indices if i in self.gpu_nodes]
        if uid is None or uid == 0 or uid == os.geteuid() or not indices or not self.isolation.is_root:
            return
        theirs = set(devices.char_devices(self.gpu_nodes[i] for i in indices))

        def given() -> set[int]:  # the processes of running containers given one of those GPUs (shared)
            namespaces = set()
            for other in list(self._records.values()):
                if other.attempt_id == record.attempt_id or other.state != "running":
                    continue
                if theirs & set(
                    devices.char_devices(self.gpu_nodes[i] for i in other.gpu_indices if i in self.gpu_nodes)
                ):
                    with contextlib.suppress(DockerException, OSError, ValueError, TypeError):
                        state = self.client.containers.get(container_name(other.attempt_id)).attrs.get("State") or {}
                        if int(state.get("Pid") or 0) > 0:  # its processes, exec'd ones too: its PID namespace
                            namespaces.add(os.stat(f"/proc/{int(state['Pid'])}/ns/pid").st_ino)
            pids = set()
            for entry in os.listdir("/proc") if namespaces else ():
                with contextlib.suppress(OSError):
                    if entry.isdigit() and os.stat(f"/proc/{entry}/ns/pid").st_ino in namespaces:
                        pids.add(int(entry))
            return pids

        devices.kill_device_holders(record.attempt_id, theirs, uid, given)

    def _exited(self, record: AttemptRecord, code: int | None, finished_wall: float | None, oom: str = "") -> None:
        future = self._exits.pop(record.attempt_id, None)
        if record.state == "running":
            if oom:
                record.message = oom  # the end reason the server records (Kubernetes' OOMKilled)
            self._finish(record, code, finished_wall)
            if self.on_exit is not None:
                self.on_exit(record)
        if future is not None and not future.done():
            future.set_result(code)

    def _finish(self, record: AttemptRecord, code: int | None, finished_wall: float | None) -> None:
        now_wall, now_mono = time.time(), monotonic_s()
        if code is None and record.killed:
            code = 128 + 9
        record.state = "exited"
        record.exit_code = code
        if record.boot_id == self.boot_id and finished_wall is not None:
            record.exited_mono = max(0.0, now_mono - max(0.0, now_wall - finished_wall))
        else:
            record.exited_mono = now_mono if record.boot_id == self.boot_id and code is not None else None
        record.finished_wall = now_wall
        self._cap_log(record.attempt_id)  # output followed since the last periodic pass
        self.store.save(record)
        log.info("attempt %d exited with code %s", record.attempt_id, code)

    async def stop(self, attempt_id: int, grace_s: float, reason: str = "") -> AttemptRecord | None:
        record = self._records.get(attempt_id)
        if record is None or record.state != "running":
            return record
        future = self._exits.get(attempt_id)
        try:
            write_preempt_notice(self.store.preempt_path(attempt_id), time.time() + grace_s, reason or "stopped")
        except OSError as exc:
            log.warning("attempt %d: cannot write the preemption notice: %s", attempt_id, exc)
        await asyncio.to_thread(self._kill, attempt_id, "SIGTERM")
        log.info("attempt %d: SIGTERM sent, grace %.0f s", attempt_id, grace_s)
        if future is None:
            return record
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout=grace_s)
        except TimeoutError:
            if record.state == "running":
                record.killed = True
                self.store.save(record)
                await asyncio.to_thread(self._kill, attempt_id, "SIGKILL")
                log.info("attempt %d: grace over, SIGKILL sent", attempt_id)
            await future
        return record

    def _kill(self, attempt_id: int, sig: str) -> None:
        try:
            self.client.containers.get(container_name(attempt_id)).kill(signal=sig)
        except NotFound:
            pass
        except APIError as exc:  # not running any more (409): the watcher reports the exit
            log.debug("attempt %d: %s not delivered: %s", attempt_id, sig, exc)

    async def close(self) -> None:
        """Stop following containers, leaving them running (the next agent re-adopts them)."""
        self._closed.set()
        for future in self._exits.values():
            future.cancel()
        self._exits.clear()
        await asyncio.to_thread(self.client.close)
