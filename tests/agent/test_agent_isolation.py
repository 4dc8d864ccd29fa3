"""Workload isolation (issue 14, findings 1–2; docs/isolation.md): attempts run as their owner, in
their own cgroup, with only their own environment; the agent's config and state stay private.

Tests that switch identities need root and ``useradd`` (they make accounts ``fwt-*`` with uids
62000–62099 and reuse them); they are skipped otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from agent_testkit import (
    MARKERS,
    REPO_ROOT,
    TEST_RANGE,
    cgroup_setup,
    host_scratch_dir,
    kill_markers,
    log_of,
    marker_pids,
    needs_mount_ns,
    needs_root,
    owner_isolation,
    run_async,
    runtime,
    spec,
    wait_log,
)

from agent.gpu.fake import FakeGpuBackend
from agent.runtime.base import AttemptSpec, StartError
from agent.runtime.isolation import (
    PRIVATE_TMP,
    CgroupSetup,
    Isolation,
    IsolationConfig,
    access_problem,
    account_name,
    descendants,
)
from agent.runtime.process import ProcessRuntime, gpu_hide_payload
from agent.state import AttemptRecord

# --- finding 1: secrets leak between workloads ---------------------------------------------------------

SCAN_FOR = "s3cr3t-hf-token-of-team-a"
SCAN = (
    f'for f in /proc/[0-9]*/environ; do if tr "\\0" "\\n" <"$f" 2>/dev/null | grep -q {SCAN_FOR}; then '
    'echo "LEAK $f"; fi; done; echo scanned'
)


@needs_root
def test_an_attempt_cannot_read_the_secret_env_of_another_owners_attempt(open_state: Path) -> None:
    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sleep", "30"], owner="iso-alice", env={"HF_TOKEN": SCAN_FOR}))
        b = await rt.start(spec(2, ["sh", "-c", SCAN], owner="iso-bob"))
        assert a.uid != b.uid and a.uid is not None and b.uid is not None
        assert TEST_RANGE[0] <= a.uid <= TEST_RANGE[1]
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.attempt_id == 2 and done.exit_code == 0, log_of(rt, 2)
        lines = log_of(rt, 2).splitlines()
        assert lines[-1] == "scanned"
        assert [line for line in lines if line.startswith("LEAK")] == []  # not even the wrapper's environ
        await rt.stop(1, 1)

    run_async(scenario())


@needs_root
def test_the_agent_config_and_state_are_not_readable_by_an_attempt(open_state: Path) -> None:
    from agent.__main__ import protect_config

    config = open_state.parent / "agent.yaml"
    config.write_text("token: fwh_the-host-token\n")
    os.chmod(config, 0o644)  # as an older install or a careless admin left it
    protect_config(config)

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["true"], owner="iso-alice"))
        await asyncio.wait_for(exits.get(), 10)
        probe = (
            f"cat {config} || echo no-config; ls {open_state} || echo no-list; "
            f"cat {open_state}/attempts/1.json || echo no-record; cat {open_state}/attempts/1.log || echo no-log"
        )
        await rt.start(spec(2, ["sh", "-c", probe], owner="iso-bob"))
        await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 2)
        assert "fwh_the-host-token" not in out and "attempt_id" not in out
        for word in ("no-config", "no-list", "no-record", "no-log"):
            assert word in out, out

    run_async(scenario())
    assert config.stat().st_mode & 0o777 == 0o600


def test_the_attempt_env_is_its_own_with_no_agent_variables(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SIDE_SECRET", "the-agents-own")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/of/the/agent")

    async def scenario() -> None:
        rt, exits = runtime(state_dir)
        await rt.start(spec(1, ["env"], env={"MY_VAR": "x"}))
        await asyncio.wait_for(exits.get(), 10)
        keys = {line.split("=", 1)[0] for line in log_of(rt, 1).splitlines()}
        assert keys == {
            "PATH", "HOME", "USER", "LOGNAME", "MY_VAR", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
            "FAIRWAY_WORKLOAD_ID", "FAIRWAY_ATTEMPT", "FAIRWAY_PREEMPT_FILE",
        }  # fmt: skip

    run_async(scenario())


@needs_root
def test_no_secret_value_is_written_under_the_state_dir(open_state: Path) -> None:
    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", "echo started; exec sleep 30"], owner="iso-alice",
                            env={"HF_TOKEN": SCAN_FOR}))  # fmt: skip
        await wait_log(rt, 1, "started")
        await rt.stop(1, 1, "preempted")
        await asyncio.wait_for(exits.get(), 10)

    run_async(scenario())
    files = [p for p in open_state.rglob("*") if p.is_file()]
    assert any(p.suffix == ".json" for p in files)
    for path in files:
        assert SCAN_FOR.encode() not in path.read_bytes(), path
        if path.parent.name == "attempts":
            assert path.stat().st_mode & 0o077 == 0, path  # the agent's files are owner-only
    assert open_state.stat().st_mode & 0o777 == 0o711


@needs_root
def test_the_workload_env_never_reaches_the_root_wrapper(open_state: Path) -> None:
    """break26: the wrapper (root) ran with the workload's env, so a workload's LD_PRELOAD or
    LD_DEBUG_OUTPUT was obeyed by the dynamic loader of a root process: root on the host."""
    root_only = open_state.parent / "root-only"
    root_only.mkdir(mode=0o700)  # the attempt's account cannot write here; root can
    env = {"LD_DEBUG": "libs", "LD_DEBUG_OUTPUT": f"{root_only}/ld", "HF_TOKEN": SCAN_FOR}

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        record = await rt.start(spec(1, ["sh", "-c", 'echo "$HF_TOKEN"; exec sleep 30'], owner="iso-alice", env=env))
        await wait_log(rt, 1, SCAN_FOR)  # the attempt itself has its env
        assert record.pid is not None
        wrapper_env = Path(f"/proc/{record.pid}/environ").read_bytes().split(b"\0")  # noqa: ASYNC240 -- one small read
        assert [v for v in wrapper_env if v.startswith((b"LD_", b"HF_TOKEN"))] == []
        await rt.stop(1, 1)
        await asyncio.wait_for(exits.get(), 10)

    run_async(scenario())
    assert list(root_only.iterdir()) == []  # no file written by a root loader on the workload's word


# --- finding 2: a stop does not stop everything ------------------------------------------------------

ESCAPE = (
    # a setsid child that ignores SIGTERM, and a double-forked one that also left the session
    f'trap "" TERM; setsid sleep {MARKERS[0]} & ( (setsid sleep {MARKERS[1]} &) & ); echo forked; '
    f"exec sleep {MARKERS[2]}"
)


@pytest.mark.parametrize("kind", ["v2", "v1", "none"])
def test_a_stop_kills_setsid_and_double_forked_children(state_dir: Path, kind: str) -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=cgroup_setup(kind))

    async def scenario() -> None:
        rt, exits = runtime(state_dir, isolation)
        record = await rt.start(spec(1, ["sh", "-c", ESCAPE]))
        await wait_log(rt, 1, "forked")
        for _ in range(100):
            if len(marker_pids()) == 3:
                break
            await asyncio.sleep(0.02)
        assert len(marker_pids()) == 3
        assert bool(record.cgroup) == (kind != "none")
        await rt.stop(1, 0.5, "preempted")
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 137  # it ignored SIGTERM: killed at the end of the grace period
        await asyncio.sleep(0.1)
        assert marker_pids() == []
        if record.cgroup:
            assert not await asyncio.to_thread(os.path.exists, record.cgroup)

    try:
        run_async(scenario())
    finally:
        kill_markers()


def test_leftovers_are_killed_when_the_command_ends_even_without_cgroups(state_dir: Path) -> None:
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none"))

    async def scenario() -> None:
        rt, exits = runtime(state_dir, isolation)
        await rt.start(spec(1, ["sh", "-c", f"setsid sleep {MARKERS[0]} & (setsid sleep {MARKERS[1]} &); sleep 0.3"]))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 0
        assert marker_pids() == []

    try:
        run_async(scenario())
    finally:
        kill_markers()


# --- identities ------------------------------------------------------------------------------------------


@needs_root
def test_each_owner_gets_a_reused_dedicated_account_and_an_admin_uid_wins(open_state: Path) -> None:
    isolation = owner_isolation()
    first = isolation.resolve("iso-alice")
    again = isolation.resolve("iso-alice")
    assert (first.user, first.source) == ("fwt-iso-alice", "dedicated")
    assert again.uid == first.uid and first.uid == first.gid and first.switch
    admin = isolation.resolve("iso-alice", uid=62090, gid=62091, groups=(62092,))
    assert (admin.uid, admin.gid, admin.groups, admin.source) == (62090, 62091, (62092,), "admin")

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation)
        await rt.start(spec(1, ["id"], owner="x", owner_uid=62090, owner_gid=62091, owner_groups=(62092,)))
        await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 1)
        assert "uid=62090" in out and "gid=62091" in out and "62092" in out, out

    run_async(scenario())


@needs_root
def test_root_is_refused_unless_allowed_and_an_owner_is_required() -> None:
    from agent.runtime.isolation import IdentityError

    with pytest.raises(IdentityError, match="root"):
        owner_isolation().resolve("ops", uid=0)
    assert owner_isolation(allow_root=True).resolve("ops", uid=0).uid == 0
    with pytest.raises(IdentityError, match="no owner"):
        owner_isolation().resolve("")
    with pytest.raises(IdentityError, match="root"):
        Isolation(IsolationConfig(mode="agent")).resolve("anyone")  # the agent is root here


@needs_root
def test_an_owner_who_cannot_reach_the_program_fails_to_start_clearly(open_state: Path) -> None:
    hidden = open_state.parent / "hidden"
    hidden.mkdir(mode=0o700)
    program = hidden / "train.sh"
    program.write_text("#!/bin/sh\necho hi\n")
    program.chmod(0o755)

    async def scenario() -> None:
        rt, _ = runtime(open_state, owner_isolation())
        with pytest.raises(StartError, match=f"cannot run {program}.*{hidden} is not searchable"):
            await rt.start(spec(1, [str(program)], owner="iso-alice"))

    run_async(scenario())


def test_a_non_root_agent_warns_that_attempts_run_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    isolation = Isolation(IsolationConfig(), cgroups=CgroupSetup("none", note="read-only"))
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    ident = isolation.resolve("alice")
    assert not ident.switch and ident.source == "agent"
    status = isolation.status()
    assert status["identity"] == "agent" and status["cgroup"] == "none"
    assert any("does not run as root" in w for w in status["warnings"])
    assert any("no usable cgroup" in w for w in status["warnings"])


def test_an_image_on_the_process_runtime_fails_to_start(state_dir: Path) -> None:
    async def scenario() -> None:
        rt, _ = runtime(state_dir)
        with pytest.raises(StartError, match="process runtime.*cannot run image 'pytorch:24.01'"):
            await rt.start(AttemptSpec(1, 2, ["true"], [0], ["GPU-0"], image="pytorch:24.01"))
        assert rt.get(1) is not None and rt.get(1).state == "failed_to_start"  # type: ignore[union-attr]

    run_async(scenario())


def test_account_names_and_access_checks() -> None:
    assert account_name("fw-", "alice") == "fw-alice"
    odd = account_name("fw-", "Alice.Smith@lab")
    assert odd.startswith("fw-alice-smith-lab-") and len(odd) <= 32
    assert account_name("fw-", "Alice.Smith@lab") != account_name("fw-", "alice-smith-lab")
    assert len(account_name("fw-", "x" * 100)) <= 32
    assert access_problem("/bin/sh", 65000, set()) is None
    assert access_problem("/etc/shadow", 65000, set(), 4) is not None
    assert descendants(os.getpid()) == [] or all(isinstance(p, int) for p in descendants(os.getpid()))


def test_isolation_settings_parse_and_reject_bad_values() -> None:
    from agent.config import ConfigError, load_config

    base = {"server": "ws://x/ws/agent/", "token": "t"}
    config = load_config(base, environ={"FAIRWAY_ISOLATION": "{mode: agent, allow_root: true, cgroup: off}"})
    assert config.isolation == IsolationConfig(mode="agent", allow_root=True, cgroup="off")
    assert load_config(base, environ={}).isolation == IsolationConfig()
    for bad in ("{mode: sudo}", "{uid_range: [5, 1]}", "{colour: blue}", "{allow_root: yes please}", "[1"):
        with pytest.raises(ConfigError, match="isolation"):
            load_config(base, environ={"FAIRWAY_ISOLATION": bad})


def test_a_container_runs_as_the_owner_identity() -> None:
    pytest.importorskip("docker")
    from agent.runtime.docker import container_spec
    from agent.runtime.isolation import Identity

    ident = Identity(61005, 61005, (44, 45), "fw-alice", "", "dedicated")
    kwargs = container_spec(spec(7, ["true"]), Path("/x/7.d"), nvidia=False, identity=ident)
    assert kwargs["user"] == "61005:61005" and kwargs["group_add"] == ["44", "45"]
    own = Identity(0, 0, (), "root", "/root", "agent", switch=False)
    assert "user" not in container_spec(spec(7, ["true"]), Path("/x/7.d"), nvidia=False, identity=own)


@needs_root
def test_the_agent_runs_a_start_as_the_owner_it_names(open_state: Path) -> None:
    from agent_testkit import FakeServer, running, start_msg

    from agent.client import Agent
    from agent.config import AgentConfig
    from agent.gpu.fake import FakeGpuBackend
    from agent.protocol import Hello, Owner

    async def scenario() -> None:
        async with FakeServer() as server:
            config = AgentConfig(server=server.url, token="t", host_name="h1", state_dir=open_state, backoff_max=0.3)
            rt = ProcessRuntime(open_state, cwd=REPO_ROOT, isolation=owner_isolation())
            async with running(Agent(config, FakeGpuBackend("h1", 8, state_dir=open_state), rt)):
                await server.expect(lambda m: isinstance(m, Hello))
                start = start_msg(9, ["id", "-un"], gpus=[0])
                await server.send(replace(start, owner=Owner(name="iso-alice")))
                await server.expect_event(9, "started")
                await server.expect_event(9, "exited")
                assert log_of(rt, 9).strip() == "fwt-iso-alice"
                await server.send(replace(start_msg(10, ["true"], gpus=[0]), owner=None))
                failed = await server.expect_event(10, "failed_to_start")
                assert "names no owner" in failed.message

    run_async(scenario())


def test_a_script_must_be_readable_by_its_owner_too(open_state: Path) -> None:
    script = open_state.parent / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o711)
    assert access_problem(str(script), 65000, set(), 1) is None
    assert access_problem(str(script), 65000, set(), 5) == f"{script} is not readable and executable"


def test_websocket_frames_are_not_logged_even_at_debug(state_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    from agent_testkit import FakeServer, make_agent, running, start_msg

    from agent.protocol import Hello

    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            start = start_msg(3, ["true"], gpus=[0])
            await server.send(replace(start, env={"HF_TOKEN": SCAN_FOR}))
            await server.expect_event(3, "started")
            await server.expect_event(3, "exited")

    with caplog.at_level(logging.DEBUG):
        run_async(scenario())
    agent_log = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("agent"))
    assert "connected to" in agent_log
    assert SCAN_FOR not in agent_log
    assert "TEXT" not in agent_log  # frames (truncated, or not) are never logged by the agent


@needs_root
def test_no_owner_can_take_the_dedicated_account_of_another() -> None:
    from agent.runtime.isolation import IdentityError

    alice = owner_isolation().resolve("iso-alice")
    nss = owner_isolation(nss=True)
    # a Fairway user named like alice's account gets an account of its own, not alice's
    assert nss.resolve(alice.user).uid != alice.uid
    with pytest.raises(IdentityError, match="another user"):
        owner_isolation().resolve("iso-mallory", uid=alice.uid)


@needs_root
def test_a_user_known_to_the_hosts_nss_runs_as_that_account_with_its_groups() -> None:
    import grp
    import pwd
    import subprocess

    name, group = "fwtnss-carol", "fwtnss-lab"
    if not any(g.gr_name == group for g in grp.getgrall()):
        subprocess.run(["groupadd", "-g", "62098", group], check=True)  # noqa: S603, S607 -- fixed test names
    if not any(p.pw_name == name for p in pwd.getpwall()):
        subprocess.run(["useradd", "-u", "62097", "-U", "-G", group, "-M", name], check=True)  # noqa: S603, S607
    ident = owner_isolation(nss=True).resolve(name)
    assert (ident.user, ident.uid, ident.source) == (name, 62097, "nss")
    assert 62098 in ident.groups
    # below nss_min_uid (system accounts: root, daemons) the name is not mapped
    assert owner_isolation(nss=True, nss_min_uid=62098).resolve(name).source == "dedicated"


@needs_root
def test_root_needs_the_cluster_and_the_host_to_allow_it() -> None:
    """``start.allow_root`` (the cluster's allow_root_workloads) and ``isolation.allow_root`` must both
    allow uid 0; a start without the field (an older server) leaves it to the host's setting."""
    from agent.runtime.isolation import IdentityError

    with pytest.raises(IdentityError, match="allow_root_workloads is off"):
        owner_isolation(allow_root=True).resolve("ops", uid=0, cluster_allows_root=False)
    with pytest.raises(IdentityError, match="isolation.allow_root is false"):
        owner_isolation().resolve("ops", uid=0, cluster_allows_root=True)
    assert owner_isolation(allow_root=True).resolve("ops", uid=0, cluster_allows_root=True).uid == 0
    assert owner_isolation(allow_root=True).resolve("ops", uid=0, cluster_allows_root=None).uid == 0
    agent_mode = Isolation(IsolationConfig(mode="agent", allow_root=True))  # the agent is root here
    with pytest.raises(IdentityError, match="allow_root_workloads is off"):
        agent_mode.resolve("anyone", cluster_allows_root=False)
    # Not root: the cluster's setting does not matter for a dedicated account.
    assert owner_isolation().resolve("iso-root-check", cluster_allows_root=False).uid != 0


@needs_root
def test_the_agent_refuses_a_root_start_the_cluster_does_not_allow(state_dir: Path) -> None:
    from agent_testkit import FakeServer, running, start_msg

    from agent.client import Agent
    from agent.config import AgentConfig
    from agent.gpu.fake import FakeGpuBackend
    from agent.protocol import Hello

    async def scenario() -> None:
        async with FakeServer() as server:
            config = AgentConfig(server=server.url, token="t", host_name="h1", state_dir=state_dir, backoff_max=0.3)
            isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none"))
            rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation)
            async with running(Agent(config, FakeGpuBackend("h1", 8, state_dir=state_dir), rt)):
                hello = await server.expect(lambda m: isinstance(m, Hello))
                assert hello.isolation is not None and hello.isolation.identity == "agent"
                assert any("isolation.mode is agent" in w for w in hello.isolation.warnings)
                assert any("no usable cgroup" in w for w in hello.isolation.warnings)
                await server.send(replace(start_msg(11, ["true"], gpus=[0]), allow_root=False))
                failed = await server.expect_event(11, "failed_to_start")
                assert "allow_root_workloads is off" in failed.message
                await server.send(replace(start_msg(12, ["true"], gpus=[0]), allow_root=True))
                await server.expect_event(12, "started")
                await server.expect_event(12, "exited")

    run_async(scenario())


