"""exl61, end to end with real agents: an interactive session whose reader vanished without a word
(no close, no reset: a laptop shut, a cable out) ends within a bound, not at the idle timeout:
idle, by the web process's keepalive (its pings unanswered); flooded, its socket's buffers full (the
keepalive's close waits on them), once a send has waited ``READER_STALL_S``. And a gang on two
agents: ``rank`` picks the member whose host runs the command."""

from __future__ import annotations

import functools
import re
import time
from typing import Any

import pytest
import uvicorn

from scheduler import exec_session
from tests.e2e import conftest as e2e
from tests.e2e.test_exec_tty_e2e import AS_OWNERS, gone, host_pid, owner_stack, pytestmark, read_until, session

__all__ = ["pytestmark"]


def _pid(stack: Any, ws: Any) -> int:
    out, _ = read_until(ws, r"pid=\d+\r?\n")  # its whole number: output may cut it in two
    return host_pid(stack, int(re.search(r"pid=(\d+)\r?\n", out).group(1)))  # type: ignore[union-attr]


def _ended_within(pid: int, seconds: float) -> float:
    began = time.monotonic()
    while not gone(pid) and time.monotonic() - began < seconds:
        time.sleep(0.1)
    assert gone(pid)
    return time.monotonic() - began


@AS_OWNERS
def test_a_reader_gone_without_a_word_ends_its_session(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pk = owner_stack(stack)
    # Given web processes that ping every 0.5 s and close a socket whose pong is 0.5 s late (serve.py:
    # 120 s and 60 s), and a send that may wait 1 s for a reader (READER_STALL_S: 180 s)
    monkeypatch.setattr(e2e.uvicorn, "Config", functools.partial(uvicorn.Config, ws_ping_interval=0.5,
                                                                 ws_ping_timeout=0.5))  # fmt: skip
    monkeypatch.setattr(exec_session, "READER_STALL_S", 1.0)
    hellos = stack.hellos()
    stack.stop_server()
    stack.start_server()
    stack.wait_until(lambda: stack.hellos() > hellos, 30, "the agent back")

    # When the reader of an idle session stops answering (it reads nothing more: no pong)
    ws, _ = session(stack, pk, ["sh", "-c", "echo pid=$$; sleep 1000.61 & wait"])
    pid = _pid(stack, ws)
    # Then the keepalive closes its socket and its processes are killed, long before the idle timeout
    took = _ended_within(pid, 15)
    print(f"an idle session of a reader gone: ended after {took:.1f} s (ping 0.5 s + pong 0.5 s)")
    ws.sock.close()

    # When the reader of a session flooding it with output stops reading (its buffers fill)
    ws, _ = session(stack, pk, ["sh", "-c", "echo pid=$$; exec yes 0123456789012345678901234567890123456789"])
    pid = _pid(stack, ws)
    # Then the stalled send ends the session and the command is killed
    took = _ended_within(pid, 20)
    print(f"a flooded session of a reader gone: ended after {took:.1f} s (READER_STALL_S 1 s)")
    ws.sock.close()


def test_a_gang_members_host_by_rank_on_two_real_agents(stack: Any, tmp_path: Any) -> None:
    """A 4-GPU gang on h1 and h2 (two agents, two GPUs each): ``rank`` 1 runs the command, one-shot
    and on a terminal, in the part h2's agent holds (its ``NODE_RANK``); rank 2 is refused."""
    import os
    import subprocess
    import sys

    from agent.gpu.fake import fake_gpu_uuid
    from scheduler.models import Attempt, Host
    from scheduler.services import do_register_host
    from tests.e2e.test_exec_e2e import exec_in, running_attempt

    gpus = [(i, fake_gpu_uuid("h2", i), "H100", 81920) for i in range(2)]
    h2, token = do_register_host(stack.cluster, "h2", gpus, {"rack": "r1"})
    state = tmp_path / "agent-h2"
    with (tmp_path / "agent-h2.log").open("ab") as log:
        second = subprocess.Popen(  # noqa: S603 -- our own agent, fixed arguments
            [sys.executable, "-m", "agent", "run", "--server", f"ws://127.0.0.1:{stack.port}/ws/agent/",
             "--host-name", "h2", "--gpus", "2", "--model", "H100", "--state-dir", str(state),
             "--heartbeat", "0.5", "--backoff-max", "2"],
            cwd=e2e.REPO, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(e2e.REPO), "FAIRWAY_ISOLATION": stack.isolation,
                 "FAIRWAY_TOKEN": token},
        )  # fmt: skip
    try:
        stack.wait_until(lambda: Host.objects.filter(pk=h2.pk, agent_version__gt="").exists(), 20, "h2's hello")
        pk = stack.submit("org/alpha", gpus=4, min_runtime=60, duration=0, name="gang",
                          command=["sh", "-c", "echo ready; exec sleep 300"])  # fmt: skip
        attempt = running_attempt(stack, pk)
        assert Attempt.objects.get(pk=attempt.pk).host_names() == ["h1", "h2"]
        said = 'echo "rank=$NODE_RANK"'

        def rank_1() -> tuple[int, dict[str, Any]] | None:  # h2's part may report its start after h1's
            status, got = exec_in(stack, pk, {"command": ["sh", "-c", said], "rank": 1})
            return None if (status, got.get("code")) == (409, "not_running") else (status, got)

        status, got = stack.wait_until(rank_1, 20, "h2's part of the gang to run")
        assert (status, got.get("stdout")) == (200, "rank=1\n"), got
        status, got = exec_in(stack, pk, {"command": ["sh", "-c", said]})
        assert (status, got.get("stdout")) == (200, "rank=0\n"), got
        status, got = exec_in(stack, pk, {"command": ["true"], "rank": 2})
        assert (status, got.get("code")) == (400, "invalid_rank"), got

        ws, started = session(stack, pk, ["sh"], rank=1)
        assert started == {"type": "started", "attempt": 1, "host": "h2", "window": True}, started  # flow49
        ws.send_binary(b"echo rank=$NODE_RANK; exit 5\n")
        out, end = read_until(ws, "")
        assert end == {"type": "exit", "exit_code": 5, "timed_out": False} and "rank=1" in out, (out, end)
        ws.close()
    finally:
        second.terminate()
        try:
            second.wait(10)
        except subprocess.TimeoutExpired:
            second.kill()
        e2e._kill_attempt_processes(state)
