"""The API on the production process layout under an open-loop load (issue 15). Prints, asserts nothing.

    python bench/api_load.py [--rate 100] [--duration 60] [--web-workers 2] [--url URL]

What it does, all on loopback, with a database and a Redis database of its own:

1. Creates the PostgreSQL database ``fairway_api_bench_<pid>`` on ``DATABASE_URL``'s server
   (default ``postgres://postgres@127.0.0.1:5432/``), migrates it, and seeds a lab: 64 hosts × 8
   H100 (``--hosts``, ``--gpus``), 4 groups × 5 projects (20 leaf budgets), 40 users each a member
   of 2 projects with a personal API token, and ``--seed-workloads`` submissions (1, 2, 4 or 8
   GPUs) of which about 1,000 stay pending once the first tick has filled the cluster. Claims a
   free Redis database number (1..15, marker key) on ``REDIS_URL``'s server.
2. Starts every line of the Procfile unchanged (``web``, ``worker``, ``estimates``, ``clock``;
   ``bash -c``, each in a process group of its own, logs in a temporary directory) with ``FAIRWAY_ENV=production``,
   ``WEB_WORKERS=--web-workers``, ``WORKER_PROCESSES``/``WORKER_THREADS``, plus a process of fake
   agents (``bench/agents_load.py``'s agent: hello, heartbeats every 5 s, answers ``start``/``stop``),
   one websocket per host. The clock ticks every 5 s as in production.
3. Once every agent is connected and the first tick has placed work (``--settle`` s), drives an
   open-loop mix at ``--rate`` requests/s for ``--duration`` s from this process (asyncio, raw
   HTTP/1.1 keep-alive connections, no client-side queue: request *i* is sent at ``t0 + i/rate``
   whatever the answers before it, and its latency is counted from that scheduled instant, so a
   slow server cannot hide behind a slow client): 60 % submissions (a random user into one of their
   projects), 20 % detail reads (``GET /workloads/<id>/`` of a random workload), 15 % list reads
   (``GET /workloads/?limit=50``, the first page of the queue), 5 % cancels (the user's own
   workload submitted during the run).
4. Prints per endpoint the achieved rate (2xx answers / window), p50/p90/p99/max latency and the
   errors by kind (status code, ``shed`` = 503 with ``Retry-After``, ``conn`` = connection error,
   ``timeout`` after 30 s), then one line ``submit p99_ms=<n> achieved_rps=<n> errors=<n>`` of the
   submissions alone (achieved_rps: submissions answered 201 per second; errors: every other answer
   or failure, shed 503s included). Stops every process it started (SIGTERM, SIGKILL after 10 s),
   drops the database and flushes the Redis database, whatever happened.

``--url http://host:port`` drives a layout that is already running instead (nothing started,
nothing seeded): it needs ``--tokens FILE`` from an earlier ``--keep`` run (``--keep`` leaves
the layout, database and Redis running and prints how to stop them). Measured numbers and the
sizing rule they give: docs/benchmarks/api_load.md, docs/deploy.md ("Sizing the web tier").

``--timeline FILE`` writes every request (sent at, endpoint, ms, outcome) to lay slow answers
beside the processes' own logs. ``--autogroup-nice N`` (a shared box): the CPU weight of the
layout's sessions and the client's against the box's other sessions, which the kernel's
autogroups share the CPU with before ``nice`` counts (see :func:`set_autogroup_nice`); say so
with the figures, as with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DB_SERVER = "postgres://postgres@127.0.0.1:5432/"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
REDIS_MARKER = "fairway:api_load:owner"
REQUEST_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 4.0  # an idle connection is reused for this long (uvicorn closes them after 5 s)
MIX = (("submit", 0.60), ("detail", 0.20), ("list", 0.15), ("cancel", 0.05))
GROUPS, PROJECTS, USERS = 4, 5, 40


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# --- database, Redis, seed ----------------------------------------------------------------------


def _pg_kwargs(url: str) -> dict[str, Any]:
    from dj_database_url import parse

    cfg = parse(url if urlparse(url).path.strip("/") else url.rstrip("/") + "/postgres")
    if cfg["ENGINE"] != "django.db.backends.postgresql":
        raise SystemExit(f"bench/api_load.py needs PostgreSQL, DATABASE_URL={url!r}")
    kwargs = {"host": cfg["HOST"] or "127.0.0.1", "port": cfg["PORT"] or 5432, "user": cfg["USER"] or "postgres"}
    if cfg.get("PASSWORD"):
        kwargs["password"] = cfg["PASSWORD"]
    return kwargs


def create_database(server_url: str, name: str | None = None) -> str:
    """A new database of this run on ``server_url``'s server (``name``, default
    ``fairway_api_bench_<pid>``; dropped first if it exists); returns its URL."""
    import psycopg

    name = name or f"fairway_api_bench_{os.getpid()}"
    with psycopg.connect(dbname="postgres", autocommit=True, **_pg_kwargs(server_url)) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(urlparse(server_url)._replace(path=f"/{name}"))


def drop_database(url: str) -> None:
    import psycopg

    name = urlparse(url).path.strip("/")
    if "bench" not in name:
        return
    with psycopg.connect(dbname="postgres", autocommit=True, **_pg_kwargs(url)) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def claim_redis(url: str, only: int | None = None) -> str:
    """A Redis database number nobody uses (claimed with a marker key), as a URL; ``only``: that
    number or none."""
    import redis

    base = urlparse(url)
    for number in [only] if only is not None else range(15, 0, -1):
        candidate = urlunparse(base._replace(path=f"/{number}"))
        client = redis.Redis.from_url(candidate)
        try:
            if client.set(REDIS_MARKER, os.getpid(), nx=True, ex=6 * 3600):
                if client.dbsize() == 1:
                    return candidate
                client.delete(REDIS_MARKER)  # someone else's data is there
            if only is not None:  # the number asked for: say which and why, not "no free number"
                keys = client.dbsize()
                raise SystemExit(
                    f"Redis database {only} is not empty ({keys} key{'' if keys == 1 else 's'}): flush it if it is "
                    "yours, or choose another with --redis-db N (or leave --redis-db out)"
                )
        finally:
            client.close()
    raise SystemExit("no free Redis database number (1..15) for the bench")


def release_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def seed(args: argparse.Namespace) -> dict[str, Any]:
    """Migrate and seed the lab (see the module docstring); returns the tokens and host tokens."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accounts.models import ApiTokenInfo, User
    from accounts.services import create_api_token, do_add_membership
    from budgets.services import do_create_budget
    from scheduler.services import do_create_cluster, do_register_host, do_submit_workload

    cluster = do_create_cluster("bench")
    org = do_create_budget(name="org", parent=None)
    leaves = []
    for g in range(GROUPS):
        group = do_create_budget(name=f"group{g}", parent=org, shares=g + 1)
        leaves += [do_create_budget(name=f"p{p}", parent=group) for p in range(PROJECTS)]
    rng = random.Random(15)
    users: list[dict[str, Any]] = []
    for u in range(USERS):
        user = User.objects.create_user(f"user{u:02d}", password=None)
        mine = rng.sample(leaves, 2)
        for leaf in mine:
            do_add_membership(user, leaf)
        _instance, token = create_api_token(user, name="bench", kind=ApiTokenInfo.Kind.PERSONAL)
        users.append({"name": user.username, "token": token, "budgets": [b.path for b in mine], "obj": user})
    hosts = []
    for i in range(args.hosts):
        name = f"api-{i:04d}"
        specs = [(g, f"GPU-{name}-{g}", "H100", 81559) for g in range(args.gpus)]
        _host, token = do_register_host(cluster, name, specs)
        hosts.append((name, token))
    # The queue's backlog, written in bulk (as bench/tick_db.py does; one submission through the
    # service first, so the rows are those it writes): submitted events, seq = id.
    from django.db.models import F
    from django.utils import timezone

    from scheduler.models import Workload, WorkloadEvent

    began = time.monotonic()
    first = users[0]
    template = do_submit_workload(
        first["obj"],
        name="seed-0",
        budget=first["budgets"][0],
        cluster=cluster,
        gpu_model="H100",
        gpu_count=1,
        image="ghcr.io/lab/train:1",
        command=["python", "train.py"],
        env={"WANDB_PROJECT": "bench"},
        min_runtime_s=3600,
    )
    paths = {b.path: b for b in leaves}
    now = timezone.now()
    rows = []
    for i in range(1, args.seed_workloads):
        user = rng.choice(users)
        rows.append(
            Workload(
                name=f"seed-{i}",
                owner=user["obj"],
                budget=paths[rng.choice(user["budgets"])],
                cluster=cluster,
                gpu_model="H100",
                gpu_count=rng.choice([1, 2, 4, 8]),
                image=template.image,
                command=template.command,
                env=template.env,
                min_runtime_s=rng.choice([0, 3600]),
                submitted_at=now,
                state=Workload.State.PENDING,
            )
        )
    created = Workload.objects.bulk_create(rows, batch_size=500)
    Workload.objects.filter(seq__isnull=True).update(seq=F("id"))
    WorkloadEvent.objects.bulk_create(
        [
            WorkloadEvent(workload=w, at=now, kind="submitted", actor=w.owner, message=f"submitted to {w.budget.path}")
            for w in created
        ],
        batch_size=500,
    )
    print(
        f"seed: {args.hosts} hosts × {args.gpus} GPUs, {len(leaves)} projects, {USERS} users, "
        f"{args.seed_workloads} pending workloads written in {time.monotonic() - began:.1f}s"
    )
    from django.db import connection

    connection.close()
    return {"users": [{k: v for k, v in u.items() if k != "obj"} for u in users], "hosts": hosts}