def test_hello_isolation_and_start_allow_root_are_optional_on_the_wire() -> None:
    import json

    from agent import protocol

    hello = protocol.Hello(
        "h1", "1", [], [], isolation=protocol.HostIsolation("owner", "agent", "v2", ["not root"]), id=1
    )
    payload = json.loads(protocol.encode(hello))
    assert payload["isolation"] == {"mode": "owner", "identity": "agent", "cgroup": "v2", "warnings": ["not root"]}
    assert protocol.decode(json.dumps(payload)) == hello
    del payload["isolation"]  # an agent older than the field
    assert protocol.decode(json.dumps(payload)).isolation is None  # type: ignore[attr-defined]
    payload["isolation"] = {"mode": "sudo", "identity": "agent", "cgroup": "v2", "warnings": []}
    with pytest.raises(protocol.ProtocolError, match="isolation.mode"):
        protocol.decode(json.dumps(payload))
    start = json.loads(protocol.encode(protocol.Start(7, 3, "", ["true"], {}, [], [], 30, allow_root=False, id=2)))
    assert start["allow_root"] is False
    del start["allow_root"]  # a server older than the field
    assert protocol.decode(json.dumps(start)).allow_root is None  # type: ignore[attr-defined]


# --- break26: /tmp and /dev/shm were shared between attempts ----------------------------------------------


