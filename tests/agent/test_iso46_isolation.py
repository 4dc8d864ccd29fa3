"""iso46: a cgroup namespace per attempt of the process runtime (docs/isolation.md, "The cgroup
tree"). An attempt read ``/proc/self/cgroup`` (the agent's cgroup path, its own attempt id) and
walked ``/sys/fs/cgroup`` to the sibling ``attempt-<id>`` directories of other owners' running
attempts and their counters. Real processes, as root."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    cgroup_setup,
    kill_markers,
    log_of,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    patch_attempt_init,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.runtime.isolation import Isolation, _mounts, cgroup_views

pytestmark = [pytest.mark.timeout(60), needs_root, needs_mount_ns]

# What an attempt tells of the cgroup tree it sees: its own cgroup paths, whether the host path of
# another attempt's cgroup ($1) is there, how many attempt-* directories it finds, and its own
# cgroup's processes at the root of the hierarchy that tracks it ($2).
PROBE = (
    'echo "SELF $(tr "\\n" " " </proc/self/cgroup)"; '
    'if [ -e "$1" ]; then echo "OTHER seen"; else echo "OTHER absent"; fi; '
    'echo "FOUND $(find /sys/fs/cgroup -name "attempt-*" 2>/dev/null | wc -l)"; '
    'echo "OWN $(cat "$2/cgroup.procs" 2>/dev/null | wc -l)"'
)


def _mount_point(path: str) -> str:
    """The cgroup mount (of the agent's view) that ``path`` lies in."""
    points = [p for p, fstype, _ in _mounts() if fstype in ("cgroup", "cgroup2") and path.startswith(p + "/")]
    assert points, path
    return max(points, key=len)


def _said(out: str) -> dict[str, str]:
    return {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines()}


def _own_paths(self_line: str) -> set[str]:
    """The cgroup paths of a ``/proc/self/cgroup`` read as one line (``id:controllers:path ...``)."""
    return {entry.split(":", 2)[2] for entry in self_line.split()}


def test_an_attempt_sees_only_its_own_cgroup_not_another_running_attempts(open_state: Path) -> None:
    """alice's attempt runs (with a memory limit: on a v1 host, a cgroup of hers in the memory
    hierarchy too); bob's, a cgroup namespace of its own rooted at its cgroup, reads ``/`` as its
    cgroup path (not the agent's ``fairway/agent-<hash>/attempt-2``), finds no ``attempt-*``
    directory under ``/sys/fs/cgroup`` (alice's was listed, and her counters readable), and reads
    its own cgroup at the root of its hierarchy. The agent still stops alice's attempt by its
    cgroup's host path."""

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        alice = spec(1, ["sh", "-c", f"echo up; sleep {MARKERS[0]}"], owner="cg-alice")
        a = await rt.start(replace(alice, memory=1 << 30))
        await wait_log(rt, 1, "up")
        assert a.cgroup, "no cgroup here"
        point = _mount_point(a.cgroup)  # the hierarchy that tracks attempts: bob's too
        b = await rt.start(spec(2, ["sh", "-c", PROBE, "probe", a.cgroup, point], owner="cg-bob"))
        assert b.cgroup and b.pid is not None
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        said = _said(out)
        assert _own_paths(said["SELF"]) == {"/"}, out  # not the host's path (its agent's cgroup, its id)
        assert "fairway" not in said["SELF"] and "attempt-" not in said["SELF"], out
        assert said["OTHER"] == "absent", out  # alice's cgroup, by its host path
        assert said["FOUND"] == "0", out  # no attempt-* anywhere: neither alice's nor its own by name
        assert int(said["OWN"]) >= 1, out  # its own cgroup's processes, at the root of its view
        assert "no cgroup namespace" not in out and "cgroup tree" not in out, out  # no fallback taken
        # the agent's view: alice's cgroup and her processes are there, and her stop kills them
        assert Path(a.cgroup, "cgroup.procs").read_text().split()  # noqa: ASYNC240
        await rt.stop(1, 1)
        ended = await asyncio.wait_for(exits.get(), 15)
        assert ended.attempt_id == 1 and not Path(a.cgroup).exists()  # noqa: ASYNC240

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()


def test_an_attempt_reads_its_own_cgroup_at_the_root_and_exec_shares_its_view(open_state: Path) -> None:
    """The root of the hierarchy that tracks an attempt is its own cgroup (its processes, its
    counters); a ``fairway exec`` command enters the same cgroup namespace: ``/`` too, and no
    ``attempt-*`` directory."""

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", f"echo up; sleep {MARKERS[1]}"], owner="cg-alice"))
        await wait_log(rt, 1, "up")
        assert a.cgroup, "no cgroup here"
        point = _mount_point(a.cgroup)
        got = await rt.exec(1, ["sh", "-c", PROBE, "probe", a.cgroup, point], 10, 4096)
        out = got.stdout.decode()
        assert got.exit_code == 0, (out, got.stderr)
        said = _said(out)
        assert int(said["OWN"]) >= 3, out  # the wrapper, its init, sleep, this command...: its own cgroup
        assert _own_paths(said["SELF"]) == {"/"}, out
        assert said["OTHER"] == "absent" and said["FOUND"] == "0", out  # its own cgroup, not by its host path
        await rt.stop(1, 1)

    try:
        run_async(scenario(), timeout=40)
    finally:
        kill_markers()


NEWCGROUP = 'check(libc.unshare(0x02000000), "unshare(CLONE_NEWCGROUP)")'


def test_without_a_cgroup_namespace_the_attempt_runs_and_its_log_says_so(
    open_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where ``unshare(CLONE_NEWCGROUP)`` is refused (forced here: Linux before 4.6), the attempt
    runs with the host's cgroup tree in view, as before, and its log says so."""
    patch_attempt_init(monkeypatch, tmp_path, NEWCGROUP, 'check(-1, "unshare(CLONE_NEWCGROUP)")')

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", 'echo "SELF $(tr "\\n" " " </proc/self/cgroup)"'], owner="cg-alice"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 1)
        assert done.exit_code == 0, out
        assert "fairway: no cgroup namespace of the attempt's own" in out, out
        if a.cgroup:
            assert "attempt-1" in _said(out)["SELF"], out  # the host's path, as before

    run_async(scenario())


def test_without_a_cgroup_of_its_own_an_attempt_gets_no_cgroup_namespace(open_state: Path) -> None:
    """The process-tree fallback (no usable cgroup): no namespace is made (it would be rooted at the
    agent's cgroup), the attempt runs as before, and the host state says why."""
    isolation = owner_isolation()
    none = Isolation(isolation.config, cgroups=cgroup_setup("none"))
    assert none.status()["cgroup_tree"].startswith("shared (no cgroup of the attempt's own"), none.status()
    if isolation.cgroups is not None and isolation.cgroups.kind != "none":
        assert isolation.status()["cgroup_tree"] == "private", isolation.status()

    async def scenario() -> None:
        rt, exits = runtime(open_state, none)
        await rt.start(spec(1, ["sh", "-c", 'echo "SELF $(tr "\\n" " " </proc/self/cgroup)"'], owner="cg-alice"))
        done = await asyncio.wait_for(exits.get(), 15)
        out = log_of(rt, 1)
        assert done.exit_code == 0 and "SELF " in out, out
        assert "cgroup namespace" not in out and "cgroup tree" not in out, out  # nothing tried, nothing said

    run_async(scenario())


def test_the_views_bind_the_attempts_own_cgroup_per_hierarchy_and_hide_the_others() -> None:
    """:func:`cgroup_views` on a hybrid host's mounts: the unified hierarchy and the v1 ``pids`` one,
    where the attempt joined cgroups of its own, get those; ``memory`` (no limit asked: it is in the
    agent's cgroup there, above other attempts' limit cgroups) and ``name=systemd`` an empty tmpfs;
    the tmpfs holding them and a second mount on one point are left alone."""
    mounts = [
        ("/sys/fs/cgroup", "tmpfs", "rw,nosuid,nodev,noexec,mode=755"),
        ("/sys/fs/cgroup/unified", "cgroup2", "rw,nosuid,nodev,noexec,relatime,nsdelegate"),
        ("/sys/fs/cgroup/systemd", "cgroup", "rw,nosuid,nodev,noexec,relatime,xattr,name=systemd"),
        ("/sys/fs/cgroup/memory", "cgroup", "rw,nosuid,nodev,noexec,relatime,memory"),
        ("/sys/fs/cgroup/pids", "cgroup", "rw,nosuid,nodev,noexec,relatime,pids"),
        ("/sys/fs/cgroup/pids", "cgroup", "rw,nosuid,nodev,noexec,relatime,pids"),
        ("/proc", "proc", "rw"),
    ]
    own = Path("/sys/fs/cgroup/unified/agent.service/fairway/agent-1/attempt-7")
    limit = Path("/sys/fs/cgroup/pids/fairway/agent-1/attempt-7")
    assert cgroup_views([own, limit], mounts) == [
        ["/sys/fs/cgroup/unified", str(own)],
        ["/sys/fs/cgroup/systemd", ""],
        ["/sys/fs/cgroup/memory", ""],
        ["/sys/fs/cgroup/pids", str(limit)],
    ]
    pure_v2 = [("/sys/fs/cgroup", "cgroup2", "rw,nsdelegate")]
    mine = Path("/sys/fs/cgroup/system.slice/fairway-agent.service/fairway/agent-1/attempt-7")
    assert cgroup_views([mine], pure_v2) == [["/sys/fs/cgroup", str(mine)]]