# --- the layout's processes ---------------------------------------------------------------------


def procfile_lines() -> dict[str, str]:
    lines = {}
    for raw in (ROOT / "Procfile").read_text().splitlines():
        if raw.strip() and not raw.lstrip().startswith("#") and ":" in raw:
            name, command = raw.split(":", 1)
            lines[name.strip()] = command.strip()
    return lines


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_by_group(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by every process of each process group, and by
    every PostgreSQL process of the machine (``postgres``: all databases, others' too)."""
    out = dict.fromkeys([*groups, "postgres"], 0.0)
    names = {pgid: name for name, pgid in groups.items()}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        name = names.get(int(fields[2]))
        if name is not None:
            out[name] += seconds
        elif comm.startswith("postgres"):
            out["postgres"] += seconds
    return out


def set_autogroup_nice(nice: int) -> None:
    """The CPU weight of this process's session against other sessions (``--autogroup-nice``).

    With the kernel's autogroups on (``/proc/sys/kernel/sched_autogroup_enabled``, the default of
    most distributions), the scheduler first shares the CPU equally between *sessions* and only
    then by ``nice`` within one: another session's program at ``nice 19`` gets as much CPU as all
    the layout's web processes together. A shared box's benches then measure the others' load, not
    the layout; giving the layout's sessions (each process of the Procfile is one, as under systemd)
    a weight above the others' restores what ``nice 19`` meant for them. Needs root below 0."""
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
        f.write(str(nice))


class Layout:
    """The Procfile's processes plus the fake agents, each in a process group of its own."""

    def __init__(self, env: dict[str, str], logs: Path, autogroup_nice: int | None = None) -> None:
        self.env, self.logs, self.autogroup_nice = env, logs, autogroup_nice
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> None:
        nice = self.autogroup_nice
        with (self.logs / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(  # noqa: S603 -- the Procfile's own lines, this interpreter
                argv,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=None if nice is None else lambda: set_autogroup_nice(nice),
            )

    def check(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited ({proc.returncode}); its log: {self.logs / (name + '.log')}")

    def stop(self, grace: float = 10.0) -> list[str]:
        """SIGTERM to every group (the agents first: the web processes then have no websocket to
        wait for), SIGKILL to those still alive after ``grace``; returns those."""
        agents = self.procs.get("agents")
        if agents is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agents.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                agents.wait(5)
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        stubborn = []
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stubborn.append(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # uvicorn's or dramatiq's children, too
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        return stubborn


def server_env(args: argparse.Namespace, db_url: str, redis_url: str, var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRWAY_", "DJANGO_", "SECURE_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        DATABASE_URL=db_url,
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
        FAIRWAY_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECURE_SSL_REDIRECT="false",  # no TLS-terminating proxy on loopback
        FAIRWAY_VAR_DIR=str(var_dir),
        HOST="127.0.0.1",
        PORT=str(args.port),
        WEB_WORKERS=str(args.web_workers),
        WORKER_PROCESSES=str(args.worker_processes),
        WORKER_THREADS=str(args.worker_threads),
        LOG_LEVEL="WARNING",
    )
    for extra in args.env:
        key, _, value = extra.partition("=")
        env[key] = value
    return env


def run_agents(spec: str) -> None:
    """``--agents-proc FILE``: one websocket agent per host of FILE until SIGTERM."""
    from bench.agents_load import Stats, agent

    hosts, url, gpus, out = json.loads(Path(spec).read_text())

    async def main() -> None:
        stats, stop = Stats(), asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        tasks = [asyncio.create_task(agent(name, token, url, gpus, 5.0, stats, stop)) for name, token in hosts]

        async def report() -> None:
            while not stop.is_set():
                state = json.dumps({"connected": stats.connected, "errors": stats.errors[:20]})
                Path(out).write_text(state)  # noqa: ASYNC240 -- a few bytes a second
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

        await asyncio.gather(report(), *tasks)

    asyncio.run(main())


def wait_ready(base: str, layout: Layout | None, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if layout is not None:
            layout.check()
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/livez", timeout=2) as answer:  # noqa: S310
            if answer.status == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"the web processes did not answer {base}/livez within {timeout:.0f}s")


# --- the load client ----------------------------------------------------------------------------


class Http:
    """HTTP/1.1 keep-alive connections to one server; a request takes an idle one or opens one."""

    def __init__(self, base: str) -> None:
        parsed = urlparse(base)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.opened = 0

    async def request(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Token {token}\r\n"
            f"Accept: application/json\r\nContent-Length: {len(payload)}\r\n"
            + ("Content-Type: application/json\r\n" if body is not None else "")
            + "\r\n"
        ).encode()
        while self.idle:
            reader, writer, since = self.idle.pop()
            if time.monotonic() - since < KEEP_ALIVE_S:
                try:
                    return await self._exchange(reader, writer, head + payload)
                except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
                    if getattr(exc, "answered", False):
                        raise
                    # The server closed this idle connection meanwhile: not the request's fault.
            writer.close()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        return await self._exchange(reader, writer, head + payload)

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        try:
            writer.write(data)
            await writer.drain()
            status_line = await reader.readline()
            if not status_line:
                raise ConnectionError("connection closed by the server")
        except BaseException:
            writer.close()
            raise
        try:
            status = int(status_line.split()[1])
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = line.decode("latin-1").partition(":")
                headers[key.strip().lower()] = value.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = b""
                while (size := int((await reader.readline()).strip() or b"0", 16)) > 0:
                    body += await reader.readexactly(size)
                    await reader.readline()
                await reader.readline()
            else:
                body = await reader.readexactly(int(headers.get("content-length", "0")))
        except BaseException as exc:
            writer.close()
            exc.answered = True  # type: ignore[attr-defined] -- the server began an answer: no retry
            raise
        if headers.get("connection", "").lower() == "close":
            writer.close()
        else:
            self.idle.append((reader, writer, time.monotonic()))
        return status, headers, body

    def close(self) -> None:
        for _reader, writer, _since in self.idle:
            writer.close()


@dataclass
class Endpoint:
    latencies: list[float] = field(default_factory=list)  # ms, 2xx answers
    errors: dict[str, int] = field(default_factory=dict)
    sent: int = 0

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class Load:
    def __init__(self, http: Http, users: list[dict[str, Any]], known: list[int], rng: random.Random) -> None:
        self.http, self.users, self.known, self.rng = http, users, known, rng
        self.stats = {name: Endpoint() for name, _share in MIX}
        self.mine: dict[str, list[int]] = {u["name"]: [] for u in users}  # submitted during the run
        self.timeline: list[tuple[float, str, float, str]] = []  # (sent at, kind, ms, outcome)
        self.t0 = 0.0

    def pick(self) -> str:
        roll, acc = self.rng.random(), 0.0
        for name, share in MIX:
            acc += share
            if roll < acc:
                return name
        return MIX[0][0]

    async def fire(self, kind: str, scheduled: float) -> None:
        user = self.rng.choice(self.users)
        body = None
        if kind == "cancel" and not self.mine[user["name"]]:
            kind = "submit"  # nothing of theirs to cancel yet
        stat = self.stats[kind]
        stat.sent += 1
        if kind == "submit":
            method, path = "POST", "/api/v1/workloads/"
            body = {
                "name": "load",
                "budget": self.rng.choice(user["budgets"]),
                "cluster": "bench",
                "gpu_model": "H100",
                "gpu_count": self.rng.choice([1, 2, 4, 8]),
                "image": "ghcr.io/lab/train:1",
                "command": ["python", "train.py", "--steps", "1000"],
                "env": {"WANDB_PROJECT": "bench"},
                "min_runtime": "1h",
            }
        elif kind == "detail":
            method, path = "GET", f"/api/v1/workloads/{self.rng.choice(self.known)}/"
        elif kind == "list":
            method, path = "GET", "/api/v1/workloads/?limit=50"
        else:
            mine = self.mine[user["name"]]
            method, path = "POST", f"/api/v1/workloads/{mine.pop(self.rng.randrange(len(mine)))}/cancel/"
        try:
            status, headers, data = await asyncio.wait_for(
                self.http.request(method, path, user["token"], body), REQUEST_TIMEOUT_S
            )
        except TimeoutError:
            stat.error("timeout")
            self.timeline.append((scheduled - self.t0, kind, (time.monotonic() - scheduled) * 1000, "timeout"))
            return
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
            stat.error("conn")
            self.timeline.append((scheduled - self.t0, kind, (time.monotonic() - scheduled) * 1000, "conn"))
            return
        self.timeline.append((scheduled - self.t0, kind, (time.monotonic() - scheduled) * 1000, str(status)))
        if 200 <= status < 300:
            stat.latencies.append((time.monotonic() - scheduled) * 1000)
            if kind == "submit":
                wid = json.loads(data)["id"]
                self.known.append(wid)
                self.mine[user["name"]].append(wid)
        elif status == 503 and "retry-after" in headers:
            stat.error("shed")
        else:
            stat.error(str(status))

    async def run(self, rate: float, duration: float) -> float:
        tasks: set[asyncio.Task[None]] = set()
        t0 = self.t0 = time.monotonic()
        n = int(rate * duration)
        for i in range(n):
            scheduled = t0 + i / rate
            delay = scheduled - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self.fire(self.pick(), scheduled))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        window = max(duration, time.monotonic() - t0)
        if tasks:
            await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S + 5)
        return window


def report(load: Load, rate: float, window: float) -> None:
    print(f"{'endpoint':<8} {'sent':>6} {'ok/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}  errors")
    total_ok = total_err = 0
    for name, stat in load.stats.items():
        ok = len(stat.latencies)
        total_ok += ok
        total_err += sum(stat.errors.values())
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(stat.errors.items())) or "0"
        print(
            f"{name:<8} {stat.sent:>6} {ok / window:>7.1f} {pct(stat.latencies, 50):>8.1f} "
            f"{pct(stat.latencies, 90):>8.1f} {pct(stat.latencies, 99):>8.1f} "
            f"{max(stat.latencies, default=float('nan')):>8.1f}  {errors}"
        )
    reads = load.stats["detail"].latencies + load.stats["list"].latencies
    print(
        f"all: offered {rate:g} req/s, achieved {total_ok / window:.1f} req/s (2xx), errors {total_err}; "
        f"reads p99 {pct(reads, 99):.1f} ms; client connections opened {load.http.opened}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    submit = load.stats["submit"]
    print(
        f"submit p99_ms={pct(submit.latencies, 99):.0f} achieved_rps={len(submit.latencies) / window:.1f} "
        f"errors={sum(submit.errors.values())}"
    )


def write_timeline(path: str, load: Load) -> None:
    """Every request of the run, in the order sent: ``sent_s`` (from the load's start, whose wall
    clock the first line gives), endpoint, latency in ms (to the answer or the failure), outcome
    (status code, ``timeout`` or ``conn``): to lay slow answers beside the processes' own logs."""
    head = f"# t0_wall={time.time() - (time.monotonic() - load.t0):.3f}\nsent_s,kind,ms,outcome\n"
    rows = "".join(f"{t:.3f},{k},{ms:.1f},{o}\n" for t, k, ms, o in sorted(load.timeline))
    Path(path).write_text(head + rows)


async def drive(
    args: argparse.Namespace, base: str, users: list[dict[str, Any]], known: list[int], groups: dict[str, int]
) -> None:
    http = Http(base)
    load = Load(http, users, known, random.Random(args.seed))
    groups = {**groups, "client": os.getpgid(0)}
    cpu_before, wall = cpu_by_group(groups), time.monotonic()
    try:
        window = await load.run(args.rate, args.duration)
    finally:
        http.close()
    cpu_after, wall = cpu_by_group(groups), time.monotonic() - wall
    report(load, args.rate, window)
    if args.timeline:
        write_timeline(args.timeline, load)
    print(
        "CPU during the load (cores busy): "
        + ", ".join(f"{name} {(cpu_after[name] - cpu_before[name]) / wall:.2f}" for name in cpu_after)
        + f" (of {os.cpu_count()})"
    )
    answered = sum(len(s.latencies) for s in load.stats.values())
    if "web" in groups and answered:
        print(
            f"web CPU per answered request: {(cpu_after['web'] - cpu_before['web']) / answered * 1000:.1f} ms "
            "(shed answers included in the CPU, not in the count)"
        )


def known_workloads(db_url: str) -> list[int]:
    import psycopg

    kwargs = _pg_kwargs(db_url)
    with psycopg.connect(dbname=urlparse(db_url).path.strip("/"), **kwargs) as conn:
        return [row[0] for row in conn.execute("SELECT id FROM scheduler_workload ORDER BY id")]


def layout_summary(db_url: str) -> str:
    import psycopg

    with psycopg.connect(dbname=urlparse(db_url).path.strip("/"), **_pg_kwargs(db_url)) as conn:
        rows = dict(conn.execute("SELECT state, count(*) FROM scheduler_workload GROUP BY state").fetchall())
        (ticks,) = conn.execute("SELECT count(*) FROM scheduler_attempt").fetchone() or (0,)
    return ", ".join(f"{k} {v}" for k, v in sorted(rows.items())) + f"; attempts {ticks}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="offered requests/s (default 100)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--web-workers", type=int, default=2, help="WEB_WORKERS of the Procfile (default 2)")
    parser.add_argument("--worker-processes", type=int, default=2, help="WORKER_PROCESSES (default 2)")
    parser.add_argument("--worker-threads", type=int, default=4, help="WORKER_THREADS (default 4)")
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument(
        "--seed-workloads", type=int, default=1200, help="submitted before the run (~1,000 stay pending)"
    )
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between agents connected and the load")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--db-name", help="the database to create (its name must contain 'bench')")
    parser.add_argument("--redis-db", type=int, help="the Redis database number to use (must be empty)")
    parser.add_argument("--seed", type=int, default=15, help="random seed of the mix")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra server setting")
    parser.add_argument("--url", help="drive a running layout (with --tokens) instead of starting one")
    parser.add_argument("--tokens", help="the seed file a --keep run wrote (users, tokens)")
    parser.add_argument("--keep", action="store_true", help="leave the layout, database and Redis running")
    parser.add_argument(
        "--autogroup-nice",
        type=int,
        help="the CPU weight of the layout's and the client's sessions against the box's other sessions "
        "(-20..19; below 0 needs root): see set_autogroup_nice",
    )
    parser.add_argument("--timeline", help="write every request (sent at, endpoint, ms, outcome) to this CSV")
    parser.add_argument("--agents-proc", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if args.agents_proc:
        run_agents(args.agents_proc)
        return
    if args.url:
        if not args.tokens:
            raise SystemExit("--url needs --tokens FILE (written by an earlier run with --keep)")
        saved = json.loads(Path(args.tokens).read_text())
        known = known_workloads(saved["database"])
        asyncio.run(drive(args, args.url.rstrip("/"), saved["users"], known, {}))
        return

    server = os.environ.get("DATABASE_URL") or DEFAULT_DB_SERVER
    work = Path(tempfile.mkdtemp(prefix="api-load-"))
    (work / "var").mkdir()
    (work / "logs").mkdir()
    db_url = redis_url = None
    layout: Layout | None = None
    try:
        if args.db_name is not None and "bench" not in args.db_name:
            raise SystemExit("--db-name must contain 'bench' (the run drops it at the end)")
        db_url = create_database(server, args.db_name)
        redis_url = claim_redis(os.environ.get("REDIS_URL") or DEFAULT_REDIS, args.redis_db)
        os.environ.update(DATABASE_URL=db_url, REDIS_URL=redis_url, FAIRWAY_VAR_DIR=str(work / "var"))
        world = seed(args)
        (work / "seed.json").write_text(json.dumps({"database": db_url, "users": world["users"]}))
        env = server_env(args, db_url, redis_url, work / "var")
        if args.autogroup_nice is not None:
            set_autogroup_nice(args.autogroup_nice)  # this process's session: the load client
        layout = Layout(env, work / "logs", args.autogroup_nice)
        lines = procfile_lines()
        for name, line in lines.items():  # the production layout: every process type of the Procfile
            layout.start(name, ["bash", "-c", line])
        base = f"http://127.0.0.1:{args.port}"
        wait_ready(base, layout, 120)
        agents_out = work / "agents.json"
        spec = work / "agents-spec.json"
        spec.write_text(
            json.dumps([world["hosts"], f"ws://127.0.0.1:{args.port}/ws/agent/", args.gpus, str(agents_out)])
        )
        layout.start("agents", [sys.executable, __file__, "--agents-proc", str(spec)])
        deadline = time.monotonic() + 120
        connected = 0
        while time.monotonic() < deadline:
            layout.check()
            with contextlib.suppress(OSError, ValueError):
                connected = json.loads(agents_out.read_text())["connected"]
            if connected >= len(world["hosts"]):
                break
            time.sleep(0.5)
        time.sleep(args.settle)
        print(
            f"layout: Procfile {', '.join(lines)} (WEB_WORKERS={args.web_workers}, worker "
            f"{args.worker_processes} × {args.worker_threads} threads); "
            f"{connected}/{len(world['hosts'])} agents connected; "
            f"{layout_summary(db_url)}; logs {work / 'logs'}"
        )
        print(
            f"load: {args.rate:g} req/s open loop for {args.duration:g}s, mix "
            + ", ".join(f"{int(share * 100)} % {name}" for name, share in MIX)
        )
        groups = {name: proc.pid for name, proc in layout.procs.items()}
        asyncio.run(drive(args, base, world["users"], known_workloads(db_url), groups))
        layout.check()
        if args.keep:
            print(
                f"kept: {base} (tokens: {work / 'seed.json'}); stop with: kill -- "
                + " ".join(f"-{p.pid}" for p in layout.procs.values())
                + f"; then drop database {shlex.quote(urlparse(db_url).path.strip('/'))} and flush {redis_url}"
            )
    finally:
        if not args.keep:
            if layout is not None:
                stubborn = layout.stop()
                if stubborn:
                    print(f"needed SIGKILL: {', '.join(stubborn)}")
            if db_url is not None:
                drop_database(db_url)
            if redis_url is not None:
                release_redis(redis_url)


if __name__ == "__main__":
    main()