def _mount_namespace_users(ns: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/mnt") == ns:
                    pids.append(int(entry))
    return pids


def _host_has(name: str) -> bool:
    """Whether the host's /tmp or /dev/shm has ``name``, or a mount of the agent's names it."""
    return (
        any(os.path.exists(os.path.join(d, name)) for d in PRIVATE_TMP) or name in Path("/proc/self/mounts").read_text()
    )


@needs_root
@needs_mount_ns
def test_attempts_of_different_owners_have_their_own_tmp_and_shm(open_state: Path) -> None:
    name = f"fw-tmp26-{os.getpid()}"
    write = f"echo alice-secret > /tmp/{name}; echo alice-shm > /dev/shm/{name}; echo written; sleep {MARKERS[0]}"
    read = (
        f"cat /tmp/{name} /dev/shm/{name}; ls -A /tmp /dev/shm; echo mine > /tmp/own && cat /tmp/own; "
        'test -d "$(dirname "$FAIRWAY_PREEMPT_FILE")" && echo run-dir-seen; df -k /dev/shm | tail -1; echo read'
    )

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, ["sh", "-c", write], owner="iso-alice"))
        await wait_log(rt, 1, "written")
        assert a.pid is not None
        ns = os.readlink(f"/proc/{a.pid}/ns/mnt")
        assert ns != os.readlink("/proc/self/ns/mnt")  # a namespace of its own
        await rt.start(spec(2, ["sh", "-c", read], owner="iso-bob", shared_memory=1 << 20))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.attempt_id == 2 and done.exit_code == 0, log_of(rt, 2)
        out = log_of(rt, 2)
        assert "alice" not in out and out.count("No such file") == 2, out
        assert "mine" in out and "run-dir-seen" in out and " 1024 " in out, out  # its own tmpfs, 1 MiB shm
        assert not _host_has(name)  # written to its own tmpfs, not the host's
        await rt.stop(1, 1)
        # The tmpfs goes with the attempt's last process: SIGKILLed processes leave the namespace
        # as the kernel ends them, which on a loaded box can be after stop() returned (1 of ~5
        # runs at load 10: two pids still listed).
        for _ in range(100):
            if not _mount_namespace_users(ns):
                break
            await asyncio.sleep(0.1)
        assert _mount_namespace_users(ns) == []

    run_async(scenario())


