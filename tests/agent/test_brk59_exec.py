"""brk59: a breaker round on ``fairway exec`` in the process runtime (docs/jobs.md, "Run a command
in a running workload")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    cgroup_setup,
    kill_markers,
    marker_pids,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.runtime.base import ExecError
from agent.runtime.isolation import Isolation, IsolationConfig

pytestmark = [pytest.mark.timeout(60)]


@pytest.mark.parametrize("kind", ["v2", "v1", "none"])
def test_a_daemon_an_exec_leaves_behind_dies_with_the_attempt(state_dir: Path, kind: str) -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=cgroup_setup(kind))

    async def scenario() -> None:
        rt, exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"]))
        await wait_log(rt, 1, "up")
        got = await rt.exec(
            1, ["sh", "-c", f"setsid sleep {MARKERS[0]} </dev/null >/dev/null 2>&1 & echo bg"], 10, 4096
        )
        assert got.stdout == b"bg\n"
        await asyncio.sleep(0.2)
        # in the attempt's cgroup it lives on until the attempt's end; without one (the process-tree
        # fallback) nothing would ever find it: it dies with the command (was: lived on for good)
        assert len(marker_pids()) == (2 if kind != "none" else 1)
        await rt.stop(1, 0.5)
        await asyncio.wait_for(exits.get(), 10)
        await asyncio.sleep(0.1)
        assert marker_pids() == []

    try:
        run_async(scenario())
    finally:
        kill_markers()


def test_without_cgroups_an_exec_still_passes_its_exit_code_and_times_out(state_dir: Path) -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=cgroup_setup("none"))

    async def scenario() -> None:
        rt, _exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"]))
        await wait_log(rt, 1, "up")
        failed = await rt.exec(1, ["sh", "-c", "echo oops >&2; exit 3"], 10, 4096)
        assert (failed.exit_code, failed.stderr) == (3, b"oops\n")
        killed = await rt.exec(1, ["sh", "-c", "kill -9 $$"], 10, 4096)
        assert killed.exit_code == 137
        missing = await rt.exec(1, ["no-such-program-59"], 10, 4096)
        assert missing.exit_code == 127 and b"cannot run no-such-program-59" in missing.stderr
        slow = await rt.exec(1, ["sh", "-c", f"echo before; sleep {MARKERS[1]}"], 1, 4096)
        assert (slow.exit_code, slow.timed_out, slow.stdout) == (124, True, b"before\n")
        await asyncio.sleep(0.1)
        assert len(marker_pids()) == 1  # the attempt's own sleep only
        await rt.stop(1, 0.5)

    try:
        run_async(scenario())
    finally:
        kill_markers()


@pytest.mark.parametrize("kind", ["v2", "v1", "none"])
def test_a_stop_ends_the_exec_running_in_the_attempt(state_dir: Path, kind: str) -> None:
    """docs/jobs.md: "a stop kills it with the rest". Without cgroups the stop signalled the
    wrapper's process tree only, which an exec is not part of: the command ran on past the
    attempt's end, as the owner, until its own timeout (up to 600 s)."""
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=cgroup_setup(kind))

    async def scenario() -> None:
        rt, exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"]))
        await wait_log(rt, 1, "up")
        running = asyncio.ensure_future(rt.exec(1, ["sleep", MARKERS[0]], 60, 4096))
        for _ in range(100):
            if len(marker_pids()) == 2:
                break
            await asyncio.sleep(0.02)
        assert len(marker_pids()) == 2
        await rt.stop(1, 0.5)
        await asyncio.wait_for(exits.get(), 10)
        got = await asyncio.wait_for(running, 5)
        assert got.exit_code in (128 + 15, 128 + 9)
        assert marker_pids() == []

    try:
        run_async(scenario())
    finally:
        kill_markers()


