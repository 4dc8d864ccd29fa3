"""The production layout, end to end, on PostgreSQL and Redis (issue 14).

Every piece is a real process, started as the Procfile and docs/deploy.md say, against a fresh
PostgreSQL database (``fairway_prodlayout_<pid>``, dropped at the end) and a Redis database
number of its own (claimed, flushed at the end):

- two web processes: ``uvicorn config.asgi:application --ws websockets-sansio --lifespan off
  --proxy-headers`` on two ports (``FAIRWAY_ENV=production``, so the psycopg pool and the
  production settings are on; ``SECURE_SSL_REDIRECT=false``: no TLS proxy in front here);
- one worker: ``manage.py rundramatiq --queues scheduler notifications default --processes 1
  --threads 2``; the estimates: ``nice -n 10 manage.py rundramatiq --queues estimates --processes 1
  --threads 1``; the clock: ``manage.py clock``;
- two agents (fake backend, 2 H100 each) that joined with single-use join tokens
  (``python -m agent join``) and connect through a TCP balancer each, ``h1`` preferring web 1
  and ``h2`` web 2 (what a reverse proxy in front of several web processes does).

Heartbeats (0.5 s), flushes, ticks (0.5 s) and the grace period are shortened through the
``FAIRWAY_*`` variables of config/settings.py. The tests share the stack (module scope) and run
in order: a 1-GPU workload; a gang of 4 GPUs spanning both hosts; a cancel; kill -9 of the web
process holding ``h2`` while work runs on both hosts, the agent failing over to the other web
process, the killed one restarted; SIGTERM of the web process then holding both agents (a deploy's
restart: it closes their websockets with 1012 and exits within seconds, they reconnect to the other
one); nothing lost; last, the logs of a running gang from both hosts (a
regression check of a bug fixed in scheduler/gateway.py: last because it could leave web 1 unable
to serve its agents).
Everything is read through the REST API (personal token) and, for host events, SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import pytest

from tests.e2e.prodlayout import (
    REPO,
    Api,
    Balancer,
    Processes,
    free_port,
    kill_attempt_processes,
    own_redis_db,
    server_env,
    wait_for,
    web_argv,
)

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
PY = sys.executable
GPUS_PER_HOST = 2
AGENT_ISOLATION = "{mode: agent, allow_root: true}"
"""``FAIRWAY_ISOLATION`` of the agents: this Python is under a private home (/root), which the dedicated
accounts of an agent running as root cannot enter (docs/isolation.md, as tests/e2e/conftest.py)."""
GATEWAY_BUG = (
    "regression of a fixed bug: logs of a workload spanning several hosts failed on Redis with "
    "`RuntimeError: Two event loops are trying to receive() on one channel layer` (scheduler/gateway.py)"
)

_MISSING = [
    what
    for what, ok in (
        ("DATABASE_URL=postgres://...", DATABASE_URL.startswith(("postgres://", "postgresql://"))),
        ("REDIS_URL=redis://...", REDIS_URL.startswith(("redis://", "rediss://"))),
    )
    if not ok
]
pytestmark = [
    pytest.mark.skipif(
        bool(_MISSING),
        reason=f"the production layout runs on PostgreSQL and Redis only: set {' and '.join(_MISSING)}",
    ),
    pytest.mark.timeout(120),
]


# --- the stack ---------------------------------------------------------------------------------


class Stack:
    def __init__(self, procs: Processes, db_url: str, ports: dict[str, int], token: str) -> None:
        self.procs = procs
        self.db_url = db_url
        self.ports = ports  # web1, web2
        self.token = token
        self.api1 = Api(f"http://127.0.0.1:{ports['web1']}", token)
        self.api2 = Api(f"http://127.0.0.1:{ports['web2']}", token)
        self.balancers: dict[str, Balancer] = {}
        self.state_dirs: dict[str, Path] = {}
        self.wire_ids: dict[int, int] = {}  # attempt id → wire id (what the agent files its log by)
        self.workloads: dict[str, int] = {}  # role in the scenario → workload id
        self.expected: dict[str, tuple[str, list[str]]] = {}  # role → (final state, attempts' end reasons)
        self.started = time.monotonic()

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        return wait_for(predicate, timeout, what, self.procs.report)

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.db_url, autocommit=True) as conn:
            return conn.execute(query, args).fetchall()

    def submit(self, name: str, gpus: int, duration: float, api: Api | None = None, min_runtime: int = 60) -> int:
        body = {
            "name": name,
            "budget": "org/lab",
            "cluster": "prod",
            "gpu_model": "H100",
            "gpu_count": gpus,
            "command": [PY, "-m", "agent.standin", "--duration", str(duration)],
            "env": {"PYTHONPATH": str(REPO)},
            "min_runtime": min_runtime,
        }
        wid = int((api or self.api1).post("workloads/", body, expect=201)["id"])
        self.workloads[name] = wid
        return wid

    def workload(self, wid: int, api: Api | None = None) -> dict[str, Any]:
        return (api or self.api1).get(f"workloads/{wid}/")

    def running_attempt(self, wid: int) -> dict[str, Any] | None:
        w = self.workload(wid)
        live = [a for a in w["attempts"] if a["started_at"] and not a["ended_at"]]
        return live[-1] if w["state"] == "running" and live else None

    def final(self, wid: int) -> dict[str, Any] | None:
        w = self.workload(wid)
        return (
            w
            if w["state"] in ("succeeded", "failed", "canceled") and all(a["ended_at"] for a in w["attempts"])
            else None
        )

    def attempt_log(self, host: str, attempt_id: int) -> str:
        """The agent's log of attempt ``attempt_id`` (primary key; the agent files it by wire id)."""
        if attempt_id not in self.wire_ids:
            self.wire_ids[attempt_id] = self.sql("select wire_id from scheduler_attempt where id = %s", attempt_id)[0][
                0
            ]
        path = self.state_dirs[host] / "attempts" / f"{self.wire_ids[attempt_id]}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def hellos(self, host: str) -> int:
        return self.sql(
            "select count(*) from scheduler_hostevent e join scheduler_host h on h.id = e.host_id "
            "where h.name = %s and e.kind = 'hello'",
            host,
        )[0][0]


