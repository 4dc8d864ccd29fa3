"""pidns61: a PID namespace of each attempt's own (process runtime, root agent; docs/isolation.md).
``ps`` in an attempt lists its own processes, numbered from 1; a ``fairway exec`` command (one-shot
and ``-it``) joins that namespace and lists them, command lines included (iso61's private ``/proc``
had hidden them from it); another owner's attempt sees none of them; a stop, the exit code and the
grace signal are as before. Real processes, as root."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    PS,
    kill_markers,
    log_of,
    marker_pids,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    ps_lines,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.runtime.isolation import descendants

pytestmark = [pytest.mark.timeout(60), needs_root, needs_mount_ns]

SECRET_ARG = "--hf-token=pidns61-alices-token"  # noqa: S105 -- a test value


async def _running(rt: object, attempt_id: int, marker: str, root: int) -> list[int]:
    """The host pids of the attempt whose wrapper is ``root`` once ``sleep marker`` runs in it."""
    for _ in range(200):
        pids = descendants(root)
        if any(marker in Path(f"/proc/{p}/cmdline").read_text() for p in pids if Path(f"/proc/{p}").exists()):  # noqa: ASYNC240
            return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"sleep {marker} never ran in attempt {attempt_id}")


def test_an_attempt_lists_only_its_own_processes_numbered_from_one(open_state: Path) -> None:
    """``ps`` in an attempt: PID 1 is its wrapper (the namespace's init), its command and what it
    started follow; no host process, none of another owner's attempt (hers runs meanwhile)."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", f'sleep {MARKERS[0]}; : "$0"', SECRET_ARG], owner="pid-alice"))
        assert a.pid is not None
        alice = await _running(rt, 1, MARKERS[0], a.pid)
        init_env = "cat /proc/1/environ >/dev/null 2>&1 || echo init environ refused"
        # the background sleep listed once it runs sleep (forked, it shows the shell's command
        # line until its exec: a loaded box listed it then, test50)
        execd = (
            'until case "$(tr "\\0" " " </proc/$!/cmdline 2>/dev/null)" in "sleep "*) true;; *) false;; esac;'
            " do :; done"
        )
        script = f"sleep {MARKERS[1]} & echo me $$; {execd}; {PS}; {init_env}; kill $!"
        b = await rt.start(spec(2, ["sh", "-c", script], owner="pid-bob"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        seen = ps_lines(out)
        assert seen, out
        me = int(out.split("me ", 1)[1].split()[0])
        assert b.pid is not None and me != b.pid and me not in alice, out  # its own number, not the host's
        assert "attempt_init.py" in seen[1], seen  # its init: the wrapper (pid63: its file, not its source)
        assert "init environ refused" in out, out  # root's, not dumpable: the go it holds unreadable
        assert " -c sleep " in seen[me], seen
        assert any(f"sleep {MARKERS[1]}" == args for args in seen.values()), seen
        assert SECRET_ARG not in out and MARKERS[0] not in out, out  # nothing of alice's
        assert "pytest" not in out, out  # nothing of the host's
        assert set(seen) <= set(range(1, 40)), seen
        await rt.stop(1, 1)

    try:
        run_async(scenario())
    finally:
        kill_markers()


def test_an_exec_lists_the_attempts_processes_with_their_command_lines(open_state: Path) -> None:
    """iso61's ``/proc`` (``hidepid=invisible``) hid the attempt's processes from an exec (a Landlock
    domain of its own): ``ps`` in ``fairway exec`` showed nothing of the job. It joins the
    attempt's PID namespace now, as ``docker exec``; its environ stays unreadable (no ptrace across
    the domains), and another owner's exec sees none of the attempt."""

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        a = await rt.start(
            spec(1, ["sh", "-c", f'sleep {MARKERS[0]}; : "$0"', SECRET_ARG], owner="pid-alice", env={"K": "v"})
        )
        assert a.pid is not None
        await _running(rt, 1, MARKERS[0], a.pid)
        await rt.start(spec(2, ["sleep", MARKERS[1]], owner="pid-bob"))
        got = await rt.exec(1, ["sh", "-c", f"echo me $$; {PS}"], 10, 1 << 16)
        out = got.stdout.decode()
        assert got.exit_code == 0, got
        seen = ps_lines(out)
        me = int(out.split("me ", 1)[1].split()[0])
        assert me in seen and set(seen) <= set(range(1, 40)), seen  # the attempt's numbering
        (sleeper,) = [p for p, args in seen.items() if args == f"sleep {MARKERS[0]}"]
        assert any(SECRET_ARG in args for args in seen.values()), seen  # the attempt's command line
        assert "python" in seen[1], seen
        assert MARKERS[1] not in out, out  # bob's attempt: not in alice's namespace
        if rt._exec_contexts[1].scope:  # a Landlock domain of its own: its environ stays unreadable
            got = await rt.exec(1, ["cat", f"/proc/{sleeper}/environ"], 10, 4096)
            assert got.exit_code != 0 and b"Permission denied" in got.stderr, got
            got = await rt.exec(1, ["kill", "-TERM", str(sleeper)], 10, 4096)  # nor a signal to it
            assert got.exit_code != 0 and b"not permitted" in got.stderr, got
        # bob's exec in his own attempt: none of alice's
        got = await rt.exec(2, ["sh", "-c", PS], 10, 1 << 16)
        assert MARKERS[0] not in got.stdout.decode() and SECRET_ARG not in got.stdout.decode(), got
        assert f"sleep {MARKERS[1]}" in got.stdout.decode(), got
        await rt.stop(1, 1)
        await rt.stop(2, 1)

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()


def test_an_interactive_exec_lists_the_attempts_processes(open_state: Path) -> None:
    """``fairway exec -it ID -- bash`` then ``ps aux``: the attempt's processes are there."""

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", f'sleep {MARKERS[0]}; : "$0"', SECRET_ARG], owner="pid-alice"))
        assert a.pid is not None
        await _running(rt, 1, MARKERS[0], a.pid)
        session = await rt.exec_tty(1, ["sh", "-c", f"{PS}; exit 3"], 24, 200)
        out = b""
        while chunk := await asyncio.wait_for(session.read(), 10):
            out += chunk
        code = await asyncio.wait_for(session.proc.wait(), 10)
        session.finish()
        text = out.decode(errors="replace").replace("\r", "")
        assert any(SECRET_ARG in args for args in ps_lines(text).values()), text
        assert code == 3, text
        await rt.stop(1, 1)

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()


def test_a_stop_still_ends_every_process_and_the_grace_signal_reaches_the_command(open_state: Path) -> None:
    """The agent's SIGTERM reaches the command itself (not swallowed by the namespace's init), its
    exit code is the attempt's; what it left behind (a ``setsid`` daemon, an exec's) dies with it."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        script = (
            f"setsid sleep {MARKERS[1]} </dev/null >/dev/null 2>&1 & "
            f"trap 'echo got TERM; exit 7' TERM; echo up; sleep {MARKERS[0]} & wait"
        )
        a = await rt.start(spec(1, ["sh", "-c", script], owner="pid-alice"))
        assert a.pid is not None
        await wait_log(rt, 1, "up")
        await _running(rt, 1, MARKERS[1], a.pid)
        got = await rt.exec(1, ["sh", "-c", f"sleep {MARKERS[2]} </dev/null >/dev/null 2>&1 & echo bg"], 10, 4096)
        assert got.stdout == b"bg\n", got
        record = await rt.stop(1, 5)
        assert record is not None and record.exit_code == 7 and not record.killed, log_of(rt, 1)
        assert "got TERM" in log_of(rt, 1)
        await asyncio.wait_for(exits.get(), 10)
        await asyncio.sleep(0.1)
        assert marker_pids() == []

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()


def test_an_attempts_exit_code_and_a_signal_death_are_kept(open_state: Path) -> None:
    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", "echo $$; exit 42"], owner="pid-alice"))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 42, log_of(rt, 1)
        assert log_of(rt, 1).split()[0] == "2", log_of(rt, 1)  # the command: PID 2, after its init
        await rt.start(spec(2, ["sh", "-c", "kill -SEGV $$"], owner="pid-alice"))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 128 + 11, log_of(rt, 2)

    run_async(scenario())


def test_the_namespaces_init_reaps_orphans_and_passes_on_a_signal_sent_to_it(open_state: Path) -> None:
    """PID 1 of the attempt's namespace (its wrapper): an orphan that ends is reaped (no zombie
    left), and a signal sent to PID 1 from inside (a root workload's ``kill -USR1 1``: an owner's
    command may not signal root's init) reaches the command, once."""
    from agent.runtime.isolation import Isolation, IsolationConfig

    script = (
        "trap 'echo got USR1' USR1; (sh -c 'exit 0' &); sleep 0.3; "
        "for d in /proc/[0-9]*; do grep -q '^State:.*Z' $d/status 2>/dev/null && echo ZOMBIE ${d#/proc/}; done; "
        "kill -USR1 1; sleep 0.3; echo done"
    )

    async def scenario() -> None:
        rt, exits = runtime(open_state, Isolation(IsolationConfig(mode="agent", allow_root=True)))
        await rt.start(spec(1, ["sh", "-c", script], allow_root=True))
        done = await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 1)
        assert done.exit_code == 0, out
        assert "ZOMBIE" not in out and out.count("got USR1") == 1 and "done" in out, out

    run_async(scenario())
