"""pool58: every process of the production layout recovers by itself when PostgreSQL ends its sessions.

A PostgreSQL restart or failover ends every backend; simulated here by ending every session of
the test database (``pg_terminate_backend``, this database only) while the production processes
run against it, as the Procfile starts them: the web process (uvicorn, ``FAIRWAY_ENV=production``,
psycopg's pools of 1 to 4), the worker (``rundramatiq``, the scheduling ticks), the clock, and an agent
connected to the web process's websocket gateway. Nothing is in flight at that moment but the
periodic work (a tick, a beat of the clock, a heartbeat flush: each may fail once, logged), so:

- every API request after it is answered (a pooled connection the server had ended used to be
  handed out as it was: one 500 per idle connection of the pool, "terminating connection due to
  administrator command": 4 of the 12 here);
- a workload submitted after it is placed by the next ticks and run by the agent, whose websocket
  keeps working (no process is restarted);
- each process logs at most one failure (the operation in flight), never one per pooled connection
  (before: the worker 2 failed ticks and a failed sweep, the clock 2 failed beats).

The test's own process loses its connections too: its pool replaces them (the same settings).
db61: the same without the pool (``FAIRWAY_DB_POOL=false``): each unit of work opens its own
connection, and a kept one is checked before reuse (``CONN_HEALTH_CHECKS``).

Skipped without PostgreSQL (``DATABASE_URL``) and Redis (``REDIS_URL``): production runs on both.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
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
AGENT_ISOLATION = "{mode: agent, allow_root: true}"  # as tests/e2e/conftest.py: this Python is under /root

pytestmark = [
    pytest.mark.skipif(
        not DATABASE_URL.startswith(("postgres://", "postgresql://")) or not REDIS_URL.startswith("redis"),
        reason="sessions ended by PostgreSQL in the production layout: set DATABASE_URL=postgres://... and REDIS_URL",
    ),
    pytest.mark.timeout(120),
]

ERROR_LINE = re.compile(r"^\S+ \S+ ERROR ", re.MULTILINE)
"""A record of level ERROR in a process's log (config/settings.py LOGGING: one format for every
process): a failed request (django.request), tick or sweep (dramatiq), beat (the clock) or flush."""


class Layout:
    def __init__(self, procs: Processes, api: Api, db_url: str, cluster: str, budget: str, pooled: bool) -> None:
        self.pooled = pooled
        self.procs = procs
        self.api = api
        self.db_url = db_url
        self.cluster = cluster
        self.budget = budget

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.db_url, autocommit=True) as conn:
            return conn.execute(query, args).fetchall()

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        return wait_for(predicate, timeout, what, self.procs.report)

    def submit(self, name: str) -> tuple[int, Any]:
        body = {
            "name": name,
            "budget": self.budget,
            "cluster": self.cluster,
            "gpu_model": "H100",
            "gpu_count": 1,
            "command": [PY, "-m", "agent.standin", "--duration", "0.5"],
            "env": {"PYTHONPATH": str(REPO)},
            "min_runtime": 60,
        }
        return self.api.call("POST", "workloads/", body)

    def state(self, wid: int) -> str:
        return str(self.api.get(f"workloads/{wid}/", timeout=5)["state"])

    def end_every_session(self) -> list[int]:
        """What a PostgreSQL restart does to this database's sessions (only this database's); returns
        once every ended backend is gone."""
        import psycopg

        with psycopg.connect(self.db_url, autocommit=True) as conn:
            ended = [
                pid
                for pid, done in conn.execute(
                    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchall()
                if done
            ]
            deadline = time.monotonic() + 10
            while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (ended,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the ended backends did not exit"
                time.sleep(0.02)
        return ended

    def errors_logged(self) -> dict[str, int]:
        return {name: len(ERROR_LINE.findall(self.procs.output(name))) for name in ("web", "worker", "clock")}


def _seed() -> tuple[str, str, str]:
    """A cluster with host h1 (2 fake H100), a budget and its member; the API token and the host's token."""
    from accounts.models import User
    from accounts.services import create_api_token, do_add_membership
    from agent.gpu.fake import fake_gpu_uuid
    from budgets.models import Budget
    from scheduler.models import Cluster
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="failover", allow_root_workloads=True)
    lab = Budget.objects.create(name="lab", parent=Budget.objects.create(name="org"))
    user = User.objects.create_user("rita", password=None)
    do_add_membership(user, lab)
    _, api_token = create_api_token(user)
    gpus = [(i, fake_gpu_uuid("h1", i), "H100", 81920) for i in range(2)]
    _host, host_token = do_register_host(cluster, "h1", gpus, {})
    return api_token, host_token, "org/lab"