def test_a_non_root_agent_gives_each_attempt_a_private_tmpdir_removed_with_it(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Isolation, "is_root", property(lambda self: False))
    script = 'echo "$TMPDIR"; stat -c %a "$TMPDIR"; touch "$TMPDIR/x" && echo ok'

    async def scenario() -> None:
        rt, exits = runtime(state_dir)
        await rt.start(spec(1, ["sh", "-c", script]))
        done = await asyncio.wait_for(exits.get(), 10)
        lines = log_of(rt, 1).splitlines()
        assert done.exit_code == 0 and lines[1:] == ["700", "ok"], lines
        assert lines[0] == str(rt.store.run_dir(1) / "tmp")
        assert not rt.store.run_dir(1).joinpath("tmp").exists()  # noqa: ASYNC240 -- one stat

    run_async(scenario())


# --- break27: a root workload unmounted its private /tmp; a half-made one was untested ------------------

# Docker's default capabilities less CAP_MKNOD (no device cgroup here): what a root workload keeps.
ROOT_CAPS = frozenset({0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31})


@needs_root
@needs_mount_ns
@pytest.mark.parametrize("how", ["agent", "uid0"])
def test_a_root_workload_cannot_unmount_its_private_tmp(open_state: Path, how: str) -> None:
    """A root workload (the cluster's allow_root_workloads and the host's allow_root) unmounted its
    private /tmp and /dev/shm and read the host's. The wrapper now drops every capability but
    Docker's defaults (less CAP_MKNOD) from the bounding and inheritable sets, as container runtimes
    do: without CAP_SYS_ADMIN nothing unmounts, mounts or enters another namespace."""
    name = f"fw-host27-{os.getpid()}-{how}"
    host_files = [Path(d) / name for d in PRIVATE_TMP]
    for f in host_files:
        f.write_text("host-secret\n")
    script = (
        "umount /dev/shm; umount -l /dev/shm; umount /tmp; umount -l /tmp; "
        "mount -t tmpfs tmpfs /mnt && echo MOUNTED; nsenter -t 1 -m true && echo ENTERED; "
        f"unshare -Urm sh -c 'umount -l /tmp; cat /tmp/{name}'; "  # a user namespace: the mounts are locked
        f"cat /tmp/{name} /dev/shm/{name} /proc/1/root/tmp/{name}; "
        "grep -E '^Cap(Bnd|Inh|Eff)' /proc/self/status; echo done"
    )
    isolation = (
        Isolation(IsolationConfig(mode="agent", allow_root=True))
        if how == "agent"
        else owner_isolation(allow_root=True)
    )

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation)
        extra = {} if how == "agent" else {"owner_uid": 0, "owner_gid": 0}
        await rt.start(spec(1, ["sh", "-c", script], owner="ops", allow_root=True, **extra))
        done = await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 1)
        assert done.exit_code == 0 and "done" in out, out
        assert "host-secret" not in out and "MOUNTED" not in out and "ENTERED" not in out, out
        caps = {k: int(v, 16) for k, v in (line.split(":\t") for line in out.splitlines() if line.startswith("Cap"))}
        keep = sum(1 << c for c in ROOT_CAPS)
        assert caps["CapBnd"] & ~keep == 0 and caps["CapInh"] & ~keep == 0 and caps["CapEff"] & ~keep == 0, caps
        assert caps["CapEff"] != 0  # still root: chown, kill, setuid… (Docker's set)

    try:
        run_async(scenario())
    finally:
        for f in host_files:
            f.unlink(missing_ok=True)


@needs_root
@needs_mount_ns
@pytest.mark.parametrize("step", ["shm", "bind"])
def test_a_half_made_private_tmp_fails_the_start_and_runs_nothing(
    open_state: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The wrapper's mounts fail midway (injected: /dev/shm's tmpfs refused after /tmp's was mounted,
    or a path to bind back that cannot be made in a /dev/shm of one inode): the attempt fails to start
    with the reason, its command never runs (neither with the host's /tmp nor a half-made one), and
    nothing of it is left (wrapper, cgroup, mount)."""
    from agent.runtime import process

    marker = open_state.parent / "ran"
    made = process.private_tmp_payload

    var_tmps: list[object] = []

    def broken(*args: object, **kwargs: object) -> dict[str, object]:
        var_tmps.append(args[3])  # the attempt's private /var/tmp, made by then
        tmp = made(*args, **kwargs)  # type: ignore[arg-type]
        if step == "shm":
            return {**tmp, "shm": "mode=1777,no_such_tmpfs_option"}
        return {**tmp, "shm": "mode=1777,nr_inodes=1", "keep": [*tmp["keep"], str(run_under_shm)]}  # type: ignore[list-item]

    run_under_shm = Path(f"/dev/shm/fw-half27-{os.getpid()}/d")  # noqa: S108 -- a path to bind back, removed below
    run_under_shm.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(process, "private_tmp_payload", broken)

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        with pytest.raises(StartError, match="cannot make the private /tmp, /var/tmp and /dev/shm") as failed:
            await rt.start(spec(1, ["sh", "-c", f"touch {marker}; sleep {MARKERS[1]}"], owner="iso-alice"))
        why = (
            "tmpfs on /dev/shm: Invalid argument"
            if step == "shm"
            else f"No space left on device: '{run_under_shm.parent}'"
        )
        assert why in str(failed.value), failed.value
        record = rt.get(1)
        assert record is not None and record.state == "failed_to_start"
        await asyncio.sleep(0.2)
        assert not marker.exists() and marker_pids() == []
        assert not rt.store.run_dir(1).joinpath("tmp").exists()  # noqa: ASYNC240 -- one stat
        assert "fw-half27" not in Path("/proc/self/mounts").read_text()  # noqa: ASYNC240 -- one read
        (var_tmp,) = var_tmps
        assert isinstance(var_tmp, Path) and not var_tmp.exists() and record.var_tmp == ""  # noqa: ASYNC240

    try:
        run_async(scenario())
    finally:
        shutil.rmtree(run_under_shm.parent, ignore_errors=True)


# --- break29: every attempt of the process runtime could open every GPU's device node -----------------

# Tries to unmount each node (a root workload lacks CAP_SYS_ADMIN), opens it read-write (as CUDA
# does), then reads it: "open"/"refused" and what it read.
PROBE = (
    'for n in "$@"; do umount "$n" 2>/dev/null; umount -l "$n" 2>/dev/null; '
    'if { true <>"$n"; } 2>/dev/null; then echo "rw-open $n"; else echo "rw-refused $n"; fi; '
    'echo "read $n: $(cat "$n" 2>/dev/null || echo REFUSED)"; done; echo probed'
)


def test_the_nodes_to_hide_are_the_other_gpus_less_any_the_attempt_holds() -> None:
    nodes = {0: "/dev/nvidia0", 1: "/dev/nvidia1", 2: "/dev/nvidia3", 3: "/dev/nvidia2", 4: "/dev/nvidia0"}
    payload = gpu_hide_payload(nodes, [0, 1, 7])
    assert payload == {"nodes": ["/dev/nvidia2", "/dev/nvidia3"]}
    assert gpu_hide_payload(nodes, [0, 1, 2, 3, 4])["nodes"] == []
    assert gpu_hide_payload({}, [0])["nodes"] == []


@needs_root
@needs_mount_ns
@pytest.mark.parametrize(("where", "who"), [("host", "owner"), ("tmp", "owner"), ("host", "root")])
def test_an_attempt_opens_only_its_own_gpus_device_nodes(open_state: Path, where: str, who: str) -> None:
    """break29: an attempt given GPUs 0 and 1 of 4 opened the nodes of all 4 (unset
    CUDA_VISIBLE_DEVICES, NVML). In its mount namespace the wrapper now binds a root-owned, mode
    000, empty file read-only over the others' nodes: an owner cannot open them, a root workload
    (CAP_DAC_OVERRIDE) opens an empty file read-only, never the device; its own nodes are
    untouched, under a private /tmp too (bound back), and the host's are unchanged."""
    base = host_scratch_dir("fw-gpu29-") if where == "host" else open_state.parent
    os.chmod(base, 0o755)  # noqa: S103 -- as /dev
    nodes = FakeGpuBackend("h29", 4, dev_dir=base / "dev").device_nodes()
    for i, node in nodes.items():
        Path(node).write_text(f"device-{i}\n")
    isolation = owner_isolation(allow_root=True)
    extra = {"owner_uid": 0, "owner_gid": 0, "allow_root": True} if who == "root" else {}

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation, gpu_nodes=nodes)
        command = ["sh", "-c", PROBE, "probe", *nodes.values()]
        await rt.start(replace(spec(1, command, owner="iso-alice", **extra), gpu_indices=[0, 1], gpu_uuids=["a", "b"]))
        done = await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 1)
        assert done.exit_code == 0 and "probed" in out, out
        for i in (0, 1):
            assert f"rw-open {nodes[i]}" in out and f"read {nodes[i]}: device-{i}" in out, out
        for i in (2, 3):
            assert f"rw-refused {nodes[i]}" in out and f"device-{i}" not in out, out
            assert f"read {nodes[i]}: {'REFUSED' if who == 'owner' else ''}\n" in out, out
        assert "fw-gpu29" not in Path("/proc/self/mounts").read_text()  # noqa: ASYNC240 -- one read
        assert all(Path(n).read_text() == f"device-{i}\n" for i, n in nodes.items())  # noqa: ASYNC240

    try:
        run_async(scenario())
    finally:
        if where == "host":
            shutil.rmtree(base, ignore_errors=True)


