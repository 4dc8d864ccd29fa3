"""Helpers of the agent tests: no Django, real processes, a real websocket server.

Test modules here are named ``test_agent_*`` and the directory has no ``__init__.py``: a package
named ``agent`` would shadow the real one. ``conftest.py`` puts this directory on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from agent.client import Agent
from agent.config import AgentConfig
from agent.gpu.fake import FakeGpuBackend, fake_gpu_uuid
from agent.protocol import (
    AGENT_MESSAGE_TYPES,
    Ack,
    AttemptEvent,
    Hello,
    Message,
    ProtocolError,
    Start,
    Welcome,
    decode,
    encode,
)
from agent.runtime.base import AttemptSpec
from agent.runtime.isolation import CgroupSetup, Isolation, IsolationConfig, detect_cgroups
from agent.runtime.process import ProcessRuntime
from agent.state import AttemptRecord, AttemptStore

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "h1"
T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
    """Run one async scenario to completion under a hard timeout (seconds)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def standin(duration: float, *extra: str) -> list[str]:
    """Command line of the stand-in trainer."""
    return [sys.executable, "-m", "agent.standin", "--duration", str(duration), *extra]


def start_msg(attempt_id: int, command: list[str], gpus: list[int], grace_s: int = 5) -> Start:
    """A ``start`` for GPUs of the fake host ``h1``."""
    return Start(
        attempt_id=attempt_id,
        workload_id=attempt_id + 1000,
        image="",
        command=command,
        env={"MY_VAR": "x"},
        gpu_uuids=[fake_gpu_uuid(HOST, i) for i in gpus],
        gpu_indices=gpus,
        grace_s=grace_s,
    )


class FakeServer:
    """A minimal Fairway server: records what the agent sends, welcomes its hello, acks its
    ``attempt`` messages, and lets a test push messages or refuse connections."""

    def __init__(self, heartbeat_s: float = 0.2) -> None:
        self.heartbeat_s = heartbeat_s
        self.received: asyncio.Queue[Message | ProtocolError] = asyncio.Queue()
        self.headers: list[Headers] = []
        self.refuse = False
        self.lose_started = False  # the next ``started`` report is lost with its connection (closed, no ack)
        self.ws: ServerConnection | None = None
        self.connected = asyncio.Event()
        self._seq = 0
        self._server: Server | None = None
        self.url = ""

    async def __aenter__(self) -> FakeServer:
        self._server = await serve(self._handler, "127.0.0.1", 0, process_request=self._process_request)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/ws/agent/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        if self.refuse:
            return conn.respond(503, "not now\n")
        self.headers.append(request.headers)
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.connected.set()
        async for frame in ws:
            try:
                msg = decode(frame, allowed=AGENT_MESSAGE_TYPES)
            except ProtocolError as exc:
                await self.received.put(exc)
                continue
            if isinstance(msg, AttemptEvent) and msg.state == "started" and self.lose_started:
                self.lose_started = False
                self.connected.clear()
                await ws.close()
                return
            await self.received.put(msg)
            if isinstance(msg, Hello):
                await self.send(Welcome(host=msg.host, heartbeat_s=self.heartbeat_s))
            elif isinstance(msg, AttemptEvent):
                await self.send(Ack(ack=msg.id))

    async def send(self, msg: Message) -> None:
        """Send ``msg`` with the next sequence number on the current connection."""
        self._seq += 1
        await self.send_raw(encode(replace(msg, id=self._seq)))

    async def send_raw(self, text: str) -> None:
        assert self.ws is not None
        await self.ws.send(text)

    async def drop(self) -> None:
        """Close the current connection (the agent should reconnect)."""
        assert self.ws is not None
        self.connected.clear()
        await self.ws.close()

    async def expect(self, match: Callable[[Message], bool], within: float = 10.0) -> Message:
        """The next received message for which ``match`` is true (others are skipped)."""

        async def find() -> Message:
            while True:
                msg = await self.received.get()
                if isinstance(msg, ProtocolError):
                    raise AssertionError(f"agent sent an invalid message: {msg}")
                if match(msg):
                    return msg

        return await asyncio.wait_for(find(), within)

    async def expect_event(self, attempt_id: int, state: str, within: float = 10.0) -> AttemptEvent:
        """The next ``attempt`` message of ``attempt_id``; fails if its state is not ``state``."""
        msg = await self.expect(lambda m: isinstance(m, AttemptEvent) and m.attempt_id == attempt_id, within)
        assert isinstance(msg, AttemptEvent)
        assert msg.state == state, msg
        return msg


