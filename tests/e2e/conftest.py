"""The whole stack in one test process, with one real agent subprocess (DESIGN.md §2).

``stack`` starts, against the test database: the ASGI app under uvicorn in a
thread (HTTP API + agent websocket), an in-process dramatiq worker on the
configured broker (stub broker, or Redis with ``REDIS_URL``), the clock, and
``python -m agent run --gpus 2`` connected over a real websocket to host ``h1``
registered with ``do_register_host``. Timings are shortened through
``settings.FAIRWAY`` (heartbeat 0.5 s, tick every 0.5 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import uvicorn
from django.db import close_old_connections

REPO = Path(__file__).resolve().parents[2]
AGENT_USER_ISOLATION = "{mode: agent, allow_root: true}"
"""``FAIRWAY_ISOLATION`` of the agents here: a test Python under a private home (/root) is not
usable by the dedicated accounts an agent running as root would use (docs/isolation.md)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def searchable_parents(path: Path) -> None:
    """``path``'s parents up to the temporary directory searchable by all, as /var/lib is: an agent
    that runs attempts as their owners binds each attempt's directory with the owner's file-system
    identity (iso58), and pytest makes its directories 0700."""
    for parent in path.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o011)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``predicate`` (a DB read) until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        close_old_connections()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Proxy:
    """A TCP relay 127.0.0.1:``port`` → 127.0.0.1:``target`` that can cut the agent's link.

    :meth:`cut` closes every relayed connection and refuses new ones (accepted, then closed at
    once) until :meth:`restore`: to the agent the server is unreachable, to the server the agent
    is silent.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.blocked = False
        self.closed = False
        self.cuts = 0
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="e2e-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for end in (client, upstream):  # as a real proxy (nginx's tcp_nodelay): no 40 ms Nagle waits
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._live |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._live -= {src, dst}

    def cut(self) -> None:
        """Drop every relayed connection and refuse new ones until :meth:`restore`."""
        self.blocked = True
        self.cuts += 1
        with self._lock:
            live = list(self._live)
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self.blocked = False

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()


class Stack:
    def __init__(self, base_url: str, token: str, cluster: Any, alpha: Any, beta: Any, state_dir: Path, log: Path):
        self.base_url = base_url
        self.token = token
        self.cluster = cluster
        self.alpha = alpha
        self.beta = beta
        self.state_dir = state_dir
        self.agent_log = log
        self.agent: subprocess.Popen[bytes] | None = None
        self.agent_args: list[str] = []
        self.agent_token = ""  # FAIRWAY_TOKEN: a host token in argv is refused (iso58)
        self.isolation = AGENT_USER_ISOLATION  # the agent's FAIRWAY_ISOLATION (docs/isolation.md)
        self.server: uvicorn.Server | None = None
        self.web: threading.Thread | None = None
        self.port = 0
        self.proxy: Proxy | None = None
        self.host: Any = None

    wait_until = staticmethod(wait_until)

    # --- the pieces, each stoppable and restartable by fault tests --------------------------------

    def start_server(self) -> None:
        """Serve the ASGI app under uvicorn in a thread on ``self.port`` (picked on first start)."""
        self.port = self.port or free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                "config.asgi:application",
                host="127.0.0.1",
                port=self.port,
                ws="websockets-sansio",
                lifespan="off",
                log_level="warning",
            )
        )
        web = threading.Thread(target=server.run, name="e2e-web", daemon=True)
        web.start()
        wait_until(lambda: server.started or not web.is_alive(), 15, "uvicorn to start", 0.05)
        assert server.started, "uvicorn did not start"
        self.server, self.web = server, web

    def stop_server(self) -> None:
        """Stop uvicorn (open websockets are closed); the agent starts reconnecting."""
        if self.server is not None and self.web is not None:
            self.server.should_exit = True
            self.web.join(15)
        self.server = self.web = None

    def start_agent(self) -> subprocess.Popen[bytes]:
        """Start ``python -m agent run`` (through the proxy) with the state directory of the stack.
        Attempts run as the agent's own user (docs/isolation.md; tests/agent covers isolation)."""
        with self.agent_log.open("ab") as log:
            self.agent = subprocess.Popen(  # noqa: S603 -- our own agent, fixed arguments
                [sys.executable, "-m", "agent", "run", *self.agent_args],
                cwd=REPO,
                env={
                    **os.environ,
                    "PYTHONPATH": str(REPO),
                    "FAIRWAY_ISOLATION": self.isolation,
                    "FAIRWAY_TOKEN": self.agent_token,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self.agent

    def stop_agent(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Signal the agent and wait for it (SIGKILL: the attempts it ran are left orphaned)."""
        if self.agent is None:
            return
        self.agent.send_signal(sig)
        try:
            self.agent.wait(10)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            self.agent.wait(5)
        self.agent = None

    def hellos(self) -> int:
        """How many times the agent said hello (connections the server accepted)."""
        from scheduler.models import HostEvent

        return HostEvent.objects.filter(host_id=self.host.pk, kind="hello").count()

    def submit(self, budget: str, gpus: int, min_runtime: int, duration: float, **extra: Any) -> int:
        """POST /api/v1/workloads/ running the agent's stand-in trainer; returns the workload id."""
        body = {
            "name": extra.pop("name", f"standin-{duration:g}s"),
            "budget": budget,
            "cluster": self.cluster.name,
            "gpu_model": "H100",
            "gpu_count": gpus,
            "command": [sys.executable, "-m", "agent.standin", "--duration", str(duration)],
            "env": {"PYTHONPATH": str(REPO), "WANDB_KEY": {"value": "not-a-real-key", "secret": True}},
            "min_runtime": min_runtime,
            **extra,
        }
        req = urllib.request.Request(  # noqa: S310 -- http:// of the local test server
            f"{self.base_url}/api/v1/workloads/",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 -- see above
            assert resp.status == 201, resp.read()
            return int(json.loads(resp.read())["id"])

    def attempt_log(self, attempt_id: int) -> str:
        """The agent's log of attempt ``attempt_id`` (primary key; the agent files it by wire id)."""
        from scheduler.models import Attempt

        path = self.state_dir / "attempts" / f"{Attempt.objects.get(pk=attempt_id).wire_id}.log"
        return path.read_text() if path.exists() else ""

    def wait_standin_running(self, attempt_id: int, timeout: float = 20) -> None:
        """Wait until attempt ``attempt_id``'s stand-in printed its first line: from then on it
        answers SIGTERM with "SIGTERM received" (``agent.standin``). "Started" only says that its
        process was spawned; a stop that comes before the interpreter set the handler (a slow
        start under load) ends it with 143 and an empty log."""
        self.wait_until(
            lambda: "standin: running" in self.attempt_log(attempt_id),
            timeout,
            f"attempt {attempt_id}'s stand-in to run",
        )

    def agent_output(self) -> str:
        return self.agent_log.read_text(errors="replace") if self.agent_log.exists() else ""


def _kill_attempt_processes(state_dir: Path) -> None:
    """Attempts outlive their agent by design (§5); the test kills what is left of them: the
    recorded ones, and any wrapper whose command line names the state directory (its exit file)
    that no record names."""
    pids = set()
    var_tmps = []  # the private /var/tmp of each (docs/isolation.md): the next agent would remove them
    for record in (state_dir / "attempts").glob("*.json") if (state_dir / "attempts").is_dir() else ():
        try:
            data = json.loads(record.read_text())
            if data.get("pid"):
                pids.add(int(data["pid"]))
            if data.get("var_tmp"):
                var_tmps.append(str(data["var_tmp"]))
        except (OSError, ValueError):
            pass
    mark = str(state_dir / "attempts").encode()
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and mark in Path(f"/proc/{entry}/cmdline").read_bytes():
                pids.add(int(entry))
        except OSError:
            pass
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    for path in var_tmps:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def stack(transactional_db: None, settings: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The stack, its agent started with ``FAIRWAY_ISOLATION`` of the test's
    ``@pytest.mark.agent_isolation(...)`` where it has one (slow50: a test that restarted the agent
    with another paid for two agent starts), else :data:`AGENT_USER_ISOLATION`."""
    from accounts.models import User
    from accounts.services import create_api_token, do_add_membership
    from agent.gpu.fake import fake_gpu_uuid
    from budgets.models import Budget
    from scheduler import tasks
    from scheduler.clock import Clock
    from scheduler.models import Cluster
    from scheduler.services import do_register_host

    settings.FAIRWAY = {
        **settings.FAIRWAY,
        "HEARTBEAT_S": 0.5,
        "TICK_INTERVAL_S": 0.5,
        "TICK_DEBOUNCE_S": 0.1,
        "GRACE_PERIOD_S": 5,
        "HOST_OFFLINE_AFTER_S": 30,
        "PAGE_REFRESH_S": 1,  # slow50: a browser watching a workload sees each change within 1 s, not 3
    }
    settings.ALLOWED_HOSTS = ["*"]

    cluster = Cluster.objects.create(name="e2e", allow_root_workloads=True)
    org = Budget.objects.create(name="org")
    alpha = Budget.objects.create(name="alpha", parent=org)
    beta = Budget.objects.create(name="beta", parent=org)
    user = User.objects.create_user("rita", password="not-used")
    do_add_membership(user, alpha)
    do_add_membership(user, beta)
    _, api_token = create_api_token(user)
    gpus = [(i, fake_gpu_uuid("h1", i), "H100", 81920) for i in range(2)]
    _host, host_token = do_register_host(cluster, "h1", gpus, {"rack": "r1"})
    tasks.reset_debounce([cluster.pk])

    import scheduler.tasks  # noqa: F401 -- the actors must be declared before the worker starts

    state_dir = tmp_path / "agent"
    log_path = tmp_path / "agent.log"
    the_stack = Stack("", api_token, cluster, alpha, beta, state_dir, log_path)
    the_stack.host = _host
    if (isolation := request.node.get_closest_marker("agent_isolation")) is not None:
        the_stack.isolation = isolation.args[0]
        searchable_parents(state_dir)
    the_stack.start_server()
    the_stack.base_url = f"http://127.0.0.1:{the_stack.port}"
    the_stack.proxy = Proxy(the_stack.port)
    worker = dramatiq.Worker(dramatiq.get_broker(), worker_threads=1, worker_timeout=100)
    worker.start()
    clock = Clock(interval=0.5, sweep_interval=1.0).start()
    the_stack.agent_token = host_token
    the_stack.agent_args = [
        "--server", f"ws://127.0.0.1:{the_stack.proxy.port}/ws/agent/",
        "--host-name", "h1",
        "--gpus", "2",
        "--model", "H100",
        "--state-dir", str(state_dir),
        "--heartbeat", "0.5",
        "--backoff-max", "2",
    ]  # fmt: skip
    agent = the_stack.start_agent()
    try:
        from scheduler.models import Host

        wait_until(
            lambda: Host.objects.filter(pk=_host.pk, agent_version__gt="").exists() or agent.poll() is not None,
            20,
            "the agent's hello",
        )
        assert agent.poll() is None, the_stack.agent_output()
        yield the_stack
    finally:
        # Every step runs even if one fails: a half-torn-down stack would break the next test.
        the_stack.stop_agent()
        _kill_attempt_processes(state_dir)
        clock.stop()
        try:
            worker.stop(timeout=5000)
        finally:
            the_stack.proxy.close()
            the_stack.stop_server()
            tasks.reset_debounce([cluster.pk])