def test_a_non_root_agent_says_the_other_gpus_stay_reachable(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Isolation, "is_root", property(lambda self: False))
    nodes = FakeGpuBackend("h29", 2, dev_dir=tmp_path / "dev").device_nodes()

    async def scenario() -> None:
        rt, exits = runtime(state_dir, gpu_nodes=nodes)
        await rt.start(spec(1, ["true"]))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 0
        assert "the host's other GPUs stay reachable (the agent is not root" in log_of(rt, 1)

    run_async(scenario())


# --- iso31: System V IPC was the host's; a burst of output before the exit stayed on disk ----------------

SHM_KEY = 0x46570000 + os.getpid() % 0xFFFF
SHMGET = (
    "import ctypes, time; libc = ctypes.CDLL(None, use_errno=True); "
    f"i = libc.shmget({SHM_KEY}, 4096, 0o1666); print('shmid', i, flush=True)"  # IPC_CREAT, mode 0666
)


@needs_root
@needs_mount_ns
def test_attempts_do_not_share_system_v_ipc_with_the_host_or_each_other(open_state: Path) -> None:
    """A segment of mode 0666 made by one attempt (or on the host) is not seen by another attempt:
    each has the IPC namespace of its private /dev/shm, as a container's ``ipc_mode: private``."""
    import ctypes

    make = ["python3", "-c", SHMGET + f"; time.sleep({MARKERS[0]})"]
    look = f"grep -cw {SHM_KEY} /proc/sysvipc/shm; echo looked"
    libc = ctypes.CDLL(None, use_errno=True)
    host_id = libc.shmget(SHM_KEY, 4096, 0o1666)  # the host's, mode 0666
    assert host_id >= 0, os.strerror(ctypes.get_errno())
    try:

        async def scenario() -> None:
            rt, exits = runtime(open_state, owner_isolation())
            await rt.start(spec(1, make, owner="iso-alice"))
            await wait_log(rt, 1, "shmid")
            assert int(log_of(rt, 1).split()[1]) >= 0, log_of(rt, 1)  # made in its own namespace
            await rt.start(spec(2, ["sh", "-c", look], owner="iso-bob"))
            done = await asyncio.wait_for(exits.get(), 10)
            assert done.attempt_id == 2, log_of(rt, 2)
            assert log_of(rt, 2).split() == ["0", "looked"], log_of(rt, 2)  # neither the host's nor alice's
            await rt.stop(1, 1)

        run_async(scenario())
    finally:
        libc.shmctl(host_id, 0, None)  # IPC_RMID


@needs_root
@needs_mount_ns
@pytest.mark.skipif(not os.path.ismount("/dev/mqueue"), reason="no /dev/mqueue on this host")
def test_an_attempt_sees_no_posix_message_queue_of_the_host(open_state: Path) -> None:
    """The host's /dev/mqueue lists (and opens) the queues of the host's IPC namespace: an attempt
    gets a fresh one of its own namespace there."""
    import ctypes
    import ctypes.util

    rt_lib = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
    name = f"/fw-iso31-{os.getpid()}".encode()
    fd = rt_lib.mq_open(name, os.O_CREAT | os.O_RDWR, 0o666, None)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:

        async def scenario() -> None:
            rt, exits = runtime(open_state, owner_isolation())
            await rt.start(spec(1, ["sh", "-c", "ls -A /dev/mqueue; echo listed"], owner="iso-bob"))
            done = await asyncio.wait_for(exits.get(), 10)
            assert done.exit_code == 0 and log_of(rt, 1).split() == ["listed"], log_of(rt, 1)

        run_async(scenario())
    finally:
        os.close(fd)
        rt_lib.mq_unlink(name)


def test_a_burst_of_output_just_before_the_exit_is_capped_too(state_dir: Path) -> None:
    """The log cap ran every few seconds over running attempts only: an attempt that wrote
    gigabytes and exited in between left them on the agent's disk for the retention period."""
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none"))
    cap = 64 * 1024

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation, log_max_bytes=cap)
        exits: asyncio.Queue[AttemptRecord] = asyncio.Queue()
        rt.on_exit = exits.put_nowait
        await rt.start(spec(1, ["sh", "-c", "head -c 4000000 /dev/zero | tr '\\0' x; echo; echo the-end"]))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.exit_code == 0
        st = rt.store.log_path(1).stat()
        assert st.st_blocks * 512 <= 2 * cap, st  # not the 4 MB it wrote
        tail, offset = rt.read_log(1, 1 << 20)
        assert tail.endswith(b"the-end\n") and offset > 0 and len(tail) <= cap

    run_async(scenario())


FALLOCATE = (
    "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
    "r = libc.fallocate(1, 1, ctypes.c_long(0), ctypes.c_long(256 << 20)); "  # FALLOC_FL_KEEP_SIZE
    "print('fallocate', r, os.strerror(ctypes.get_errno()), flush=True); "
    f"os.execvp('sleep', ['sleep', '{MARKERS[0]}'])"
)


def test_a_workload_cannot_reserve_disk_through_its_log(state_dir: Path) -> None:
    """The log file was the workload's own stdout: ``fallocate(1, FALLOC_FL_KEEP_SIZE, …)`` took any
    amount of disk past the end of the file in one call, which the cap (by size) never saw. The
    workload now writes into a pipe that its wrapper copies into the log."""
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none"))

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation, log_max_bytes=1 << 20)
        await rt.start(spec(1, ["python3", "-c", FALLOCATE]))
        await wait_log(rt, 1, "fallocate")
        assert rt.store.log_path(1).stat().st_blocks * 512 < 1 << 20, log_of(rt, 1)
        rt.cap_logs()
        assert rt.store.log_path(1).stat().st_blocks * 512 < 1 << 20, log_of(rt, 1)
        await rt.stop(1, 0.5)

    try:
        run_async(scenario())
    finally:
        kill_markers()


