"""pid63: the process runtime's isolation leftovers (docs/isolation.md). PID 1 of an attempt's PID
namespace shows a short command line (its whole Python source before); the ``hidepid`` fallback
(no PID namespace) hides other users' processes; what ``/proc/net/unix`` shows an attempt (another
attempt's cgroup is not in its view since iso46); a GPU's device opened in an attempt and handed out
of it does not outlive it. Real processes, as root."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    PS,
    host_scratch_dir,
    kill_markers,
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    patch_attempt_init,
    ps_lines,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.runtime import process
from agent.runtime.isolation import descendants
from tests.agent.device_holders import holders as _holders

pytestmark = [pytest.mark.timeout(60), needs_root, needs_mount_ns]

SECRET_ARG = "--hf-token=pid63-alices-token"  # noqa: S105 -- a test value


# --- 1: PID 1's command line --------------------------------------------------------------------------


def test_pid_1_of_an_attempt_shows_a_short_command_line(open_state: Path) -> None:
    """``ps`` in an attempt: PID 1, the wrapper, was ``python -I -c <its whole source>`` (pages of
    it in ``ps aux``). Now the wrapper's file, the attempt's exit file and the command, as
    ``docker-init -- COMMAND``; nothing of the agent's configuration, nor the go it holds."""
    script = (
        'printf "LEN %s\\n" "$(wc -c </proc/1/cmdline)"; '
        'printf "CMDLINE %s\\n" "$(tr "\\0\\n" "  " </proc/1/cmdline)"; '
        'printf "ARGS %s\\n" "$(ps -o args= -p 1)"'
    )

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", script, "probe-arg"], owner="pid-alice"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 1)
        assert done.exit_code == 0, out
        said = {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines()}
        size, cmdline = int(said["LEN"]), said["CMDLINE"]
        assert size < len(script) + 400, out  # the command's own, and a few paths (the source: 15 kB)
        assert "import " not in cmdline and "libc" not in cmdline, cmdline  # no source
        words = cmdline.split()
        assert words[1:3] == ["-I", str(process.ATTEMPT_INIT)], cmdline
        assert words[3] == str(rt.store.exit_path(1)) and words[4] == "--", cmdline
        assert words[5].endswith("/sh") and words[6] == "-c" and words[-1] == "probe-arg", cmdline  # the command
        assert said["ARGS"] == cmdline.strip(), out  # as ps shows it

    run_async(scenario())


# --- 2: the hidepid fallback --------------------------------------------------------------------------

NEWPID = 'check(libc.unshare(0x20000000), "unshare(CLONE_NEWPID)")'


async def _running(attempt_id: int, marker: str, root: int) -> list[int]:
    """The host pids of the attempt whose wrapper is ``root`` once ``sleep marker`` runs in it."""
    for _ in range(200):
        pids = descendants(root)
        if any(marker in Path(f"/proc/{p}/cmdline").read_text() for p in pids if Path(f"/proc/{p}").exists()):  # noqa: ASYNC240
            return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"sleep {marker} never ran in attempt {attempt_id}")