def _with_db(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


@contextlib.contextmanager
def _fresh_database() -> Iterator[str]:
    import psycopg

    name = f"fairway_prodlayout_{os.getpid()}"
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
        conn.execute(f'create database "{name}"')
    try:
        yield _with_db(DATABASE_URL, name)
    finally:
        with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


SEED = """
import json
from datetime import timedelta
from accounts.models import ApiTokenInfo, User
from accounts.services import create_api_token, do_add_membership
from budgets.services import do_create_budget
from scheduler.services import do_create_cluster, do_create_join_token
cluster = do_create_cluster("prod")
cluster.allow_root_workloads = True  # the agents run attempts as themselves: root here
cluster.save(update_fields=["allow_root_workloads"])
org = do_create_budget(name="org", parent=None)
lab = do_create_budget(name="lab", parent=org)
user = User.objects.create_user("rita", password=None)
do_add_membership(user, lab)
_, token = create_api_token(user, name="e2e", kind=ApiTokenInfo.Kind.PERSONAL)
joins = {h: do_create_join_token(None, cluster, timedelta(hours=1), h)[1] for h in ("h1", "h2")}
print("SEED " + json.dumps({"token": token, "joins": joins}))
"""


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("prodlayout")
    with contextlib.ExitStack() as cleanup:
        db_url = cleanup.enter_context(_fresh_database())
        redis_url = cleanup.enter_context(own_redis_db(REDIS_URL))
        env = server_env(db_url, redis_url, root / "var")
        (root / "var").mkdir()
        procs = Processes(root / "logs", env)
        balancers: list[Balancer] = []
        state_dirs: list[Path] = []

        def teardown() -> None:
            # Agents first (their attempts outlive them: killed from the state records), then the rest.
            t = time.monotonic()
            stubborn = procs.stop_all(first=["agent-h1", "agent-h2"])
            print(
                f"prodlayout: processes stopped in {time.monotonic() - t:.1f}s (SIGKILL needed: {stubborn or 'none'})"
            )
            for state in state_dirs:
                kill_attempt_processes(state)
            for balancer in balancers:
                balancer.close()

        cleanup.callback(teardown)
        t0 = time.monotonic()
        # As a release does it: static files and migrations, then every process at once (the seed,
        # an admin's `manage.py shell`, meanwhile).
        collect = procs.start("collectstatic", [PY, "manage.py", "collectstatic", "--noinput", "-v0"])
        procs.run("migrate", [PY, "manage.py", "migrate", "--noinput", "-v0"], timeout=120)
        seeding = procs.start("seed", [PY, "manage.py", "shell", "-v0", "-c", SEED])
        procs.start(
            "worker",
            [PY, "manage.py", "rundramatiq", "--queues", "scheduler", "notifications", "default",
             "--processes", "1", "--threads", "2"],
        )  # fmt: skip
        procs.start(
            "estimates",
            ["nice", "-n", "10", PY, "manage.py", "rundramatiq", "--queues", "estimates", "--processes", "1",
             "--threads", "1"],
        )  # fmt: skip
        procs.start("clock", [PY, "manage.py", "clock"])
        assert collect.wait(60) == 0, procs.tail("collectstatic")
        ports = {"web1": free_port(), "web2": free_port()}
        for name, port in ports.items():
            procs.start(name, web_argv(port))
        assert seeding.wait(60) == 0, procs.tail("seed")
        out = procs.output("seed")
        seed = json.loads(next(line for line in out.splitlines() if line.startswith("SEED "))[5:])
        stack = Stack(procs, db_url, ports, seed["token"])
        for api in (stack.api1, stack.api2):
            stack.wait(lambda api=api: api.get("me/", timeout=2), 60, f"{api.base_url} to answer")

        # Two hosts join as in production (single-use join token → host token), each through another web.
        agent_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRWAY_")}
        # Attempts run as the agent's own user: this Python is under a private home (docs/isolation.md).
        agent_env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", FAIRWAY_ISOLATION=AGENT_ISOLATION)
        joins = {}
        for host, api in (("h1", stack.api1), ("h2", stack.api2)):
            state = root / host / "state"
            state_dirs.append(state)
            stack.state_dirs[host] = state
            argv = [
                PY, "-m", "agent", "join", "--server", api.base_url, "--config", str(root / host / "agent.yaml"),
                "--host-name", host, "--state-dir", str(state), "--gpu-backend", "fake",
                "--gpus", str(GPUS_PER_HOST), "--model", "H100",
            ]  # fmt: skip
            joins[host] = procs.start(f"join-{host}", argv, {**agent_env, "FAIRWAY_JOIN_TOKEN": seed["joins"][host]})
        for host, proc in joins.items():
            assert proc.wait(60) == 0, procs.tail(f"join-{host}")

        prefer = {"h1": [ports["web1"], ports["web2"]], "h2": [ports["web2"], ports["web1"]]}
        for host in ("h1", "h2"):
            balancer = Balancer(prefer[host])
            balancers.append(balancer)
            stack.balancers[host] = balancer
            argv = [
                PY, "-m", "agent", "run", "--config", str(root / host / "agent.yaml"),
                "--server", f"ws://127.0.0.1:{balancer.port}/ws/agent/",
                "--heartbeat", "0.5", "--backoff-max", "1",
            ]  # fmt: skip
            procs.start(f"agent-{host}", argv, agent_env)
        stack.wait(
            lambda: (
                {h["name"]: h["state"] for h in stack.api1.get("hosts/?cluster=prod")}
                == {"h1": "active", "h2": "active"}
                and stack.hellos("h1") >= 1
                and stack.hellos("h2") >= 1
            ),
            30,
            "both agents to say hello",
        )
        assert stack.balancers["h1"].current_backend() == ports["web1"]
        assert stack.balancers["h2"].current_backend() == ports["web2"]
        assert "agent of host h1 connected" in procs.output("web1"), procs.report()
        assert "agent of host h2 connected" in procs.output("web2"), procs.report()
        print(f"prodlayout: stack up in {time.monotonic() - t0:.1f}s; logs in {procs.logs}")
        stack.started = time.monotonic()
        yield stack
        print(f"prodlayout: scenario {time.monotonic() - stack.started:.1f}s")


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest, prod: Stack) -> Iterator[None]:
    """Print every process's log tail when the test failed (bypassing output capture)."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(f"\n----- process logs after {request.node.name} -----\n{prod.procs.report()}", file=sys.stderr)


def _needs(prod: Stack, *roles: str) -> None:
    missing = [r for r in roles if r not in prod.workloads]
    if missing:
        pytest.skip(f"an earlier step did not submit {', '.join(missing)}")


# --- the scenario (in order) ---------------------------------------------------------------------


def test_a_one_gpu_workload_runs_and_succeeds(prod: Stack) -> None:
    wid = prod.submit("single", gpus=1, duration=1, api=prod.api2)
    w = prod.wait(lambda: prod.final(wid), 30, "the 1-GPU workload to end")
    ((attempt),) = w["attempts"]
    assert (w["state"], attempt["end_reason"], attempt["exit_code"]) == ("succeeded", "succeeded", 0), w
    assert attempt["charged_gpu_seconds"] >= 1
    assert "standin: done" in prod.attempt_log(attempt["host"], attempt["id"])
    prod.expected["single"] = ("succeeded", ["succeeded"])


def test_a_gang_spanning_both_hosts_starts_on_both(prod: Stack) -> None:
    wid = prod.submit("gang", gpus=2 * GPUS_PER_HOST, duration=4)
    attempt = prod.wait(lambda: prod.running_attempt(wid), 30, "the gang to run")
    assert sorted(g.split(":")[0] for g in attempt["gpus"]) == ["h1", "h1", "h2", "h2"], attempt
    # Each host's agent runs its part (rank order): both stand-ins print their first line.
    prod.wait(
        lambda: all("standin: running" in prod.attempt_log(h, attempt["id"]) for h in ("h1", "h2")),
        15,
        "both parts of the gang to start",
    )
    for host in ("h1", "h2"):
        assert "CUDA_VISIBLE_DEVICES=0,1" in prod.attempt_log(host, attempt["id"])
    prod.expected["gang"] = ("succeeded", ["succeeded"])


def test_the_gang_ends_succeeded_on_both_hosts(prod: Stack) -> None:
    _needs(prod, "gang")
    w = prod.wait(lambda: prod.final(prod.workloads["gang"]), 30, "the gang to end")
    ((attempt),) = w["attempts"]
    assert (w["state"], attempt["end_reason"], attempt["exit_code"]) == ("succeeded", "succeeded", 0), w
    # The first part to exit releases its host's GPUs and stops the other part (unless it exited too);
    # the attempt ends when both have reported (brk36). Either way both processes are gone and neither ran again.
    prod.wait(
        lambda: all(
            "standin: done" in (log := prod.attempt_log(h, attempt["id"])) or "SIGTERM received" in log
            for h in ("h1", "h2")
        ),
        10,
        "both parts of the gang to finish",
    )
    assert any("standin: done" in prod.attempt_log(h, attempt["id"]) for h in ("h1", "h2"))


def test_a_running_workload_is_canceled(prod: Stack) -> None:
    wid = prod.submit("cancel-me", gpus=2, duration=120, api=prod.api2)
    attempt = prod.wait(lambda: prod.running_attempt(wid), 30, "the workload to run")
    prod.wait(lambda: "standin: running" in prod.attempt_log(attempt["host"], attempt["id"]), 10, "its process")
    prod.api2.post(f"workloads/{wid}/cancel/", expect=202)  # a stop was issued: 202 with `stop`
    w = prod.wait(lambda: prod.final(wid), 20, "the canceled workload to end")
    ((ended),) = w["attempts"]
    assert (w["state"], ended["end_reason"], ended["exit_code"]) == ("canceled", "canceled", 143), w
    assert "SIGTERM received" in prod.attempt_log(ended["host"], ended["id"])
    prod.expected["cancel-me"] = ("canceled", ["canceled"])


def test_kill_9_of_a_web_process_loses_nothing(prod: Stack) -> None:
    # Given work running on both hosts, h1's agent on web 1 and h2's on web 2
    assert prod.balancers["h2"].current_backend() == prod.ports["web2"]
    a, b = (prod.submit(f"survivor-{i}", gpus=GPUS_PER_HOST, duration=6) for i in (1, 2))
    running = [prod.wait(lambda w=w: prod.running_attempt(w), 30, f"workload {w} to run") for w in (a, b)]
    assert sorted(r["host"] for r in running) == ["h1", "h2"], running
    hellos = prod.hellos("h2")

    # When web 2 is killed with SIGKILL (no goodbye to anyone)
    prod.procs.kill9("web2")
    assert not prod.procs.alive("web2")
    # and work is submitted meanwhile through web 1: a gang, so that its start reaches both agents
    late = prod.submit("late", gpus=2 * GPUS_PER_HOST, duration=1)

    # Then h2's agent reconnects through its balancer to web 1 and says hello again there
    prod.wait(lambda: prod.hellos("h2") > hellos, 20, "h2's agent to say hello again")
    assert prod.balancers["h2"].current_backend() == prod.ports["web1"]
    assert "agent of host h2 connected" in prod.procs.output("web1")
    assert prod.balancers["h1"].current_backend() == prod.ports["web1"]  # h1 never noticed
    # and web 2, restarted, serves again
    prod.procs.restart("web2")
    prod.wait(lambda: prod.api2.get("me/", timeout=2), 30, "web 2 to answer again")

    # and every workload ends as it would have without the kill: one attempt each, succeeded
    for wid in (a, b, late):
        w = prod.wait(lambda wid=wid: prod.final(wid), 30, f"workload {wid} to end")
        assert [(x["end_reason"], x["exit_code"]) for x in w["attempts"]] == [("succeeded", 0)], w
        assert w["state"] == "succeeded", w
    # and the survivors were charged for their whole real run (6 s on 2 GPUs), not cut at the kill
    for wid in (a, b):
        (attempt,) = prod.workload(wid)["attempts"]
        assert 2 * 5 <= attempt["charged_gpu_seconds"] <= 2 * 10, attempt
    # the late gang ran on both hosts: web 1 now relays the worker's commands to both agents
    (attempt,) = prod.workload(late)["attempts"]
    assert all("standin: running" in prod.attempt_log(h, attempt["id"]) for h in ("h1", "h2")), attempt
    for name in ("survivor-1", "survivor-2", "late"):
        prod.expected[name] = ("succeeded", ["succeeded"])
    hosts = {h["name"]: h["state"] for h in prod.api2.get("hosts/?cluster=prod")}
    assert hosts == {"h1": "active", "h2": "active"}, hosts


SIGTERM_EXIT_BOUND_S = 10.0
"""How long a SIGTERM'd web process with connected agents may take to exit (about 0.1-1 s here).
Generous for a loaded box; the behaviour checked is that it does not wait for its agents until the
30 s graceful timeout (``--timeout-graceful-shutdown 30``, the Procfile's) but closes their
websockets at once (1012) and ends their channel-layer reads (scheduler/consumers.py)."""


def test_sigterm_of_a_web_process_closes_its_agents_and_exits_promptly(prod: Stack) -> None:
    # Given the agents of web 1 (both since the kill -9 above moved h2 there) and work running
    on_web1 = [h for h in ("h1", "h2") if prod.balancers[h].current_backend() == prod.ports["web1"]]
    assert on_web1, {h: b.current_backend() for h, b in prod.balancers.items()}
    wid = prod.submit("deployed", gpus=GPUS_PER_HOST, duration=8)
    prod.wait(lambda: prod.running_attempt(wid), 30, "the workload to run")
    hellos = {h: prod.hellos(h) for h in on_web1}

    # When web 1 gets SIGTERM, as a deploy's process manager sends it
    t = time.monotonic()
    prod.procs.procs["web1"].send_signal(signal.SIGTERM)
    try:
        prod.procs.procs["web1"].wait(SIGTERM_EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        prod.procs.kill9("web1")
        raise AssertionError(
            f"web 1 still ran {SIGTERM_EXIT_BOUND_S:g}s after SIGTERM:\n{prod.procs.tail('web1')}"
        ) from None
    print(f"prodlayout: web 1 exited {time.monotonic() - t:.1f}s after SIGTERM")
    # uvicorn re-raises the SIGTERM it handled once shut down: killed by it, after a clean shutdown
    assert prod.procs.procs["web1"].returncode in (0, -signal.SIGTERM), prod.procs.tail("web1")

    # Then its agents reconnect through their balancers to web 2 and say hello there
    for host in on_web1:
        prod.wait(lambda host=host: prod.hellos(host) > hellos[host], 20, f"{host}'s agent to say hello again")
        assert prod.balancers[host].current_backend() == prod.ports["web2"]
    assert "close code 1012" in prod.procs.output("agent-" + on_web1[0]), prod.procs.tail("agent-" + on_web1[0])
    # and web 1, restarted, serves again
    prod.procs.restart("web1")
    prod.wait(lambda: prod.api1.get("me/", timeout=2), 30, "web 1 to answer again")
    # and the work running at the restart ends as it would have: one attempt, succeeded
    w = prod.wait(lambda: prod.final(wid), 30, "the workload to end")
    assert [(x["end_reason"], x["exit_code"]) for x in w["attempts"]] == [("succeeded", 0)], w
    (attempt,) = w["attempts"]
    assert GPUS_PER_HOST * 7 <= attempt["charged_gpu_seconds"] <= GPUS_PER_HOST * 12, attempt
    prod.expected["deployed"] = ("succeeded", ["succeeded"])


def test_nothing_was_lost(prod: Stack) -> None:
    # Every workload the scenario submitted is in its expected final state, with the expected
    # attempts (none lost, none requeued, none run twice), read from the restarted web process.
    if not prod.expected:
        pytest.skip("no earlier step of the scenario ran")
    got = {}
    for name, wid in prod.workloads.items():
        w = prod.workload(wid, api=prod.api2)
        got[name] = (w["state"], [a["end_reason"] for a in w["attempts"]])
    assert {n: got[n] for n in prod.expected} == prod.expected
    lost = prod.sql("select count(*) from scheduler_attempt where end_reason in ('lost', 'failed_to_start')")
    assert lost == [(0,)]
    open_gpus = prod.sql("select count(*) from scheduler_attemptgpu where open")
    assert open_gpus == [(0,)]
    assert prod.procs.alive("worker") and prod.procs.alive("estimates") and prod.procs.alive("clock")
    assert prod.procs.alive("agent-h1") and prod.procs.alive("agent-h2")
    print(f"prodlayout: scenario so far {time.monotonic() - prod.started:.1f}s")


PROBE_HOST = """
from scheduler.services import do_create_cluster, do_register_host
host, token = do_register_host(do_create_cluster("probe"), "h3", [(0, "GPU-h3-0", "H100", 81559)])
print("PROBE " + token)
"""


async def _report_starts_and_leave(port: int, token: str, wire_ids: list[int]) -> None:
    """A fake agent of host h3 on web ``port``: hello, then a ``started`` of each of ``wire_ids``,
    then it closes its websocket at once (an agent leaving, its events read but not yet handled)."""
    import websockets

    from agent import protocol

    async with websockets.connect(
        f"ws://127.0.0.1:{port}/ws/agent/", additional_headers={"Authorization": f"Bearer {token}"}
    ) as ws:
        gpu = protocol.GpuInfo(0, "GPU-h3-0", "H100", 81559, "healthy")
        await ws.send(protocol.encode(protocol.Hello(id=1, host="h3", agent_version="probe", gpus=[gpu], attempts=[])))
        while not isinstance(protocol.decode(await asyncio.wait_for(ws.recv(), 20)), protocol.Welcome):
            pass
        for seq, wire_id in enumerate(wire_ids, start=2):
            await ws.send(protocol.encode(protocol.AttemptEvent(id=seq, attempt_id=wire_id, state="started")))


def test_sigterm_exits_promptly_while_attempt_events_wait_for_the_database(prod: Stack) -> None:
    # Given an agent that reported two attempt events and left, the first waiting for a row lock
    # (as under a busy database: 1,000 agents and 100 submissions/s left hundreds queued behind the
    # agent-database threads, and the web process outlived its stop timeout; web30), the second
    # behind it, and a lock that stays held on the second's workload
    import psycopg

    token = prod.procs.run("probe-host", [PY, "manage.py", "shell", "-v0", "-c", PROBE_HOST], timeout=60)
    token = next(line for line in token.splitlines() if line.startswith("PROBE "))[6:]
    wids = [prod.submit(f"locked-{i}", gpus=1, duration=60) for i in (1, 2)]
    for wid in wids:
        prod.wait(lambda wid=wid: prod.running_attempt(wid), 30, f"workload {wid} to run")
    wire = dict(
        prod.sql(
            "select workload_id, wire_id from scheduler_attempt where workload_id = any(%s) and ended_at is null", wids
        )
    )
    locks = [psycopg.connect(prod.db_url) for _ in wids]
    exited = None
    try:
        for conn, wid in zip(locks, wids, strict=True):
            conn.execute("select id from scheduler_workload where id = %s for update", (wid,))
        waiting = "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
        before = prod.sql(waiting)[0][0]
        asyncio.run(_report_starts_and_leave(prod.ports["web1"], token, [wire[w] for w in wids]))
        prod.wait(lambda: prod.sql(waiting)[0][0] > before, 20, "the first event to wait for its lock")

        # When web 1 gets SIGTERM, and the first event's lock is given back a second later
        t = time.monotonic()
        prod.procs.procs["web1"].send_signal(signal.SIGTERM)
        time.sleep(1.0)
        locks[0].commit()
        with contextlib.suppress(subprocess.TimeoutExpired):
            prod.procs.procs["web1"].wait(SIGTERM_EXIT_BOUND_S)
        exited = prod.procs.procs["web1"].poll()
        took = time.monotonic() - t
    finally:
        for conn in locks:
            conn.close()
        prod.procs.kill9("web1")  # still running (the failure): not waited for any longer
        prod.procs.restart("web1")
    # Then it exits within the bound: the event being handled finished, the one queued behind it
    # was left unhandled (not acknowledged: a real agent reports it again in its next hello)
    output = prod.procs.output("web1")
    assert exited is not None, f"web 1 still ran {SIGTERM_EXIT_BOUND_S:g}s after SIGTERM:\n{prod.procs.tail('web1')}"
    print(f"prodlayout: web 1 exited {took:.1f}s after SIGTERM with an attempt event waiting")
    assert "host h3: 1 messages left unhandled at disconnect (the process stops)" in output, prod.procs.tail("web1")
    prod.wait(lambda: prod.api1.get("me/", timeout=2), 30, "web 1 to answer again")
    for wid in wids:  # the next test needs every GPU
        prod.api1.post(f"workloads/{wid}/cancel/", expect=202)
    for wid in wids:
        prod.wait(lambda wid=wid: prod.final(wid), 30, f"workload {wid} to end")


# --- the known bug, last: it can break the web process that serves the request ------------------


def test_the_logs_of_a_gang_come_from_both_hosts(prod: Stack) -> None:
    # Last in the module: when the bug strikes, the web process that relayed the request may be left
    # unable to serve any agent (every consumer's receive() raises the same RuntimeError), which
    # would break the steps after it.
    wid = prod.submit("gang-logs", gpus=2 * GPUS_PER_HOST, duration=30)
    attempt = prod.wait(lambda: prod.running_attempt(wid), 30, "the gang to run")
    prod.wait(
        lambda: all("step 1 " in prod.attempt_log(h, attempt["id"]) for h in ("h1", "h2")),
        15,
        "both parts of the gang to print",
    )
    crashes = prod.procs.output("web1").count("Exception in ASGI application")
    hellos = prod.hellos("h1")

    data = prod.api1.get(f"workloads/{wid}/logs/?tail=4096", timeout=20)
    time.sleep(1.5)  # three heartbeats: does h1's connection to web 1 survive the request?

    parts = {p["host"]: p for p in data["parts"]}
    assert sorted(parts) == ["h1", "h2"], data
    web1 = prod.procs.output("web1")
    crashed = web1.count("Exception in ASGI application") - crashes
    # The bug this step once caught (fixed in scheduler/gateway.py): say so plainly if it is back.
    assert "Two event loops are trying to receive() on one channel layer" not in web1, (
        f"{GATEWAY_BUG}; parts: {json.dumps(data['parts'])}; web 1 consumers crashed since the request: "
        f"{crashed}, h1 hellos since: {prod.hellos('h1') - hellos}"
    )
    for host, part in parts.items():
        assert part["error"] is None, (host, part)
        assert "standin: running" in part["data"] or "step " in part["data"], (host, part)
    assert crashed == 0 and prod.hellos("h1") == hellos, "h1's connection to web 1 did not survive the request"