@needs_root
@needs_mount_ns
def test_attempts_of_different_owners_do_not_share_var_tmp(open_state: Path) -> None:
    """iso31: a file ``fw-alice`` wrote to /var/tmp (umask 022) was read by ``fw-bob``. Each attempt
    now gets a /var/tmp of its own, as systemd's PrivateTmp: a new directory on the host's /var/tmp
    (disk, not memory), root's 0700 there, bound over /var/tmp in its mount namespace, removed when
    it ends. A program the attempt runs from under the host's /var/tmp is still bound back."""
    host = Path("/var/tmp")  # noqa: S108 -- the shared place under test
    name = f"fw-var32-{os.getpid()}"
    prog_dir = Path(tempfile.mkdtemp(prefix="fw-var32-prog-", dir=host))  # bound back: the attempt runs it
    os.chmod(prog_dir, 0o755)  # noqa: S103 -- a program others may run
    prog = prog_dir / "write.sh"
    prog.write_text(
        f"#!/bin/sh\necho alice-secret > /var/tmp/{name}; stat -f -c %T /var/tmp; stat -c %a /var/tmp; "
        f"ls -A /var/tmp | grep -c fairway-attempt; echo written; exec sleep {MARKERS[0]}\n"
    )
    prog.chmod(0o755)
    read = f"cat /var/tmp/{name}; ls -A /var/tmp; echo mine > /var/tmp/own && cat /var/tmp/own; echo read"

    async def scenario() -> None:
        rt, exits = runtime(open_state, owner_isolation())
        a = await rt.start(spec(1, [str(prog)], owner="iso-alice"))
        await wait_log(rt, 1, "written")
        fs, mode, seen, written = log_of(rt, 1).splitlines()
        assert fs != "tmpfs" and mode == "1777" and seen == "0" and written == "written"  # on disk; none seen
        own = Path(a.var_tmp)
        assert own.parent == host and own.name.startswith("fairway-attempt-1-")
        assert own.stat().st_uid == 0 and own.stat().st_mode & 0o777 == 0o700  # noqa: ASYNC240
        assert (own / "tmp" / name).read_text() == "alice-secret\n"  # noqa: ASYNC240 -- there, not in /var/tmp
        await rt.start(spec(2, ["sh", "-c", read], owner="iso-bob"))
        done = await asyncio.wait_for(exits.get(), 10)
        assert done.attempt_id == 2 and done.exit_code == 0, log_of(rt, 2)
        out = log_of(rt, 2)
        assert "alice-secret" not in out and "No such file" in out and "mine" in out, out
        assert out.splitlines()[1:] == ["mine", "read"], out  # ls: nothing of the host's nor of alice's
        assert not (host / name).exists()  # noqa: ASYNC240
        assert done.var_tmp == "" and not any(host.glob("fairway-attempt-2-*"))  # noqa: ASYNC240
        await rt.stop(1, 1)
        await asyncio.wait_for(exits.get(), 10)
        assert not own.exists()  # noqa: ASYNC240 -- removed with the attempt
        assert rt.get(1) is not None and rt.get(1).var_tmp == ""  # type: ignore[union-attr]

    try:
        run_async(scenario())
    finally:
        shutil.rmtree(prog_dir, ignore_errors=True)
        (host / name).unlink(missing_ok=True)


@needs_root
@needs_mount_ns
def test_a_private_var_tmp_is_removed_by_the_next_agent_when_its_attempt_ended_meanwhile(open_state: Path) -> None:
    """An attempt that ends while no agent watches it (the agent stopped, then the attempt was
    killed) leaves its private /var/tmp on the host's disk: the next agent's recover() removes it
    with the rest of the attempt (its record keeps the path)."""

    async def first() -> str:
        rt, _exits = runtime(open_state, owner_isolation())
        record = await rt.start(
            spec(1, ["sh", "-c", f"echo x > /var/tmp/left; exec sleep {MARKERS[2]}"], owner="iso-alice")
        )
        await rt.close()  # the agent goes; the attempt runs on
        return record.var_tmp

    async def second() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        await rt.recover()
        record = rt.get(1)
        assert record is not None and record.state == "exited" and record.var_tmp == ""

    left = run_async(first())
    assert left and Path(left).is_dir()
    for _ in range(100):  # the command's write
        if (Path(left) / "tmp" / "left").exists():
            break
        time.sleep(0.02)
    kill_markers()  # the attempt ends while no agent watches it
    for _ in range(100):
        if proc_gone := not marker_pids():
            break
        time.sleep(0.02)
    assert proc_gone
    time.sleep(0.3)  # its wrapper exits after its command
    run_async(second())
    assert not Path(left).exists()


def test_a_log_replaced_by_a_symlink_is_neither_read_nor_capped_through_it(state_dir: Path) -> None:
    """A workload running as the agent's user (a non-root agent, ``mode: agent``) can swap its log
    for a symlink to the agent's config: a ``logs`` request then relayed the host token to the
    server, and the cap punched holes in the config. Both now open the log without following it."""
    isolation = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=CgroupSetup("none"))
    config = state_dir / "agent.yaml"
    config.write_text("token: the-host-token\n" + "#" * 4096)

    async def scenario() -> None:
        rt = ProcessRuntime(state_dir, cwd=REPO_ROOT, isolation=isolation, log_max_bytes=1024)
        await rt.start(spec(1, ["sh", "-c", f"echo started; exec sleep {MARKERS[0]}"]))
        await wait_log(rt, 1, "started")
        log_path = rt.store.log_path(1)
        log_path.unlink()
        log_path.symlink_to(config)
        assert b"the-host-token" not in rt.read_log(1, 1 << 20)[0]
        rt.cap_logs()
        assert config.read_text().startswith("token: the-host-token\n") and config.stat().st_blocks > 0
        await rt.stop(1, 0.5)

    try:
        run_async(scenario())
    finally:
        kill_markers()


# --- iso32: a fork bomb of one attempt filled the host's process table ----------------------------------

BOMB = f"""
import os
n = 0
try:
    while n < 400:
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "{MARKERS[1]}"])
        n += 1
    print("forked", n, flush=True)
except OSError as e:
    print("refused at", n, e.strerror, flush=True)
os.execvp("sleep", ["sleep", "{MARKERS[0]}"])
"""
FORKS = "for i in $(seq 20); do sleep 0.2 & done; wait; echo forks-ok"


@needs_root
def test_a_fork_bomb_stops_at_its_attempts_pids_limit_and_others_still_fork(open_state: Path) -> None:
    """iso31: no ``pids.max`` on an attempt, so one attempt could fork until the host's pid table was
    full, and every other attempt (and the agent's next wrapper) failed to fork. Each attempt's
    cgroup now has ``pids.max`` (``isolation.pids_max``): the bomb stops there, while another
    attempt of the same owner (a per-uid RLIMIT_NPROC would have stopped it too) and one of another
    owner still fork."""
    isolation = owner_isolation(pids_max=64)
    assert isolation.limits is not None
    if isolation.limits.pids == "none":
        pytest.skip(f"no pids controller here ({isolation.limits.pids_note})")

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation)
        await rt.start(spec(1, ["python3", "-c", BOMB], owner="iso-alice"))
        await wait_log(rt, 1, "\n", within=20)  # "refused at …" or "forked 400"
        out = log_of(rt, 1)
        assert out.startswith("refused at") and "Resource temporarily unavailable" in out, out
        assert 40 < int(out.split()[2]) < 64, out  # the wrapper, its log pump and the bomb count too
        await rt.start(spec(2, ["sh", "-c", FORKS], owner="iso-alice"))
        await rt.start(spec(3, ["sh", "-c", FORKS], owner="iso-bob"))
        for _ in range(2):
            done = await asyncio.wait_for(exits.get(), 10)
            assert done.exit_code == 0 and log_of(rt, done.attempt_id) == "forks-ok\n", log_of(rt, done.attempt_id)
        await rt.stop(1, 1)
        await asyncio.wait_for(exits.get(), 10)
        assert marker_pids() == []

    try:
        run_async(scenario())
    finally:
        kill_markers()