def processes_of(state_dir: Path) -> list[int]:
    """The live processes whose command line names ``state_dir``'s attempts directory: the
    wrappers of its attempts (their exit file lies there), recorded or not."""
    mark = str(state_dir / "attempts").encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat[stat.rfind(")") + 2] not in "ZX" and mark in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def kill_leftovers(state_dir: Path) -> None:
    """SIGKILL the process group and the cgroup of every attempt recorded as running in ``state_dir``,
    and the group of any wrapper of it that no record names (a test must not leave one behind)."""
    from agent.runtime.isolation import remove_cgroup

    for record in AttemptStore(state_dir).load_all():
        if record.state == "running" and record.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)
        if record.cgroup:
            remove_cgroup(Path(record.cgroup), parent_too=True)
        if record.var_tmp:  # what the next agent's recover() would remove (its private /var/tmp)
            shutil.rmtree(record.var_tmp, ignore_errors=True)
    for pid in processes_of(state_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def make_agent(url: str, state_dir: Path, heartbeat: float = 0.2) -> Agent:
    """An agent for host ``h1`` with 8 fake H100s, fast heartbeats and fast reconnects."""
    config = AgentConfig(
        server=url,
        token="host-token",
        host_name=HOST,
        gpus=8,
        state_dir=state_dir,
        heartbeat=heartbeat,
        backoff_max=0.3,
    )
    return Agent(config, FakeGpuBackend(HOST, 8, state_dir=state_dir), ProcessRuntime(state_dir, cwd=REPO_ROOT))


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``agent`` in the background; stop it cleanly on exit (failing if it crashed)."""
    task = asyncio.create_task(agent.run())
    try:
        yield task
    finally:
        agent.request_stop()
        await asyncio.wait_for(task, 10)


HOST_SCRATCH = "/var/lib"
"""Where the root-only tests keep files an attempt must reach on the host itself: outside /tmp,
/var/tmp and /dev/shm, which a root agent makes private to each attempt (docs/isolation.md)."""


def host_scratch_dir(prefix: str) -> Path:
    """A new directory (mode 0755, as /dev or /opt) under :data:`HOST_SCRATCH`; the caller removes it."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix, dir=HOST_SCRATCH))
    os.chmod(path, 0o755)  # noqa: S103 -- others may traverse it
    return path


def bobs_home(base: Path) -> tuple[Any, Any, Path]:
    """An owner-mode isolation (dedicated ``fwt-`` accounts), the identity of ``iso-bob`` in it, and
    bob's home under ``base``: mode 0700, holding ``notes/`` (0755) with ``plan.txt`` (0644), all
    bob's: files only the home's mode keeps from others (iso58's symlink probes). Needs root."""
    isolation = owner_isolation()
    bob = isolation.resolve("iso-bob", None, None, (), cluster_allows_root=False)
    home = base / "home-bob"
    (home / "notes").mkdir(parents=True)
    (home / "notes" / "plan.txt").write_text("bob's plan\n")
    os.chmod(home / "notes", 0o755)  # noqa: S103 -- bob's home (0700) kept it
    os.chmod(home / "notes" / "plan.txt", 0o644)  # noqa: S103 -- likewise
    os.chmod(home, 0o700)
    for p in (home, home / "notes", home / "notes" / "plan.txt"):
        os.chown(p, bob.uid, bob.gid)
    return isolation, bob, home


def patch_attempt_init(monkeypatch: Any, tmp_path: Path, old: str, new: str) -> None:
    """Run attempts under a copy of the wrapper's file (:data:`agent.runtime.process.ATTEMPT_INIT`)
    with ``old`` replaced by ``new`` (a step forced to fail, to reach its fallback); ``old`` must
    be there once."""
    from agent.runtime import process

    source = process.ATTEMPT_INIT.read_text()
    assert source.count(old) == 1, old
    copy = tmp_path / "attempt_init.py"
    copy.write_text(source.replace(old, new))
    os.chmod(copy, 0o644)
    monkeypatch.setattr(process, "ATTEMPT_INIT", copy)


# --- the isolation tests' shared setup (real processes as other users; docs/isolation.md) -------------

TEST_RANGE = (62000, 62099)
"""The uids of the tests' dedicated accounts (``fwt-*``, made once with ``useradd`` and reused)."""
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="switching identities needs root and useradd"
)


def _can_unshare_mounts() -> bool:
    import subprocess

    return os.geteuid() == 0 and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0  # noqa: S607


