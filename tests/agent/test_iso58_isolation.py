"""iso58: attacks from a workload's code on a real agent (root, ``process`` runtime, fake GPUs) and on
the docker runtime (podman); docs/isolation.md. Each test failed before its fix."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_testkit import REPO_ROOT, FakeServer, bobs_home, kill_leftovers, needs_root, owner_isolation, run_async

from agent.gpu.fake import fake_gpu_uuid
from agent.protocol import AttemptEvent, Hello, Owner, Start
from agent.runtime.base import AttemptSpec, StartError

TOKEN = "iso58-host-token-" + "k" * 24  # noqa: S105 -- a test token
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # useradd, groupadd


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A scratch directory outside /tmp (attempts of a root agent get a private /tmp), mode 0755,
    holding the agent's state dir ``state``."""
    base = Path(tempfile.mkdtemp(prefix="fw-iso58-", dir="/var/lib"))
    os.chmod(base, 0o755)  # noqa: S103 -- as /var/lib: others may traverse
    try:
        yield base
    finally:
        kill_leftovers(base / "state")
        shutil.rmtree(base, ignore_errors=True)


def agent_argv(url: str, state: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agent", "run", "--server", url, "--host-name", "h1", "--gpus", "2",
            "--gpu-backend", "fake", "--runtime", "process", "--state-dir", str(state), "--heartbeat", "0.5",
            *extra]  # fmt: skip


# --- the host token on the agent's command line -------------------------------------------------------