def test_the_pids_limit_is_a_setting_and_a_host_without_one_says_so() -> None:
    assert IsolationConfig().pids_max == 8192
    assert IsolationConfig.parse({"pids_max": 0}).pids_max == 0  # no limit
    for bad in (-1, 1.5, True, "many", 1 << 23):
        with pytest.raises(ValueError, match="pids_max must be a whole number in 0..4194304"):
            IsolationConfig.parse({"pids_max": bad})
    none = CgroupSetup("none", note="test")
    status = Isolation(IsolationConfig(mode="agent", allow_root=True), cgroups=none).status()
    assert status["pids"] == "none" and status["pids_max"] == 8192
    assert any(w.startswith("no pids limit for attempts (no usable cgroup (test))") for w in status["warnings"])
    off = Isolation(IsolationConfig(mode="agent", allow_root=True, pids_max=0), cgroups=none).status()
    assert off["pids"] == "off" and not any("pids" in w for w in off["warnings"])


# --- iso32: attempts reached each other's abstract unix sockets ----------------------------------------

PEER = r"""
import os, socket, sys
name = "\0" + sys.argv[2]
def connect(who):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(name)
        print(who, "read", c.recv(100).decode().strip(), flush=True)
    except OSError as e:
        print(who, "refused", e.strerror, flush=True)
if sys.argv[1] == "serve":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(name)
    s.listen(8)
    print("listening", flush=True)
    if os.fork() == 0:
        connect("own-child")
        os._exit(0)
    while True:
        c, _ = s.accept()
        c.sendall(b"alice-secret\n")
        c.close()
else:
    connect(sys.argv[1])
    try:  # the same owner's other attempt: Landlock's domain keeps ptrace access to its own too
        print(sys.argv[1], "environ", len(open(f"/proc/{sys.argv[3]}/environ").read()), flush=True)
    except OSError as e:
        print(sys.argv[1], "environ refused", e.strerror, flush=True)
"""


def _connect_abstract(name: str) -> str:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect("\0" + name)
        return c.recv(100).decode().strip()


@needs_root
def test_an_attempt_reaches_no_abstract_unix_socket_of_another_attempt(open_state: Path) -> None:
    """iso31: attempts share the host's network namespace, so another owner's attempt connected to an
    attempt's abstract unix socket (``@name``: no file, no permission). A network namespace per
    attempt would cut a gang's traffic between hosts; a Landlock domain per attempt (Linux 6.12's
    ``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET``) keeps them to the attempt instead: its own processes
    connect, another attempt (of another owner, or of the same one) is refused, and a process
    outside every attempt (the host's: an operator, this test) still connects."""
    isolation = owner_isolation()
    if isolation.sockets:
        pytest.skip(f"no Landlock scoping here ({isolation.sockets})")
    name = f"fw-iso32-{os.getpid()}"

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation)
        server = await rt.start(spec(1, ["python3", "-c", PEER, "serve", name], owner="iso-alice"))
        await wait_log(rt, 1, "own-child")
        assert "own-child read alice-secret" in log_of(rt, 1), log_of(rt, 1)
        assert server.pid is not None
        (command,) = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()  # noqa: ASYNC240
        await rt.start(spec(2, ["python3", "-c", PEER, "bob", name, command], owner="iso-bob"))
        await rt.start(spec(3, ["python3", "-c", PEER, "alice-again", name, command], owner="iso-alice"))
        for _ in range(2):
            done = await asyncio.wait_for(exits.get(), 10)
            out = log_of(rt, done.attempt_id)
            assert done.exit_code == 0 and "refused Operation not permitted" in out, out
            hidden = "No such file or directory" if not isolation.proc else "Permission denied"  # iso61: not there
            assert "alice-secret" not in out and f"environ refused {hidden}" in out, out
        assert await asyncio.to_thread(_connect_abstract, name) == "alice-secret"  # the host's own processes
        await rt.stop(1, 1)

    run_async(scenario())
    assert owner_isolation().status()["abstract_sockets"] == "private"


# --- iso34: attempts of the same owner signalled each other -----------------------------------------

KILLER = r"""
import os, signal, subprocess, sys
child = subprocess.Popen(["sleep", "60"])  # its own process: still signalled from inside the attempt
os.kill(child.pid, signal.SIGKILL)
print("own child", child.wait(), flush=True)
try:
    os.kill(int(sys.argv[1]), signal.SIGKILL)
    print("killed the other attempt", flush=True)
except OSError as e:
    print("refused", e.strerror, flush=True)
"""


@needs_root
def test_an_attempt_cannot_signal_another_attempt_of_the_same_owner(open_state: Path) -> None:
    """iso32 left signals between two attempts of the same owner (one uid) open: one attempt
    killed the other. The attempt's Landlock domain now scopes signals too (Linux 6.12's
    ``LANDLOCK_SCOPE_SIGNAL``): ``kill`` of a process outside the attempt is refused with
    ``EPERM``; its own processes are still signalled, and the host's (the agent, this test) still
    signal it."""
    isolation = owner_isolation()
    if isolation.sockets:
        pytest.skip(f"no Landlock scoping here ({isolation.sockets})")

    async def scenario() -> None:
        rt, exits = runtime(open_state, isolation)
        victim = await rt.start(spec(1, ["sleep", MARKERS[0]], owner="iso-alice"))
        assert victim.pid is not None
        for _ in range(200):  # the command, once forked
            if markers := marker_pids():
                break
            await asyncio.sleep(0.01)
        (command,) = map(str, markers)
        await rt.start(spec(2, ["python3", "-c", KILLER, command], owner="iso-alice"))
        done = await asyncio.wait_for(exits.get(), 10)
        out = log_of(rt, 2)
        assert done.attempt_id == 2 and done.exit_code == 0, out
        # pidns61: in a PID namespace of its own the other attempt's pid is not even there (an exec,
        # in the same namespace, is refused by the scope: test_pidns61_isolation.py)
        refused = "No such process" if not isolation.proc else "Operation not permitted"
        assert "own child -9" in out and f"refused {refused}" in out, out
        assert int(command) in marker_pids()  # the first attempt still runs
        await rt.stop(1, 1)  # the host's processes still signal it
        assert (await asyncio.wait_for(exits.get(), 10)).attempt_id == 1
        assert marker_pids() == []

    try:
        run_async(scenario())
    finally:
        kill_markers()
    assert owner_isolation().status()["signals"] == "private"


