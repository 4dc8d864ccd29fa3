"""Merge of tty59 with left60: one owner's interactive sessions (``exec_tty``) held every one of
the agent's ``MAX_TTYS``, as one owner's ``sleep 600`` held every ``exec`` slot before left60.
Each owner may hold half of them (``agent.protocol.one_persons_share``), past it ``owner_busy``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import FakeServer, make_agent, run_async, running

import agent.client as client
from agent.protocol import Error, ExecTty, Hello, one_persons_share


def test_one_owner_holds_at_most_half_of_the_hosts_sessions(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_TTYS", 4)
    share = one_persons_share(4)

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            never = asyncio.Event()

            async def starting(*_args: object) -> object:
                await never.wait()  # the session stays open, starting
                raise AssertionError("not reached")

            agent.runtime.exec_tty = starting  # type: ignore[method-assign]
            agent._exec_owners.update({1: "alice", 2: "bob"})
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                for _ in range(share + 1):
                    await server.send(ExecTty(attempt_id=1, command=["bash"], rows=24, cols=80, idle_s=60))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None)
                assert isinstance(got, Error) and got.code == "owner_busy", got
                assert "half of the 4" in got.message, got.message
                await server.send(ExecTty(attempt_id=2, command=["bash"], rows=24, cols=80, idle_s=60))
                await asyncio.sleep(0.2)
                assert len(agent._ttys) == share + 1  # bob's opens beside alice's

    run_async(scenario(), timeout=30)
