"""The agent's side of ``fairway port-forward`` (``port_open``, ``port_data``: docs/jobs.md, "Reach a
port in a running workload"), its runtime's connection played by one end of a socket pair: bytes
both ways, each piece written acknowledged (``exec_ack``), half-closes both ways, then one
``exec_result``; at most the window sent ahead of the server's acknowledgements; nothing listening
said as ``exec_refused``; one owner's share of the host's connections. The real runtime's
connection (the exec wrapper, as the owner): tests/e2e/test_port_forward_e2e.py."""

from __future__ import annotations

import asyncio
import base64
import socket
from pathlib import Path

import pytest
from agent_testkit import FakeServer, make_agent, run_async, running

import agent.client as client
from agent.protocol import (
    EXEC_TTY_WINDOW,
    Error,
    ExecAck,
    ExecResult,
    Hello,
    Message,
    PortData,
    PortOpen,
    one_persons_share,
)
from agent.runtime.base import ExecError


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_bytes_go_both_ways_within_the_window_then_it_ends(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            inside, workload = socket.socketpair()
            workload.setblocking(False)
            opened: list[tuple[int, int]] = []

            async def connect_port(attempt_id: int, port: int) -> socket.socket:
                opened.append((attempt_id, port))
                return inside

            agent.runtime.connect_port = connect_port  # type: ignore[method-assign]
            loop = asyncio.get_running_loop()
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(PortOpen(attempt_id=7, port=6006, idle_s=60))
                ref = server._seq  # the port_open's id: its stream's ref
                # up: what the server sends is written to the connection, each piece acknowledged
                await server.send(PortData(ref=ref, data=_b64(b"\x00GET /"), eof=False))
                assert await asyncio.wait_for(loop.sock_recv(workload, 100), 10) == b"\x00GET /"
                ack = await server.expect(lambda m: isinstance(m, ExecAck))
                assert isinstance(ack, ExecAck) and (ack.bytes, ack.chunks) == (6, 1)
                assert opened == [(7, 6006)]
                # down: a flood from the workload, none of it acknowledged: a window's worth, no more
                flood = bytes(range(256)) * 4096  # 1 MiB
                writing = loop.create_task(loop.sock_sendall(workload, flood))
                got = b""
                while len(got) < EXEC_TTY_WINDOW:
                    msg = await server.expect(lambda m: isinstance(m, PortData))
                    assert isinstance(msg, PortData)
                    got += base64.b64decode(msg.data)
                await asyncio.sleep(0.3)
                assert not any(isinstance(m, PortData) for m in _pending(server)), "sent past the window"
                assert len(got) <= EXEC_TTY_WINDOW
                # acknowledged, the rest comes, intact
                while len(got) < len(flood):
                    await server.send(ExecAck(ref=ref, bytes=EXEC_TTY_WINDOW, chunks=32))
                    msg = await server.expect(lambda m: isinstance(m, PortData))
                    assert isinstance(msg, PortData)
                    got += base64.b64decode(msg.data)
                await writing
                assert got == flood
                # half-closes: the workload's side ends (eof), then the server's: the end
                workload.shutdown(socket.SHUT_WR)
                end = await server.expect(lambda m: isinstance(m, PortData) and m.eof)
                assert isinstance(end, PortData) and end.data == ""
                await server.send(PortData(ref=ref, data="", eof=True))
                assert await asyncio.wait_for(loop.sock_recv(workload, 100), 10) == b""
                result = await server.expect(lambda m: isinstance(m, ExecResult))
                assert isinstance(result, ExecResult) and (result.ref, result.exit_code) == (ref, 0)
                assert agent._ports == {}
            workload.close()

    run_async(scenario(), timeout=30)


def _pending(server: FakeServer) -> list[Message | object]:
    """What the agent sent that no ``expect`` took yet."""
    out: list[Message | object] = []
    while not server.received.empty():
        out.append(server.received.get_nowait())
    return out


def test_nothing_listening_is_said(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)

            async def refused(attempt_id: int, port: int) -> socket.socket:
                raise ExecError("refused", "Connection refused")

            agent.runtime.connect_port = refused  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(PortOpen(attempt_id=7, port=6006, idle_s=60))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None)
                assert isinstance(got, Error) and (got.code, got.message) == ("exec_refused", "Connection refused")
                await asyncio.sleep(0.1)
                assert agent._ports == {}

    run_async(scenario(), timeout=30)


def test_one_owner_holds_at_most_half_of_the_hosts_connections(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client, "MAX_PORTS", 4)

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            never = asyncio.Event()

            async def connecting(*_args: object) -> socket.socket:
                await never.wait()
                raise AssertionError("not reached")

            agent.runtime.connect_port = connecting  # type: ignore[method-assign]
            agent._exec_owners.update({1: "alice", 2: "bob"})
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                for _ in range(one_persons_share(4) + 1):
                    await server.send(PortOpen(attempt_id=1, port=80, idle_s=60))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None)
                assert isinstance(got, Error) and got.code == "owner_busy" and "half of the 4" in got.message, got
                await server.send(PortOpen(attempt_id=2, port=80, idle_s=60))
                await asyncio.sleep(0.2)
                assert len(agent._ports) == one_persons_share(4) + 1  # bob's beside alice's

    run_async(scenario(), timeout=30)


def test_a_connection_nothing_goes_through_ends_after_idle_s(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            inside, workload = socket.socketpair()
            workload.setblocking(False)

            async def connect_port(attempt_id: int, port: int) -> socket.socket:
                return inside

            agent.runtime.connect_port = connect_port  # type: ignore[method-assign]
            loop = asyncio.get_running_loop()
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(PortOpen(attempt_id=7, port=6006, idle_s=1))
                result = await server.expect(lambda m: isinstance(m, ExecResult), within=10)
                assert isinstance(result, ExecResult) and result.timed_out and result.exit_code == 0
                assert await asyncio.wait_for(loop.sock_recv(workload, 100), 10) == b""  # closed
            workload.close()

    run_async(scenario(), timeout=30)
