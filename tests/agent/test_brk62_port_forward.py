"""brk62: ``fairway port-forward`` (pf61) and the attempt's PID namespace (pidns61), broken."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agent_testkit import run_async

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
