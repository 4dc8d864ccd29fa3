"""pf61 after brk61: a forwarded connection's answers, as a session's, go only on the agent's
connection its ``port_open`` came on, and one whose relay failed unexpectedly is answered
``exec_failed`` (its reader does not wait for ever)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

from agent_testkit import FakeServer, make_agent, run_async, running

from agent.protocol import Error, ExecResult, Hello, PortData, PortOpen


def test_a_forward_whose_relay_failed_is_answered_exec_failed(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)

            async def broken(attempt_id: int, port: int) -> socket.socket:
                raise RuntimeError("a bug")

            agent.runtime.connect_port = broken  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(PortOpen(attempt_id=7, port=6006, idle_s=60))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None, within=5)
                assert isinstance(got, Error) and got.code == "exec_failed", got
                assert "RuntimeError: a bug" in got.message
                await asyncio.sleep(0.1)
                assert agent._ports == {}

    run_async(scenario(), timeout=30)


def test_a_forwards_answers_are_not_sent_on_the_next_connection(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            release = asyncio.Event()
            ours, theirs = socket.socketpair()

            async def slow(attempt_id: int, port: int) -> socket.socket:
                await release.wait()
                return ours

            agent.runtime.connect_port = slow  # type: ignore[method-assign]
            try:
                async with running(agent):
                    await server.expect(lambda m: isinstance(m, Hello))
                    await server.send(PortOpen(attempt_id=7, port=6006, idle_s=60))
                    await asyncio.sleep(0.2)
                    await server.drop()
                    await server.expect(lambda m: isinstance(m, Hello))  # the next connection
                    theirs.sendall(b"alice's page")
                    release.set()
                    stray = None
                    with contextlib.suppress(TimeoutError):
                        stray = await server.expect(
                            lambda m: isinstance(m, (PortData, ExecResult, Error)) and m.ref is not None, within=1.0
                        )
                    assert stray is None, stray
            finally:
                theirs.close()

    run_async(scenario(), timeout=30)