def test_an_agent_given_its_token_on_the_command_line_refuses_to_run(tmp_path: Path) -> None:
    """iso58: ``fairway-agent run --token T`` (agent/README's own example) put the host token in the
    agent's command line, which every process of the host reads (``/proc/<pid>/cmdline`` is
    world-readable, Landlock's ptrace scope does not cover it): an owner's attempt printed it, and
    with it connected as the host (its attempts, every other owner's secrets in their ``start``
    messages). The agent now refuses it, saying where the token goes, and never shows it."""
    done = subprocess.run(  # noqa: S603 -- our own agent
        agent_argv("ws://127.0.0.1:9/", tmp_path / "state", "--token", TOKEN),
        cwd=REPO_ROOT, env={"PATH": SBIN_PATH}, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--token" in done.stderr and "FAIRWAY_TOKEN" in done.stderr and "/proc/<pid>/cmdline" in done.stderr
    assert TOKEN not in done.stderr + done.stdout


SCAN = r"""
import glob, sys
token = sys.argv[1][::-1]  # not itself in this command line
found = []
for path in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"):
    try:
        if token in open(path, "rb").read().decode(errors="replace"):
            found.append(path)
    except OSError:
        pass
print("found", found, flush=True)
"""


@needs_root
def test_no_attempt_finds_the_host_token_in_any_process(host_dir: Path) -> None:
    """The token given as the agent takes it (FAIRWAY_TOKEN): an owner's attempt that reads every
    process's command line and environment on the host finds it nowhere."""
    scan = host_dir / "scan.py"
    scan.write_text(SCAN)
    scan.chmod(0o755)

    async def scenario() -> None:
        async with FakeServer(heartbeat_s=0.5) as server:
            env = {"PATH": SBIN_PATH, "FAIRWAY_TOKEN": TOKEN,
                   "FAIRWAY_ISOLATION": "{uid_range: [62000, 62099], account_prefix: fwt-, nss: false}"}  # fmt: skip
            agent = subprocess.Popen(  # noqa: S603, ASYNC220 -- our own agent
                agent_argv(server.url, host_dir / "state"), cwd=REPO_ROOT, env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                await server.expect(lambda m: isinstance(m, Hello), 20)
                await server.send(
                    Start(attempt_id=1, workload_id=1001, image="", command=["python3", str(scan), TOKEN[::-1]],
                          env={}, gpu_uuids=[fake_gpu_uuid("h1", 0)], gpu_indices=[0], grace_s=1,
                          owner=Owner(name="iso-alice"))
                )  # fmt: skip
                ended = await server.expect(
                    lambda m: isinstance(m, AttemptEvent) and m.state in ("exited", "failed_to_start"), 20
                )
                assert isinstance(ended, AttemptEvent) and ended.exit_code == 0, ended
                log = (host_dir / "state" / "attempts" / "1.log").read_text()  # noqa: ASYNC240
                assert "found []" in log, log
            finally:
                agent.send_signal(signal.SIGTERM)
                await asyncio.to_thread(agent.wait, 10)

    run_async(scenario(), timeout=60)


# --- the working directory entered as root --------------------------------------------------------------


@needs_root
def test_an_attempt_enters_its_working_directory_as_its_owner(host_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """iso58: the process runtime checks that the owner can enter its working directory (the first
    mount), then its wrapper entered it as root: a mount path its owner can change (``/scratch/{user}``
    in a world-writable ``/scratch``) swapped for a symlink between the check and the start put the
    command inside a directory under another owner's 0700 home, whose files (mode 0644) it then read
    by relative paths. The command now enters it again as its owner, after dropping root: the swap
    (the check passed here, as a lost race) leaves it outside, exit 126, saying why."""
    from agent.protocol import Mount
    from agent.runtime import process

    isolation, bob, home = bobs_home(host_dir)
    scratch = host_dir / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)  # noqa: S103 -- a shared scratch space
    (scratch / "iso-alice").symlink_to(home / "notes")  # swapped in after the agent's check
    monkeypatch.setattr(process, "access_problem", lambda *a: None)  # the check passed: a race lost
    mount = Mount(name="scratch", host_path=str(scratch / "iso-alice"), container_path="/scratch", read_only=False)

    async def scenario() -> None:
        rt = process.ProcessRuntime(host_dir / "state", cwd=REPO_ROOT, isolation=isolation)
        exits: asyncio.Queue[object] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.start(
            AttemptSpec(attempt_id=1, workload_id=501, command=["cat", "plan.txt"], gpu_indices=[], gpu_uuids=[],
                        grace_s=1, owner="iso-alice", mounts=(mount,))
        )  # fmt: skip
        done = await asyncio.wait_for(exits.get(), 10)
        log = rt.read_log(1, 1 << 16)[0].decode()
        assert "bob's plan" not in log, log
        assert getattr(done, "exit_code", None) == 126, (done, log)
        assert f"fairway: cannot run /usr/bin/cat: user fwt-iso-alice cannot enter {home / 'notes'}" in log, log

    run_async(scenario())


# --- the log, between two passes of the cap --------------------------------------------------------------

FLOOD = "head -c 40000000 /dev/zero | tr '\\0' x; echo; echo the-end; sleep 2"  # 40 MB, then still running


def test_a_log_stays_near_its_cap_between_two_passes_of_the_agent(state_dir: Path) -> None:
    """iso58: the cap (``log_max_bytes``) ran every 5 s; between two passes the wrapper (root) copied
    whatever the workload printed into the log: 40 MB of a 1 MiB cap here, some GB a pass on a fast
    disk, per attempt, written by root, so past the blocks a file system reserves for root, which
    keep the agent's records and exit files writable when owners fill the disk. The wrapper now holds
    the log to the cap as it copies (the same rule as the agent's pass: past the cap, all but the
    last half of it dropped); here the agent makes no pass at all."""
    from agent.runtime.isolation import CgroupSetup, Isolation, IsolationConfig
    from agent.runtime.process import ProcessRuntime

    cap = 1 << 20
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none"))

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation, log_max_bytes=cap)
        exits: asyncio.Queue[object] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        rt._cap_log = lambda attempt_id: None  # type: ignore[method-assign]  # no pass of the agent's
        await rt.start(AttemptSpec(attempt_id=1, workload_id=501, command=["sh", "-c", FLOOD], gpu_indices=[],
                                   gpu_uuids=[], grace_s=1))  # fmt: skip
        peak = 0
        while exits.empty():
            with contextlib.suppress(FileNotFoundError):
                peak = max(peak, rt.store.log_path(1).stat().st_blocks * 512)  # noqa: ASYNC240
            await asyncio.sleep(0.02)
        assert peak <= 2 * cap, f"{peak} bytes of log on disk, the cap is {cap}"
        tail, offset = rt.read_log(1, 1 << 20)
        assert tail.endswith(b"\nthe-end\n") and offset >= 40_000_000 - (1 << 20)  # the oldest dropped

    run_async(scenario())


# --- the lock of account creation -------------------------------------------------------------------------

HOLD = r"""
import fcntl, os, sys, time
lock, link, target = sys.argv[1:4]
os.symlink(target, link)  # where the agent, as root, would create a file
f = open(lock, "a")  # a lock file of this attempt's owner, held
fcntl.flock(f, fcntl.LOCK_EX)
print("holding", flush=True)
time.sleep(60)
"""


@needs_root
def test_an_attempt_can_neither_hold_nor_redirect_the_account_lock(
    host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iso58: the agents of a host serialize the making of dedicated accounts with a lock file in
    ``/run/lock``, world-writable (1777) on Debian, which the agent opened as root (``open("a")``,
    symlinks followed) on every start of a dedicated account. An attempt (``/run`` is the host's)
    that made the file first (after a boot) and held ``flock`` on it stopped every such start of
    the host, any owner's, while it ran; where the kernel follows symlinks in sticky directories
    (``fs.protected_symlinks=0``, as here) a symlink there made root create a file wherever it
    named (``/etc/nologin`` ends every non-root login). The lock is now in a directory only root
    writes (``/run``), opened without following a symlink and used only as root's regular file:
    else account making goes on unlocked, never blocked by it. Here its directory is made
    world-writable, as ``/run/lock``, to plant both."""
    from agent.runtime import isolation as iso
    from agent.runtime.process import ProcessRuntime

    parent = Path(iso.ACCOUNT_LOCK_FILE).parent.stat()
    assert parent.st_uid == 0 and not parent.st_mode & 0o022, "the lock's directory must be root's alone"
    sticky = host_dir / "lock"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # noqa: S103 -- as /run/lock
    held, link, target = sticky / "held.lock", sticky / "link.lock", host_dir / "made-by-root"
    hold = host_dir / "hold.py"
    hold.write_text(HOLD)
    hold.chmod(0o755)
    isolation = owner_isolation()

    async def scenario() -> None:
        rt = ProcessRuntime(host_dir / "state", cwd=REPO_ROOT, isolation=isolation)
        monkeypatch.setattr(iso, "ACCOUNT_LOCK_FILE", host_dir / "first.lock")  # the planted ones come later
        await rt.start(AttemptSpec(attempt_id=1, workload_id=501, command=["python3", str(hold), str(held),
                                   str(link), str(target)], gpu_indices=[], gpu_uuids=[], grace_s=1,
                                   owner="iso-alice"))  # fmt: skip
        try:
            for _ in range(250):
                if "holding" in rt.read_log(1, 100)[0].decode():
                    break
                await asyncio.sleep(0.02)
            assert "holding" in rt.read_log(1, 100)[0].decode(), rt.read_log(1, 1000)
            for attempt_id, lock in ((2, link), (3, held)):
                monkeypatch.setattr(iso, "ACCOUNT_LOCK_FILE", lock)
                start = rt.start(AttemptSpec(attempt_id=attempt_id, workload_id=502, command=["true"], gpu_indices=[],
                                             gpu_uuids=[], grace_s=1, owner="iso-carol"))  # fmt: skip
                assert (await asyncio.wait_for(start, 10)).state == "running"
                assert not target.exists(), "root created a file through the attempt's symlink"
        finally:
            await rt.stop(1, 1)

    run_async(scenario(), timeout=60)


@needs_root
def test_the_paths_kept_in_a_private_tmp_are_opened_as_the_attempts_owner(
    host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iso58: the paths of an attempt under the host's ``/tmp`` (its program, directories, mounts)
    are resolved by the agent, then opened by the wrapper, as root, to be bound into the private
    ``/tmp``; a component swapped for a symlink in between (by a login of the owner's on the host)
    bound a directory under another owner's 0700 home there, readable by its mode. The wrapper now
    opens them with the owner's file-system identity: the start fails, nothing bound. (The swap is
    simulated: the paths are handed over unresolved.)"""
    from agent.runtime import process

    isolation, bob, home = bobs_home(host_dir)
    scratch = Path(tempfile.mkdtemp(prefix="fw-iso58-", dir="/tmp"))
    os.chmod(scratch, 0o1777)  # noqa: S103 -- as /tmp
    (scratch / "d").symlink_to(home / "notes")
    monkeypatch.setattr(process, "private_tmp_keep", lambda paths, roots: [str(scratch / "d")])

    async def scenario() -> None:
        rt = process.ProcessRuntime(host_dir / "state", cwd=REPO_ROOT, isolation=isolation)
        exits: asyncio.Queue[object] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        spec = AttemptSpec(attempt_id=1, workload_id=501, command=["cat", f"{scratch}/d/plan.txt"], gpu_indices=[],
                           gpu_uuids=[], grace_s=1, owner="iso-alice", mounts=())  # fmt: skip
        try:
            record = await rt.start(spec)
        except StartError as exc:
            assert "cannot make the private /tmp, /var/tmp and /dev/shm" in str(exc), exc
            assert "Permission denied" in str(exc), exc
        else:
            await asyncio.wait_for(exits.get(), 10)
            log = rt.read_log(1, 1 << 16)[0].decode()
            raise AssertionError(f"started ({record.state}); its log: {log!r}")

    try:
        run_async(scenario())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