def test_without_a_pid_namespace_an_attempt_sees_no_process_of_another_user(
    open_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where ``unshare(CLONE_NEWPID)`` is refused (forced here), the attempt's ``/proc`` is iso61's
    (``hidepid=invisible``, the host's numbering): its log says so, it sees its own processes by
    their host pids, and none of another owner's attempt (running meanwhile), nor root's (the
    agent, the wrappers, the host's init)."""
    patch_attempt_init(monkeypatch, tmp_path, NEWPID, 'check(-1, "unshare(CLONE_NEWPID)")')

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", f'sleep {MARKERS[0]}; : "$0"', SECRET_ARG], owner="pid-alice"))
        assert a.pid is not None
        alice = await _running(1, MARKERS[0], a.pid)
        b = await rt.start(spec(2, ["sh", "-c", f"echo me $$; {PS}"], owner="pid-bob"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        assert "fairway: no PID namespace of the attempt's own" in out, out  # the fallback was taken
        seen = ps_lines(out)
        me = int(out.split("me ", 1)[1].split()[0])
        assert me in seen and me > 1, seen  # its own shell, by its host pid (no namespace of its own)
        assert not set(seen) & {*alice, a.pid}, seen  # nothing of alice's attempt
        assert SECRET_ARG not in out and MARKERS[0] not in out, out
        assert not set(seen) & {1, os.getpid(), b.pid}, seen  # root's: the host's init, the agent, its wrapper
        assert "pytest" not in out, out
        await rt.stop(1, 1)

    try:
        run_async(scenario())
    finally:
        kill_markers()


# --- 4: a GPU's device passed out of an attempt -------------------------------------------------------

# GPU 0's node, opened in attempt 1 (its own GPU), handed over a pathname socket (Landlock scopes
# abstract ones only; a file in a directory its owner may write) to attempt 2 of the same owner,
# given GPU 1 only: the device filter checks opens, not descriptors.
SEND = """
import os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(250):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[2])
        break
    except OSError:
        time.sleep(0.02)
socket.send_fds(s, [b"gpu"], [fd])
print("sent", flush=True)
while len(sys.argv) > 3 and not os.path.exists(sys.argv[3]):  # until told to end
    time.sleep(0.02)
"""
RECEIVE = """
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
conn, _ = s.accept()
msg, fds, _flags, _addr = socket.recv_fds(conn, 16, 1)
print("got", msg.decode(), len(fds), flush=True)
time.sleep(60)
"""


@pytest.fixture
def gpu_dir() -> Iterator[Path]:
    """Two GPUs' nodes under ``dev/`` (character devices that open without a driver: /dev/full's
    and /dev/zero's numbers, mode 0666 as the driver's) and ``shared/`` (1777, as a shared scratch
    directory), outside the private /tmp."""
    base = host_scratch_dir("fw-pid63-")
    (base / "dev").mkdir(mode=0o755)
    for i, (major, minor) in enumerate(((1, 7), (1, 5))):
        os.mknod(base / "dev" / f"nvidia{i}", 0o20666, os.makedev(major, minor))
        os.chmod(base / "dev" / f"nvidia{i}", 0o666)  # noqa: S103 -- as the driver installs them
    (base / "shared").mkdir()
    os.chmod(base / "shared", 0o1777)  # noqa: S103 -- as /scratch
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_gpu_device_passed_out_of_an_attempt_does_not_outlive_it(
    open_state: Path, gpu_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """iso58's open gap: attempt 1 opens its GPU's node and passes the descriptor to attempt 2 of
    the same owner (given another GPU) over a pathname socket; when attempt 1 ends, its GPU goes to
    another workload, but attempt 2 still held it. Now no process of the owner holds it once the
    attempt's end is reported: the agent kills each one that does outside an attempt given it."""
    nodes = {i: str(gpu_dir / "dev" / f"nvidia{i}") for i in (0, 1)}
    sock = str(gpu_dir / "shared" / "pass.sock")
    rdev = os.stat(nodes[0]).st_rdev

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation(), gpu_nodes=nodes)
        two = replace(spec(2, ["python3", "-c", RECEIVE, sock], owner="pid-alice"), gpu_indices=[1], gpu_uuids=["G1"])
        b = await rt.start(two)
        await rt.start(spec(1, ["python3", "-c", SEND, nodes[0], sock], owner="pid-alice"))
        await wait_log(rt, 2, "got gpu 1", within=10)
        done = await asyncio.wait_for(exits.get(), 15)
        assert done.attempt_id == 1 and done.exit_code == 0 and "sent" in log_of(rt, 1), log_of(rt, 1)
        assert b.uid is not None
        assert _holders(rdev, b.uid) == [], "a process of the owner still holds the ended attempt's GPU"
        done = await asyncio.wait_for(exits.get(), 10)  # the holder was attempt 2's command
        assert done.attempt_id == 2 and done.exit_code == 128 + 9, log_of(rt, 2)

    held = os.open(nodes[0], os.O_RDONLY)  # root's (as NVML's in the agent, a host daemon's): kept
    try:
        run_async(scenario(), timeout=40)
        assert os.fstat(held).st_rdev == rdev
    finally:
        os.close(held)
    assert "held its GPU's device 1:7 past its end" in caplog.text, caplog.text


# --- 3: what an attempt still sees of another: /proc/net/unix, the cgroup tree -------------------------

LISTEN = """
import socket, time
s = socket.socket(socket.AF_UNIX)
s.bind("\\0pid63-alices-abstract")
s.listen()
print("listening", flush=True)
time.sleep(60)
"""
CONNECT = """
import socket
try:
    socket.socket(socket.AF_UNIX).connect("\\0pid63-alices-abstract")
    print("CONNECT ok")
except OSError as e:
    print("CONNECT", e.errno)
"""


def test_an_attempt_lists_another_attempts_socket_name_but_reaches_neither_it_nor_its_cgroup(
    open_state: Path,
) -> None:
    """docs/isolation.md, "What the private /proc cannot hide": bob's attempt lists alice's
    abstract socket in ``/proc/net/unix`` (the host's network namespace, on purpose) but cannot
    connect to it (where the Landlock scope is had). Her attempt's cgroup (its host path) is not in
    bob's view at all (iso46: his ``/sys/fs/cgroup`` is his own cgroup; it read her counters and her
    ``cgroup.procs`` before), so he writes nothing of it either (her attempt runs on)."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["python3", "-c", LISTEN], owner="pid-alice"))
        await wait_log(rt, 1, "listening")
        cg = a.cgroup
        probe = 'grep -c "@pid63-alices-abstract" /proc/net/unix | sed "s/^/NAMES /"; python3 -c "$0"; ' + (
            f'cat {cg}/cgroup.procs >/dev/null 2>&1 || echo "PROCS unread"; '
            f'head -1 {cg}/cpu.stat >/dev/null 2>&1 || echo "COUNTERS unread"; '
            f'(echo 1 >{cg}/cgroup.kill) 2>/dev/null || echo "KILL refused"; '
            f'(echo $$ >{cg}/cgroup.procs) 2>/dev/null || echo "JOIN refused"'
            if cg
            else ""
        )
        await rt.start(spec(2, ["sh", "-c", probe, CONNECT], owner="pid-bob"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        said = {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines()}
        assert said["NAMES"] == "1", out  # the name: visible
        if owner_isolation().status()["abstract_sockets"] == "private":
            assert said["CONNECT"] == "1", out  # EPERM: the Landlock scope
        if cg:
            assert said["PROCS"] == "unread" and said["COUNTERS"] == "unread", out
            assert said["KILL"] == "refused" and said["JOIN"] == "refused", out
        assert "listening" in log_of(rt, 1) and 1 in rt._records and rt._records[1].state == "running"
        await rt.stop(1, 1)

    run_async(scenario())


def test_a_gpu_device_passed_out_of_an_attempt_that_ended_while_the_agent_was_away_is_reclaimed(
    open_state: Path, gpu_dir: Path
) -> None:
    """The same, for an attempt that ends while no agent watches it: the next agent's recovery
    sweeps its GPUs before it reports the end."""
    nodes = {i: str(gpu_dir / "dev" / f"nvidia{i}") for i in (0, 1)}
    sock, go = str(gpu_dir / "shared" / "pass.sock"), gpu_dir / "shared" / "end"
    rdev = os.stat(nodes[0]).st_rdev

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation(), gpu_nodes=nodes)
        two = replace(spec(2, ["python3", "-c", RECEIVE, sock], owner="pid-alice"), gpu_indices=[1], gpu_uuids=["G1"])
        b = await rt.start(two)
        a = await rt.start(spec(1, ["python3", "-c", SEND, nodes[0], sock, str(go)], owner="pid-alice"))
        await wait_log(rt, 2, "got gpu 1", within=10)
        await rt.close()  # the agent goes away; its attempts run on
        go.touch()
        for _ in range(500):
            if a.pid is None or process.proc_start_time(a.pid) is None:  # gone, or a zombie (no agent waits)
                break
            await asyncio.sleep(0.02)
        assert a.pid is not None and process.proc_start_time(a.pid) is None, "attempt 1 never ended"
        assert b.uid is not None and _holders(rdev, b.uid), "attempt 2 should hold GPU 0 until the sweep"
        again, _ = runtime(open_state, owner_isolation(), gpu_nodes=nodes)
        await again.recover()
        assert again._records[1].state == "exited", again._records[1]
        assert _holders(rdev, b.uid) == [], "a process of the owner still holds the ended attempt's GPU"
        await again.stop(2, 1)

    run_async(scenario(), timeout=40)
