"""brk61: the agent's side of ``exec`` and ``exec_tty`` (agent/client.py)."""

from __future__ import annotations

from pathlib import Path

from agent_testkit import FakeServer, make_agent, run_async, running

from agent.protocol import Error, ExecTty, Hello


def test_a_session_whose_runtime_failed_is_answered_exec_failed(state_dir: Path) -> None:
    """An interactive session whose runtime raised something other than its ``ExecError``
    (``os.openpty`` out of descriptors, a bug) was answered nothing: the task ended with the
    exception unseen, the server's reader showed "started" and waited for ever, its slot on the
    agent's connection held. It is answered ``exec_failed`` as a one-shot ``exec`` is (brk59)."""

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


def test_a_session_ended_for_input_its_command_did_not_read_says_so(state_dir: Path) -> None:
    """brk61: a paste past the input a command does not read (256 KiB) ended the session as a
    plain exit, 129, and nothing said why; its ``exec_result`` says it (``message``), the server's
    ``exit`` frame and the CLI pass it on."""
    import asyncio
    import os

    from agent.protocol import EXEC_CHUNK_BYTES, ExecInput, ExecResult
    from agent.runtime.isolation import stop_then_kill_tree
    from agent.runtime.tty import TTY_MAX_PENDING_INPUT, TtySession, set_size

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)

            async def deaf(*_args: object) -> TtySession:
                master, slave = os.openpty()
                set_size(slave, 24, 80)
                proc = await asyncio.create_subprocess_exec(
                    "sleep", "30", stdin=slave, stdout=slave, stderr=slave, start_new_session=True
                )
                os.close(slave)
                return TtySession(master, proc, stop_then_kill_tree)

            agent.runtime.exec_tty = deaf  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(ExecTty(attempt_id=1, command=["sleep"], rows=24, cols=80, idle_s=60))
                await asyncio.sleep(0.3)
                (ref,) = agent._ttys
                for _ in range(TTY_MAX_PENDING_INPUT // EXEC_CHUNK_BYTES + 2):
                    await server.send(ExecInput(ref=ref, data="x" * EXEC_CHUNK_BYTES))
                got = await server.expect(lambda m: isinstance(m, (ExecResult, Error)), within=10)
                assert isinstance(got, ExecResult) and got.exit_code is not None
                assert got.message.startswith("the session was ended: more than 262144 bytes of input"), got

    run_async(scenario(), timeout=30)


def test_an_answer_to_a_command_of_a_connection_that_ended_is_not_sent_on_the_next(state_dir: Path) -> None:
    """brk61: a one-shot command (up to 600 s) or a session outlived the connection it came on,
    and its output and ``exec_result`` went on the next connection under the old message id; the
    server numbers each connection's messages from 1 again, so there that id could be another
    person's ``exec`` or session: alice's output went into bob's answer (and her exit ended his).
    An answer goes only on the connection its request came on."""
    import asyncio
    import contextlib

    from agent.protocol import Exec, ExecOutput, ExecResult
    from agent.runtime.base import ExecOutcome

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            release = asyncio.Event()

            async def slow(*_args: object) -> ExecOutcome:
                await release.wait()
                return ExecOutcome(0, b"alice's secret\n", b"")

            agent.runtime.exec = slow  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(Exec(attempt_id=1, command=["cat", "secret"], timeout_s=600, max_output=1024))
                await asyncio.sleep(0.2)
                await server.drop()
                await server.expect(lambda m: isinstance(m, Hello))  # the next connection
                release.set()
                stray = None
                with contextlib.suppress(TimeoutError):
                    stray = await server.expect(lambda m: isinstance(m, (ExecOutput, ExecResult)), within=1.0)
                assert stray is None, stray
                assert agent._execs == 0  # its slot is given back all the same

    run_async(scenario(), timeout=30)


def test_a_session_slow_to_start_is_idle_from_its_start_not_from_the_request(state_dir: Path) -> None:
    """A session's idle clock ran from the request: on a loaded host a command that took longer
    than ``idle_s`` to start was hung up the moment it started, before it could take the hangup
    (the e2e suite at load 6–8: exit 137, not 129). Idle counts from the command's start."""
    import asyncio
    import os
    import signal

    from agent.protocol import ExecResult
    from agent.runtime.isolation import stop_then_kill_tree
    from agent.runtime.tty import TtySession, set_size

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)

            async def slow(*_args: object) -> TtySession:
                await asyncio.sleep(1.5)  # a start slower than idle_s
                master, slave = os.openpty()
                set_size(slave, 24, 80)
                proc = await asyncio.create_subprocess_exec(
                    "sleep", "30", stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                    preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # a test run under nohup
                )  # fmt: skip
                os.close(slave)
                return TtySession(master, proc, stop_then_kill_tree)

            agent.runtime.exec_tty = slow  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                loop = asyncio.get_running_loop()
                await server.send(ExecTty(attempt_id=1, command=["sleep"], rows=24, cols=80, idle_s=1))
                asked = loop.time()
                got = await server.expect(lambda m: isinstance(m, (ExecResult, Error)), within=15)
                assert isinstance(got, ExecResult) and got.timed_out, got
                assert got.exit_code == 128 + 1, got  # the hangup ended it (SIGHUP), not the kill
                assert loop.time() - asked >= 1.5 + 1 - 0.2  # the start, then a whole idle second

    run_async(scenario(), timeout=30)