needs_mount_ns = pytest.mark.skipif(not _can_unshare_mounts(), reason="a private /tmp needs root and CAP_SYS_ADMIN")


def owner_isolation(**overrides: object) -> Isolation:
    """An owner-mode isolation with the tests' accounts (:data:`TEST_RANGE`), ``overrides`` applied."""
    config = IsolationConfig(mode="owner", uid_range=TEST_RANGE, account_prefix="fwt-", nss=False)
    return Isolation(IsolationConfig(**{**{f: getattr(config, f) for f in config.__dataclass_fields__}, **overrides}))


def cgroup_setup(kind: str) -> CgroupSetup:
    """The host's cgroups of ``kind`` (``v2``, ``v1``; ``none``: the process-tree fallback); the
    test is skipped where there are none of that kind."""
    if kind == "none":
        return CgroupSetup("none", note="test")
    setup = detect_cgroups(kind)
    if setup.kind != kind:
        pytest.skip(f"no usable cgroup {kind} here ({setup.note})")
    return setup


def spec(attempt_id: int, command: list[str], owner: str = "", env: dict[str, str] | None = None,
         **kwargs: object) -> AttemptSpec:  # fmt: skip
    """An attempt on GPU 0 (``GPU-0``) with a 1 s grace, for ``owner``."""
    return AttemptSpec(
        attempt_id=attempt_id,
        workload_id=500 + attempt_id,
        command=command,
        gpu_indices=[0],
        gpu_uuids=["GPU-0"],
        env=env or {},
        grace_s=1,
        owner=owner,
        **kwargs,  # type: ignore[arg-type]
    )


def runtime(
    state: Path, isolation: Isolation | None = None, gpu_nodes: dict[int, str] | None = None
) -> tuple[ProcessRuntime, asyncio.Queue[AttemptRecord]]:
    """A process runtime on ``state`` and the queue its attempts' exits are put on."""
    rt = ProcessRuntime(state, cwd=REPO_ROOT, isolation=isolation, gpu_nodes=gpu_nodes)
    exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
    rt.on_exit = exits.put_nowait
    return rt, exits


def log_of(rt: ProcessRuntime, attempt_id: int) -> str:
    return rt.read_log(attempt_id, 1 << 20)[0].decode()


async def wait_log(rt: ProcessRuntime, attempt_id: int, text: str, within: float = 5.0) -> None:
    for _ in range(int(within / 0.02)):
        if text in log_of(rt, attempt_id):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{text!r} not in the log of attempt {attempt_id}: {log_of(rt, attempt_id)!r}")


# Sleep durations no other process uses: unique per test session (several may run on one machine).
_SESSION = 900000 + os.getpid() % 90000
MARKERS = (f"{_SESSION}.101", f"{_SESSION}.202", f"{_SESSION}.303")


def marker_pids() -> list[int]:
    """Live processes running ``sleep <marker>`` (left behind by a stop that missed them)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{entry}/stat").read_text()
                if len(cmd) > 1 and cmd[1].decode() in MARKERS and stat[stat.rfind(")") + 2] != "Z":
                    found.append(int(entry))
    return found


def kill_markers() -> None:
    for pid in marker_pids():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# ``ps -e -o pid,args`` without procps: every process /proc lists, its pid and command line
PS = r'for d in /proc/[0-9]*; do echo "PS ${d#/proc/} $(tr "\0" " " <$d/cmdline 2>/dev/null)"; done'


def ps_lines(text: str) -> dict[int, str]:
    """The ``PS`` lines of ``text``: pid → command line."""
    out = {}
    for line in text.splitlines():
        if line.startswith("PS "):
            pid, _, args = line[3:].partition(" ")
            out[int(pid)] = args.strip()
    return out


def join_again(tmp_path: Path, monkeypatch: Any, state: Path) -> None:
    """The agent joined again as ``n2`` with a fake server's answer, keeping ``state`` as its state
    directory (what a re-join after a removal or an unknown token does)."""
    from agent import join as join_module
    from agent.gpu.fake import FakeGpuBackend

    answer = {"websocket_url": "ws://s/agent/", "host_token": "fwh_new", "host": "n2", "cluster": "c"}
    monkeypatch.setattr(join_module, "post_join", lambda *args, **kwargs: answer)
    join_module.join(
        server="http://s",
        join_token="fwj_new",
        config_path=tmp_path / "agent.yaml",
        host_name="n2",
        gpu=FakeGpuBackend("n2", 1, state_dir=tmp_path / "fake"),
        settings={"state_dir": state},
    )
