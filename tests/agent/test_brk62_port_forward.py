"""brk62: ``fairway port-forward`` (pf61) and the attempt's PID namespace (pidns61), broken."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agent_testkit import needs_mount_ns, needs_root, owner_isolation, run_async, runtime, spec, wait_log

from agent.runtime.base import ExecError, StoredRuntime
from agent.runtime.docker import DockerRuntime
from agent.state import AttemptRecord


def test_a_docker_forward_does_not_enter_the_namespace_of_a_pid_the_container_no_longer_has(state_dir: Path) -> None:
    """The docker runtime's forwarded connection entered ``/proc/<State.Pid>/ns/net`` of the
    engine's answer: a container that ended meanwhile left that pid to whatever took it since (the
    host's own network, another owner's container), and the helper, as root for a root container,
    connected to that one's 127.0.0.1. The container is asked again once the namespace is held:
    it must still run with that pid, else ``not_running``."""
    host_service = socket.create_server(("127.0.0.1", 0))  # the host's, on its own loopback
    port = host_service.getsockname()[1]
    answers = [
        {"State": {"Pid": os.getpid(), "Running": True}, "Config": {}},  # the pid the test process took
        {"State": {"Pid": 0, "Running": False}, "Config": {}},  # the container had ended
    ]
    lock = threading.Lock()

    def get(_name: str) -> Any:
        with lock:
            attrs = answers.pop(0) if len(answers) > 1 else answers[0]
        return SimpleNamespace(id="c1", attrs=attrs, reload=lambda: None)

    rt = object.__new__(DockerRuntime)
    StoredRuntime.__init__(rt, state_dir)
    rt.client = SimpleNamespace(containers=SimpleNamespace(get=get))
    rt._exits, rt._closed = {}, threading.Event()
    rt._records[5] = AttemptRecord(attempt_id=5, workload_id=1, state="running")
    try:
        with pytest.raises(ExecError) as refused:
            conn = run_async(rt.connect_port(5, port), timeout=20)
            conn.close()
        assert refused.value.code == "not_running"
    finally:
        host_service.close()


@needs_root
@needs_mount_ns
def test_a_process_forward_reaches_only_a_server_of_the_attempts_owner(open_state: Path) -> None:
    """Attempts share the host's network (docs/isolation.md), so another owner's workload (or a
    host service) may listen first on the port one forwards (a squatter on 127.0.0.1:8888: the
    browser's Jupyter token, typed into its page, is the squatter's). A forward is to a port in
    one's own workload: a server of another uid is refused (``port_refused``), the owner's reached."""
    squatter = socket.create_server(("127.0.0.1", 0))  # root's, not the owner's
    taken = squatter.getsockname()[1]
    probe = socket.create_server(("127.0.0.1", 0))
    own = probe.getsockname()[1]
    probe.close()
    serve = (
        f"import socket; s = socket.create_server(('127.0.0.1', {own})); print('up', flush=True); "
        "c, _ = s.accept(); c.sendall(b'mine'); s.accept()"
    )

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["/usr/bin/python3", "-c", serve], owner="pid-alice"))
        await wait_log(rt, 1, "up")
        with pytest.raises(ExecError) as refused:
            (await rt.connect_port(1, taken)).close()
        assert refused.value.code == "port_refused" and "another user" in str(refused.value), refused.value
        conn = await rt.connect_port(1, own)
        conn.setblocking(False)
        assert await asyncio.wait_for(asyncio.get_running_loop().sock_recv(conn, 10), 10) == b"mine"
        conn.close()
        await rt.stop(1, 1)

    try:
        run_async(scenario(), timeout=40)
    finally:
        squatter.close()


def test_a_docker_forward_on_the_hosts_network_reaches_only_the_containers_users_server(state_dir: Path) -> None:
    """A gang's part (or ``container_network: host``) shares the host's network: the helper, as
    the container's user, reached whichever server held the port there (another owner's squatter).
    There the accepted end must be the container's user's, else ``port_refused``."""
    if os.geteuid() != 0:
        pytest.skip("the helper enters a network namespace and takes the container's user: root")
    squatter = socket.create_server(("127.0.0.1", 0))  # root's, not the container's user's
    attrs = {"State": {"Pid": os.getpid(), "Running": True}, "Config": {"User": "62050:62050"}}
    rt = object.__new__(DockerRuntime)
    StoredRuntime.__init__(rt, state_dir)
    rt.client = SimpleNamespace(containers=SimpleNamespace(get=lambda _name: SimpleNamespace(id="c1", attrs=attrs)))
    rt._exits, rt._closed = {}, threading.Event()
    rt._records[5] = AttemptRecord(attempt_id=5, workload_id=1, state="running")
    try:
        with pytest.raises(ExecError) as refused:
            conn = run_async(rt.connect_port(5, squatter.getsockname()[1]), timeout=20)
            conn.close()
        assert refused.value.code == "port_refused" and "another user's (uid 0)" in str(refused.value)
    finally:
        squatter.close()
