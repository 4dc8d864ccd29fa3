"""iso61: attacks from one owner's attempt on another's, with a real root agent (``process``
runtime); docs/isolation.md. Each test failed before its fix."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from agent_testkit import host_scratch_dir, log_of, needs_root, owner_isolation, run_async, runtime, spec

from agent.runtime.isolation import descendants

SECRET_ARG = "--hf-token=iso61-alices-token-in-her-command-line"  # noqa: S105 -- a test value

# Bob's probe: every pid it is given, by its /proc entry; then what it sees of its own.
PROBE = r"""
for p in "$@"; do
    [ -e /proc/$p ] && echo "SEEN $p $(tr '\0' ' ' </proc/$p/cmdline 2>&1) $(head -c 80 /proc/$p/mountinfo)"
done
for d in /proc/[0-9]*; do
    u=$(awk '/^Uid:/ {print $2}' $d/status 2>/dev/null)
    [ -n "$u" ] && [ "$u" != "$(id -u)" ] && echo "OTHER ${d#/proc/} uid $u"
done
sleep 7 &
for _ in 1 2 3 4 5 6 7 8 9 10; do  # read once it has exec'd (empty or sh's own before)
    c=$(tr '\0' ' ' </proc/$!/cmdline); case "$c" in sleep*) break ;; esac; sleep 0.1