@needs_root
def test_a_fifo_named_as_the_program_fails_to_start_and_never_blocks_the_agent(open_state: Path) -> None:
    """brk39: a FIFO with execute bits (made by an earlier workload on a shared mount, or by its
    owner's login) named as the command: ``shutil.which`` accepts it, and the agent's check of a
    ``#!`` line opened it as root for reading inside its event loop, which then blocked until some
    writer came: no heartbeat, stop or start of any attempt meanwhile. The check now opens without
    blocking and refuses what is not a regular file (``execve`` would refuse it too)."""
    import threading

    fifo = open_state.parent / "train"
    os.mkfifo(fifo)
    fifo.chmod(0o777)
    rescued = threading.Event()
    done = threading.Event()

    def rescue() -> None:  # a writer after a bound: the only way out of a blocked open
        if done.wait(20.0):
            return
        rescued.set()
        while not done.is_set():
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            time.sleep(0.05)

    rescuer = threading.Thread(target=rescue, daemon=True)
    rescuer.start()

    async def scenario() -> None:
        rt, _ = runtime(open_state, owner_isolation())
        try:
            with pytest.raises(StartError, match=f"{fifo} is not a regular file"):
                await rt.start(spec(1, [str(fifo)], owner="iso-alice"))
        finally:
            done.set()

    run_async(scenario())
    rescuer.join(5.0)
    assert not rescued.is_set(), "the agent blocked opening the FIFO"


@needs_root
def test_a_read_only_mount_is_read_only_to_the_attempt_whatever_its_file_modes(open_state: Path) -> None:
    """brk41: the process runtime gave a catalog mount marked read-only (the default) as the host
    path itself, so an attempt wrote there whenever the files' modes let its owner (a group-writable
    dataset, a 0777 scratch directory). With a root agent the attempt's mount namespace binds each
    read-only mount onto itself read-only (nosuid, nodev): writes fail with ``EROFS``, the working
    directory in it included; a writable mount stays writable; the host's view is unchanged."""
    from agent.protocol import Mount

    base = Path(tempfile.mkdtemp(prefix="fw-ro-", dir="/var/lib" if os.path.isdir("/var/lib") else None))
    data, work = base / "data", base / "work"
    try:
        for d in (data, work):
            d.mkdir()
            os.chmod(d, 0o777)  # noqa: S103 -- writable by the attempt's owner through its modes
        os.chmod(base, 0o755)  # noqa: S103 -- reachable
        mounts = (
            Mount(name="data", host_path=str(data), container_path="/data", read_only=True),
            Mount(name="work", host_path=str(work), container_path="/work", read_only=False),
        )
        script = (
            "touch ./cwd-file 2>&1; touch $FAIRWAY_MOUNT_DATA/x 2>&1; touch $FAIRWAY_MOUNT_WORK/y && echo work-ok; "
            "mount -o remount,rw $FAIRWAY_MOUNT_DATA 2>/dev/null || echo no-remount"
        )

        async def scenario() -> None:
            rt, exits = runtime(open_state, owner_isolation())
            await rt.start(spec(1, ["sh", "-c", script], owner="iso-alice", mounts=mounts))
            done = await asyncio.wait_for(exits.get(), 10)
            out = log_of(rt, 1)
            assert done.exit_code == 0, out
            assert out.count("Read-only file system") == 2, out
            assert "work-ok" in out and "no-remount" in out, out

        run_async(scenario())
        assert not (data / "x").exists() and not (data / "cwd-file").exists() and (work / "y").exists()
        (data / "host-still-writes").write_text("ok")  # the host's own view is unchanged
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_root
def test_an_admin_set_system_uid_needs_both_root_consents(open_state: Path) -> None:
    """brk41: a ``start`` whose owner carried an admin-set uid ran as that uid whatever it was: a
    system account (``postgres``, ``www-data``, the uid of a host service) below ``nss_min_uid``,
    which the agent never takes by name. Such a uid is refused as root is, unless both consents
    (the cluster's and the host's ``allow_root``) are given; a uid from ``nss_min_uid`` up is
    used as before, and a lower ``nss_min_uid`` admits it."""
    from agent.runtime.isolation import IdentityError

    isolation = owner_isolation()
    with pytest.raises(IdentityError, match="system account below isolation.nss_min_uid"):
        isolation.resolve("iso-alice", uid=33)
    with pytest.raises(IdentityError, match="system account"):
        owner_isolation(allow_root=True).resolve("iso-alice", uid=33, cluster_allows_root=False)
    assert owner_isolation(allow_root=True).resolve("iso-alice", uid=33, cluster_allows_root=True).uid == 33
    assert owner_isolation(nss_min_uid=30).resolve("iso-alice", uid=33).uid == 33
    assert isolation.resolve("iso-alice", uid=1000).uid == 1000

    async def scenario() -> None:
        rt, _exits = runtime(open_state, isolation)
        with pytest.raises(StartError, match="uid 33"):
            await rt.start(spec(1, ["id"], owner="iso-alice", owner_uid=33))
        assert rt.get(1).state == "failed_to_start"

    run_async(scenario())


@needs_root
def test_admin_set_system_groups_need_both_root_consents(open_state: Path, tmp_path: Path) -> None:
    """sec41: the uid rule of brk41 left the groups alone: an admin-set supplementary group (or
    primary gid) such as ``disk``, ``docker``, ``shadow`` or gid 0 gave the workload a group that
    is root-equivalent on the host. A gid below the host's first normal gid (``GID_MIN`` of
    ``/etc/login.defs``, as ``useradd`` reads it; 1000 without one), gid 0 included, is refused
    as an admin-set system uid is, unless both root consents are given; the refusal names the
    group as the host's NSS does and the start fails with it. ``isolation.min_gid`` lowers it."""
    import grp

    from agent.runtime.isolation import IdentityError, first_normal_gid

    isolation = owner_isolation()
    disk = grp.getgrnam("disk").gr_gid if any(g.gr_name == "disk" for g in grp.getgrall()) else 6
    for groups, gid in (((disk,), None), ((62092, 0), None), ((), 0), ((), disk), ((999,), None)):
        with pytest.raises(IdentityError, match=r"system group below isolation.min_gid \(1000\)"):
            isolation.resolve("iso-alice", uid=62090, gid=gid, groups=groups)
    with pytest.raises(IdentityError, match=rf"group {disk} \(disk\)"):
        isolation.resolve("iso-alice", uid=62090, groups=(62092, disk))
    with pytest.raises(IdentityError, match="system group"):
        owner_isolation(allow_root=True).resolve("iso-alice", uid=62090, groups=(0,), cluster_allows_root=False)
    both = owner_isolation(allow_root=True).resolve("iso-alice", uid=62090, groups=(0, disk), cluster_allows_root=True)
    assert both.groups == (0, disk)
    assert owner_isolation(min_gid=5).resolve("iso-alice", uid=62090, groups=(disk,)).groups == (disk,)
    with pytest.raises(IdentityError, match="system group"):  # gid 0 whatever min_gid says
        owner_isolation(min_gid=1).resolve("iso-alice", uid=62090, groups=(0,))
    assert isolation.resolve("iso-alice", uid=62090, gid=62091, groups=(1000, 62092)).groups == (1000, 62092)

    # the first normal gid as useradd reads it
    defs = tmp_path / "login.defs"
    defs.write_text("# GID_MIN 7\nUID_MIN 500\n  GID_MIN\t\t 2000 \nGID_MAX 60000\n")
    assert first_normal_gid(defs) == 2000
    defs.write_text("GID_MIN nonsense\n")
    assert first_normal_gid(defs) == 1000
    assert first_normal_gid(tmp_path / "absent") == 1000
    assert IsolationConfig.parse({"min_gid": 500}).min_gid == 500
    for bad in (0, -1, "x", True, 2**31):
        with pytest.raises(ValueError, match="min_gid"):
            IsolationConfig.parse({"min_gid": bad})

    async def scenario() -> None:
        rt, _exits = runtime(open_state, isolation)
        with pytest.raises(StartError, match=rf"group {disk} \(disk\)"):
            await rt.start(spec(1, ["id"], owner="iso-alice", owner_uid=62090, owner_groups=(disk,)))
        record = rt.get(1)
        assert record.state == "failed_to_start" and "system group" in record.message

    run_async(scenario())