def test_an_attempt_that_ends_while_an_exec_starts_never_gives_the_command_its_go(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt ended between the exec's check and its go (the wrapper spawned meanwhile): the
    command ran after the attempt, as the owner (without a cgroup, nothing ever killed it)."""
    import agent.runtime.process as process

    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=cgroup_setup("none"))

    async def scenario() -> None:
        rt, _exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"]))
        await wait_log(rt, 1, "up")
        spawn = asyncio.create_subprocess_exec

        async def spawn_then_end(*args: object, **kw: object) -> object:
            proc = await spawn(*args, **kw)  # type: ignore[arg-type]
            await rt.stop(1, 0.5)  # the attempt ends while the command waits for its go
            return proc

        monkeypatch.setattr(process.asyncio, "create_subprocess_exec", spawn_then_end)
        with pytest.raises(ExecError) as refused:
            await rt.exec(1, ["sh", "-c", f"exec sleep {MARKERS[0]}"], 30, 4096)
        assert refused.value.code == "not_running"
        await asyncio.sleep(0.1)
        assert marker_pids() == []

    try:
        run_async(scenario())
    finally:
        kill_markers()


@needs_root
@needs_mount_ns
def test_an_exec_cannot_ptrace_or_read_the_environ_of_its_attempts_processes(open_state: Path) -> None:
    """docs/jobs.md (brk59): the exec is a Landlock domain of its own, not the attempt's; the page's
    example ran ``py-spy dump --pid`` on the training process, which needs ptrace access."""

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", f"echo up; sleep {MARKERS[0]}"], owner="ex-alice", env={"K": "v"}))
        await wait_log(rt, 1, "up")
        if not rt._exec_contexts[1].scope:
            await rt.stop(1, 1)
            pytest.skip("no Landlock scopes on this kernel")
        for _ in range(100):
            if marker_pids():
                break
            await asyncio.sleep(0.02)
        assert len(marker_pids()) == 1 and a.uid is not None
        # found by its command line in the exec's /proc (pidns61: the attempt's PID namespace, its numbers)
        is_it = f"[ \"$(tr '\\0' ' ' <$d/cmdline)\" = 'sleep {MARKERS[0]} ' ]"
        find = f"for d in /proc/[0-9]*; do {is_it} && cat $d/environ; done"
        got = await rt.exec(1, ["sh", "-c", f"id -u; {find}"], 10, 4096)
        assert got.stdout.decode().split() == [str(a.uid)]  # the same owner, and yet refused
        assert b"Permission denied" in got.stderr, got
        await rt.stop(1, 1)

    run_async(scenario(), timeout=40)


@needs_root
def test_without_cgroups_the_command_cannot_kill_its_reaper_to_leave_a_daemon(open_state: Path) -> None:
    """The reaper of an exec without a cgroup (above) ran as the owner: the command killed it
    (``kill -9 $PPID``) and its daemon lived on past the attempt, found by nothing."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation(cgroup="off"))
        await rt.start(spec(1, ["sh", "-c", f"echo up; exec sleep {MARKERS[2]}"], owner="ex-alice"))
        await wait_log(rt, 1, "up")
        got = await rt.exec(
            1, ["sh", "-c", f"setsid sleep {MARKERS[0]} </dev/null >/dev/null 2>&1 & kill -9 $PPID"], 10, 4096
        )
        assert b"Operation not permitted" in got.stderr, got
        await rt.stop(1, 0.5)
        await asyncio.wait_for(exits.get(), 10)
        await asyncio.sleep(0.1)
        assert marker_pids() == []

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()


def test_an_exec_the_runtime_fails_unexpectedly_is_answered(state_dir: Path) -> None:
    """Only ``ExecError`` was answered: any other error of the runtime (an engine's error past the
    command's end, a pipe the host had no descriptor for) ended the exec's task silently, so the
    person waited the whole timeout for a 504 "the agent did not answer", and the server's pending
    exec held one of its connection's 16 slots."""
    from agent_testkit import FakeServer, make_agent, running

    from agent.protocol import Error, Exec, Hello

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)

            async def broken(*_args: object) -> None:
                raise OSError(24, "Too many open files")

            agent.runtime.exec = broken  # type: ignore[method-assign]
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(Exec(attempt_id=3, command=["true"], timeout_s=5, max_output=100))
                got = await server.expect(lambda m: isinstance(m, Error) and m.ref is not None)
                assert isinstance(got, Error) and got.code == "exec_failed" and "Too many open files" in got.message
            assert agent._execs == 0

    run_async(scenario(), timeout=30)