done
echo "own child: $c"; kill $!
grep -q MemTotal /proc/meminfo && echo "meminfo read"
echo probed
"""


@needs_root
def test_an_attempt_sees_no_process_of_another_attempt_in_proc(open_state: Path) -> None:
    """iso61: ``/proc/<pid>/cmdline`` is world-readable, and so are ``status``, ``mountinfo``,
    ``cgroup``, ``sched`` and ``limits``: bob's attempt read alice's command line (a token passed as
    an argument, ``--hf-token=…``, is common), and from her mount table which GPUs she held and the
    paths she works in. An attempt now gets a ``/proc`` of its own with ``hidepid=invisible``
    (Linux ≥ 5.8: a new proc instance, the host's untouched): other owners' processes, root's (the
    agent, the wrappers) and the owner's own outside the attempt (its Landlock domain) are not
    there; its own are, and the rest of ``/proc``."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", 'sleep 30; : "$0"', SECRET_ARG], owner="iso-alice"))
        assert a.pid is not None
        for _ in range(100):
            pids = descendants(a.pid)
            if any(SECRET_ARG in Path(f"/proc/{p}/cmdline").read_text() for p in pids):  # noqa: ASYNC240
                break
            await asyncio.sleep(0.05)
        targets = [str(a.pid), *map(str, pids)]
        await rt.start(spec(2, ["sh", "-c", PROBE, "probe", *targets], owner="iso-bob"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        assert "probed" in out and "meminfo read" in out and "own child: sleep 7" in out, out
        assert "SEEN" not in out and SECRET_ARG not in out, out
        # pidns61: PID 1 of its own PID namespace is its wrapper (root's), its own init, as a container's
        assert "OTHER" not in out.replace("OTHER 1 uid 0\n", ""), out
        await rt.stop(1, 1)

    run_async(scenario())


def test_a_private_proc_needs_linux_5_8_and_the_host_state_says_so() -> None:
    """Before Linux 5.8 the proc mounts of a PID namespace shared one superblock: a ``hidepid`` for
    one attempt would have hidden every process from the host's own ``/proc`` too."""
    from agent.runtime.isolation import Isolation, IsolationConfig, private_proc_problem

    assert private_proc_problem("5.4.0-150-generic") == "Linux 5.4.0-150-generic (needs 5.8: a proc mount of its own)"
    assert private_proc_problem("4.18.0-553.el8_10.x86_64").startswith("Linux 4.18.0")
    assert private_proc_problem("5.8.0") == private_proc_problem("6.18.44-fc-v1300") == ""
    isolation = Isolation(
        IsolationConfig(mode="agent", cgroup="off"), proc="Linux 5.4.0 (needs 5.8: a proc mount of its own)"
    )
    assert isolation.status()["processes"] == "shared (Linux 5.4.0 (needs 5.8: a proc mount of its own))"
    assert Isolation(IsolationConfig(mode="agent", cgroup="off"), proc="").status()["processes"] == "private"


@needs_root
def test_attempts_do_not_share_the_hosts_run_lock(open_state: Path) -> None:
    """iso61: ``/run/lock`` (``/var/lock``) is world-writable on Debian and Ubuntu (mode 1777), and
    was the host's in every attempt: a file alice's attempt left there (0644 with the commands'
    umask 022) was read by bob's, and stayed on the host after both ended. Where the host's is
    world-writable, an attempt gets a tmpfs of its own there, as on ``/tmp``."""
    lock = Path("/run/lock")
    if not lock.is_dir() or not lock.stat().st_mode & 0o002:
        pytest.skip("the host's /run/lock is not world-writable: nothing shared there")
    name = f"iso61-{os.getpid()}"

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", f"echo alices > /run/lock/{name} && echo wrote"], owner="iso-alice"))
        assert (await asyncio.wait_for(exits.get(), 10)).exit_code == 0, log_of(rt, 1)
        assert "wrote" in log_of(rt, 1)
        await rt.start(spec(2, ["sh", "-c", f"cat /run/lock/{name}; echo probed"], owner="iso-bob"))
        assert (await asyncio.wait_for(exits.get(), 10)).attempt_id == 2
        assert "alices" not in log_of(rt, 2) and "probed" in log_of(rt, 2), log_of(rt, 2)

    try:
        run_async(scenario())
        assert not (lock / name).exists()  # nothing left on the host
    finally:
        (lock / name).unlink(missing_ok=True)


@needs_root
def test_an_attempts_own_home_is_removed_when_it_ends(open_state: Path) -> None:
    """iso61: an identity without a home gets ``<state>/attempts/<id>.d/home`` (mode 0700), where
    caches land (``~/.cache/huggingface``: GBs) and stayed on the agent's disk, in its state dir,
    until the record was forgotten (a day, a week unacknowledged), as the temporary files of the
    fallback ``TMPDIR`` did not. Nothing but the attempt uses it: it goes when the attempt ends."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        script = 'mkdir -p "$HOME/.cache" && echo cached > "$HOME/.cache/model" && echo "home $HOME"'
        await rt.start(spec(1, ["sh", "-c", script], owner="iso-alice"))
        assert (await asyncio.wait_for(exits.get(), 10)).exit_code == 0, log_of(rt, 1)
        home = rt.store.run_dir(1) / "home"
        assert f"home {home}" in log_of(rt, 1)
        assert not home.exists()  # noqa: ASYNC240
        assert rt.store.run_dir(1).is_dir()  # noqa: ASYNC240 -- the rest of the run dir goes with the record

    run_async(scenario())


@needs_root
def test_a_mount_is_staged_as_its_owner_reaches_it_and_unstaged_without_a_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The docker runtime's staging of a mount (``isolation.stage_dirs_as``, iso61): the directory
    the owner reaches, bound at a root-only path; a bind the agent cannot make fails naming the
    mount's path, and leaves nothing."""
    import agent.runtime.isolation as isolation_module
    from agent.runtime.isolation import stage_dirs_as, unstage

    alice = owner_isolation().resolve("iso-alice", None, None, (), cluster_allows_root=False)
    base = host_scratch_dir("fw-iso61-")  # others reach it (pytest's tmp_path lies under a 0700 directory)
    try:
        shared = base / "shared"
        shared.mkdir()
        (shared / "data").write_text("alice's data\n")
        staging = base / "state" / "mounts" / "7"
        (staged,) = stage_dirs_as(alice, [str(shared)], staging)
        assert staged == staging / "0" and (staged / "data").read_text() == "alice's data\n"
        assert str(staged) in Path("/proc/self/mountinfo").read_text()
        unstage(staging)
        assert not staging.exists() and (shared / "data").exists()
        assert str(staged) not in Path("/proc/self/mountinfo").read_text()

        def refused(name: str, *args: object) -> None:
            raise OSError(1, "Operation not permitted")

        monkeypatch.setattr(isolation_module, "_libc_mount_call", refused)
        with pytest.raises(OSError) as info:
            stage_dirs_as(alice, [str(shared)], staging)
        assert info.value.filename == str(shared)
        assert info.value.strerror == "cannot bind it for the engine: Operation not permitted"
        assert not staging.exists()
    finally:
        monkeypatch.undo()
        unstage(base / "state" / "mounts" / "7")
        shutil.rmtree(base, ignore_errors=True)
