"""brk61: an interactive session (``exec_tty``) whose runtime raised something other than its
``ExecError`` (``os.openpty`` out of descriptors, a containment gone, a bug) was answered nothing:
the task ended with the exception unseen, the server's reader showed "started" and waited for
ever, its slot on the agent's connection held. It is answered ``exec_failed`` as a one-shot
``exec`` is (brk59)."""

from __future__ import annotations

from pathlib import Path

from agent_testkit import FakeServer, make_agent, run_async, running

from agent.protocol import Error, ExecTty, Hello


def test_a_session_whose_runtime_failed_is_answered_exec_failed(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)

            async def failing(*_args: object) -> object:
                raise OSError(24, "Too many open files")

            agent.runtime.exec_tty = failing  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(ExecTty(attempt_id=1, command=["bash"], rows=24, cols=80, idle_s=60))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None, within=5)
                assert isinstance(got, Error) and got.code == "exec_failed", got
                assert "Too many open files" in got.message
                assert agent._ttys == {}

    run_async(scenario(), timeout=30)
