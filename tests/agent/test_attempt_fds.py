"""mend31: a process-runtime workload inherits stdin (``/dev/null``), stdout and stderr (a pipe into
its log) and no other file descriptor: not the agent's websocket, not a GPU device the agent holds open (a
cgroup device filter checks opens, not descriptors: docs/isolation.md), not its state files.

The agent below holds, inheritable on purpose, a file standing for another GPU's device node and a
listening socket, as well as its connection to the server; the workload lists its descriptors.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

from agent_testkit import REPO_ROOT, FakeServer, needs_root, owner_isolation, run_async, running, start_msg

from agent.client import Agent
from agent.config import AgentConfig
from agent.gpu.fake import FakeGpuBackend
from agent.protocol import Hello, Owner
from agent.runtime.process import ProcessRuntime

# The shell's own descriptors (``$$``: the command the wrapper runs), listed by a child that opens
# nothing in the shell (a ``$(…)`` would add its pipe), each ``N -> target``.
LIST_FDS = ["sh", "-c", "ls -l /proc/$$/fd"]


def descriptors_of_a_workload(state: Path, owner: str | None) -> dict[str, str]:
    """Start ``LIST_FDS`` through an agent (fake server, fake GPUs); its descriptors: number → target."""
    isolation = owner_isolation() if owner else None
    held = state.parent / "nvidia1"  # stands for another GPU's node the agent (NVML) holds open
    held.write_bytes(b"")
    found: dict[str, str] = {}

    async def scenario() -> None:
        async with FakeServer() as server:
            config = AgentConfig(server=server.url, token="t", host_name="h1", state_dir=state, backoff_max=0.3)
            rt = ProcessRuntime(state, cwd=REPO_ROOT, isolation=isolation)
            device = os.open(held, os.O_RDONLY)
            listener = socket.socket()
            try:
                os.set_inheritable(device, True)
                listener.set_inheritable(True)
                listener.bind(("127.0.0.1", 0))
                listener.listen()
                async with running(Agent(config, FakeGpuBackend("h1", 8, state_dir=state), rt)):
                    await server.expect(lambda m: isinstance(m, Hello))
                    start = start_msg(31, LIST_FDS, gpus=[0])
                    await server.send(replace(start, owner=Owner(name=owner) if owner else None))
                    await server.expect_event(31, "started")
                    await server.expect_event(31, "exited")
                    log = rt.read_log(31, 1 << 20)[0].decode()
            finally:
                os.close(device)
                listener.close()
        for line in log.splitlines():
            if " -> " in line:
                name, _, target = line.partition(" -> ")
                found[name.split()[-1]] = target
        assert found, log

    run_async(scenario())
    return found


def expected(found: dict[str, str]) -> dict[str, str]:
    """stdin, and stdout and stderr one pipe that the wrapper copies into the log (never the log
    file itself: a workload could fallocate() disk through it)."""
    pipe = found.get("1", "")
    assert pipe.startswith("pipe:["), found
    return {"0": "/dev/null", "1": pipe, "2": pipe}


def test_a_workload_inherits_only_stdin_stdout_and_stderr(state_dir: Path) -> None:
    found = descriptors_of_a_workload(state_dir, None)
    assert found == expected(found)


@needs_root
def test_a_workload_of_an_owner_inherits_only_stdin_stdout_and_stderr(open_state: Path) -> None:
    found = descriptors_of_a_workload(open_state, "iso-alice")
    assert found == expected(found)