@pytest.fixture(params=[True, False], ids=["pool", "no-pool"])
def layout(request: pytest.FixtureRequest, transactional_db: None, tmp_path: Path) -> Iterator[Layout]:
    """The production layout, its processes with psycopg's pool (the default) or without (db61:
    ``FAIRWAY_DB_POOL=false``)."""
    from django.db import connection

    pooled: bool = request.param

    api_token, host_token, budget = _seed()
    db_url = urlunparse(urlparse(DATABASE_URL)._replace(path=f"/{connection.settings_dict['NAME']}"))
    with contextlib.ExitStack() as cleanup:
        redis_url = cleanup.enter_context(own_redis_db(REDIS_URL))
        (tmp_path / "var").mkdir()
        env = server_env(db_url, redis_url, tmp_path / "var")  # pools of 1 to 4
        if not pooled:
            env["FAIRWAY_DB_POOL"] = "false"
        procs = Processes(tmp_path / "logs", env)
        state_dir = tmp_path / "agent"

        @cleanup.callback
        def teardown() -> None:
            procs.stop_all(first=["agent"])
            kill_attempt_processes(state_dir)
            # This process's sessions were ended too: its connection is replaced before the flush.
            connection.close()

        port = free_port()
        procs.start("web", web_argv(port))
        procs.start("worker", [PY, "manage.py", "rundramatiq", "--queues", "scheduler", "notifications",
                               "default", "--processes", "1", "--threads", "2"])  # fmt: skip
        procs.start("clock", [PY, "manage.py", "clock"])
        agent_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRWAY_")}
        agent_env.update(
            PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", FAIRWAY_ISOLATION=AGENT_ISOLATION, FAIRWAY_TOKEN=host_token
        )
        procs.start(
            "agent",
            [PY, "-m", "agent", "run", "--server", f"ws://127.0.0.1:{port}/ws/agent/",
             "--host-name", "h1", "--gpus", "2", "--model", "H100", "--state-dir", str(state_dir),
             "--heartbeat", "0.5", "--backoff-max", "1"],
            agent_env,
        )  # fmt: skip
        the = Layout(procs, Api(f"http://127.0.0.1:{port}", api_token), db_url, "failover", budget, pooled)
        the.wait(lambda: the.api.get("me/", timeout=2), 60, "the web process to answer")
        the.wait(
            lambda: the.sql("SELECT agent_version FROM scheduler_host WHERE name = 'h1'")[0][0], 60, "the agent's hello"
        )
        yield the


def test_every_process_recovers_when_postgresql_ends_its_sessions(layout: Layout) -> None:
    # Given the layout at work: a workload placed and run, and the web process's pool holding
    # several connections (concurrent requests)
    status, before = layout.submit("before")
    assert status == 201, before
    layout.wait(lambda: layout.state(before["id"]) == "succeeded", 30, "the first workload to succeed")
    with concurrent.futures.ThreadPoolExecutor(8) as requests:
        assert all(s == 200 for s, _ in requests.map(lambda _: layout.api.call("GET", "workloads/"), range(24)))
    assert layout.errors_logged() == {"web": 0, "worker": 0, "clock": 0}, layout.procs.report()
    # When PostgreSQL ends every session of the database (a restart, a failover)
    ended = layout.end_every_session()
    # the web process's pooled ones, the worker's, the clock's; without pools, what was open then
    assert len(ended) >= (4 if layout.pooled else 1), ended
    killed_at = time.monotonic()

    # Then the next requests are all answered, at once
    answers, took = [], []
    for path in ["me/", "workloads/", "hosts/", "workloads/"] * 3:
        began = time.monotonic()
        answers.append(layout.api.call("GET", path))
        took.append(time.monotonic() - began)
    recovered_s = time.monotonic() - killed_at
    failed = [(status, body) for status, body in answers if status != 200]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed after the sessions ended: {failed}"
    # a write too, applied once
    status, after = layout.submit("after")
    assert status == 201, after
    # and the next ticks place it, the agent (its websocket kept or reconnected) runs it
    layout.wait(lambda: layout.state(after["id"]) == "succeeded", 30, "the workload submitted after to succeed")
    ran_s = time.monotonic() - killed_at
    workloads = sorted((w["name"], w["state"]) for w in layout.api.get("workloads/")["results"])
    assert workloads == [("after", "succeeded"), ("before", "succeeded")]
    # no process needed a restart; each logged at most the one operation in flight at the kill
    assert all(layout.procs.alive(name) for name in ("web", "worker", "clock", "agent")), layout.procs.report()
    logged = layout.errors_logged()
    print(
        f"pool58 ({'pool' if layout.pooled else 'no pool'}): "
        f"{len(ended)} sessions ended; {len(answers)} requests answered in {recovered_s:.2f}s "
        f"(slowest {max(took):.2f}s); the workload submitted next ran {ran_s:.1f}s after; errors logged: {logged}"
    )
    assert all(n <= 1 for n in logged.values()), f"{logged}\n{layout.procs.report()}"
