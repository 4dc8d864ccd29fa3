"""iso48: what a workload of the process runtime sees of the host, the agent and other workloads
in its mount table (``/proc/self/mountinfo``) and in a ``fairway exec`` wrapper's command line
(docs/isolation.md, "What an attempt sees of the host's mounts"). Real processes, as root."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    host_scratch_dir,
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.runtime import process

pytestmark = [pytest.mark.timeout(60), needs_root, needs_mount_ns]

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:  # fmt: skip
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target}: {os.strerror(e)}")


@pytest.fixture
def engine_mounts() -> Iterator[Path]:
    """What a container engine leaves in the host's mount table while another owner's container
    runs: a tmpfs (its ``userdata/shm``) under root's 0700 storage directory, and a network
    namespace's handle (``nsfs``) bound under a 0755 ``netns/``, as podman's ``/run/netns``; and
    two GPUs' nodes (empty 0666 files, as the fake backend's) outside the private /tmp."""
    base = host_scratch_dir("fw-iso48-")
    storage = base / "storage" / "overlay-containers" / "c0ffee" / "userdata" / "shm"
    storage.mkdir(parents=True)
    os.chmod(base / "storage", 0o700)
    (base / "netns").mkdir()
    (base / "netns" / "netns-c0ffee").touch()
    (base / "dev").mkdir()
    for i in (0, 1):
        (base / "dev" / f"nvidia{i}").touch()
        os.chmod(base / "dev" / f"nvidia{i}", 0o666)  # noqa: S103 -- as the driver installs them
    made = [str(storage), str(base / "netns" / "netns-c0ffee")]
    try:
        _mount("shm", made[0], "tmpfs", 0, "size=64k")
        _mount("/proc/self/ns/net", made[1], None, 0x1000)  # MS_BIND
        yield base
    finally:
        for point in made:
            _libc.umount2(point.encode(), 2)  # MNT_DETACH
        shutil.rmtree(base, ignore_errors=True)


def test_an_attempts_mount_table_names_no_mount_it_cannot_reach_nor_the_agents_files(
    open_state: Path, engine_mounts: Path
) -> None:
    """iso48: an attempt's mount namespace is a copy of the host's, and its ``mountinfo`` listed
    every mount of the host: another owner's container's ``shm`` under the engine's 0700 storage (its
    container id), that container's network namespace handle, and, as the source of the stand-in
    bound over the host's other GPUs, a file in the agent's state directory. Now a mount whose mount
    point its owner cannot reach, and every namespace handle, are detached from the attempt's
    namespace before its command runs, and the stand-in is a file of a tmpfs of its own: the table
    names none of them; what its owner reaches on the host is still there."""
    nodes = {i: str(engine_mounts / "dev" / f"nvidia{i}") for i in (0, 1)}

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation(), gpu_nodes=nodes)
        await rt.start(spec(1, ["sh", "-c", "cat /proc/self/mountinfo; cat "
                                + nodes[1] + " 2>&1; echo probed"], owner="iso-alice"))  # fmt: skip
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 1)
        assert done.exit_code == 0 and "probed" in out, out
        table = [line for line in out.splitlines() if " - " in line]
        assert table and any(line.split()[4] == "/" for line in table), out  # the host's root, still there
        assert "c0ffee" not in out, out  # neither the container's shm nor its network namespace
        assert not [line for line in table if " - nsfs " in line], out
        assert str(engine_mounts / "storage") not in out, out
        hidden = [line for line in table if line.split()[4] == nodes[1]]
        assert len(hidden) == 1, out  # GPU 1's node: covered by the stand-in ...
        assert str(open_state) not in hidden[0] and "gpu-stand-in" not in hidden[0], hidden  # ... named nowhere
        assert f"{nodes[1]}: Permission denied" in out, out  # and still refused

    run_async(scenario())


def test_a_fairway_exec_wrappers_command_line_holds_no_source(
    open_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iso48: the exec wrapper ran as ``python -I -c <its whole source> …``: while it waited for
    its go, and in the attempt's PID namespace from its fork to the command's exec, its command line
    (world-readable ``/proc/<pid>/cmdline``) was pages of the agent's code, to every user of the
    host and to the workload. Now it is its file's path, as the attempt's wrapper's (pid63)."""
    seen: list[bytes] = []
    hand_over = process._hand_over  # noqa: SLF001 -- the moment the wrapper waits for its go

    def looking(fd: int, payload: bytes) -> None:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                    if MARKERS[1].encode() in cmdline and b"pytest" not in cmdline:
                        seen.append(cmdline)
        hand_over(fd, payload)

    monkeypatch.setattr(process, "_hand_over", looking)

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", f"echo up; sleep {MARKERS[0]}"], owner="iso-alice"))
        await wait_log(rt, 1, "up")
        got = await rt.exec(1, ["echo", MARKERS[1]], 10, 4096)
        assert got.exit_code == 0 and got.stdout == f"{MARKERS[1]}\n".encode(), got
        await rt.stop(1, 1)

    run_async(scenario())
    assert seen, "the exec wrapper was not found"
    for cmdline in seen:
        words = cmdline.split(b"\0")
        assert b"import " not in cmdline and b"-c" not in words, cmdline
        assert words[1:3] == [b"-I", str(process.EXEC_WRAPPER).encode()], words
        assert len(cmdline) < 400, cmdline
