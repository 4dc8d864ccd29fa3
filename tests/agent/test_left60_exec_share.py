"""left60: the agent's cap on commands at once (``MAX_EXECS``, 8 per host) was shared by everyone:
one owner's eight ``fairway exec ID -- sleep 600`` answered every other user of the host ``busy``.
Each owner may hold half of it (at least 1), the rule of the web process's own slots
(``agent.protocol.one_persons_share``); past it ``owner_busy``, the server's 429 ``exec_busy``
saying it is that person's share."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_testkit import FakeServer, make_agent, run_async, running

from agent.client import MAX_EXECS
from agent.protocol import Error, Exec, ExecResult, Hello, one_persons_share
from agent.runtime.base import ExecOutcome


def test_one_owner_holds_at_most_half_of_the_hosts_exec_slots(state_dir: Path) -> None:
    share = one_persons_share(MAX_EXECS)
    assert share == MAX_EXECS // 2 and one_persons_share(1) == 1

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            go = asyncio.Event()

            async def slow(*_args: object) -> ExecOutcome:
                await go.wait()
                return ExecOutcome(exit_code=0, stdout=b"", stderr=b"", truncated=False, timed_out=False)

            agent.runtime.exec = slow  # type: ignore[method-assign]
            agent._exec_owners.update({1: "alice", 2: "bob"})
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                for _ in range(share + 1):
                    await server.send(Exec(attempt_id=1, command=["sleep", "600"], timeout_s=600, max_output=100))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None)
                assert isinstance(got, Error) and got.code == "owner_busy", got
                assert f"half of the {MAX_EXECS}" in got.message, got.message
                await server.send(Exec(attempt_id=2, command=["id"], timeout_s=5, max_output=100))
                sent = server._seq
                await asyncio.sleep(0.2)
                assert agent._execs == share + 1  # bob's runs beside alice's
                go.set()
                await server.expect(lambda m: isinstance(m, ExecResult) and m.ref == sent)
                await asyncio.sleep(0.2)
            assert agent._execs == 0 and agent._execs_by_owner == {}

    run_async(scenario(), timeout=30)
