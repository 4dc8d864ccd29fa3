"""CPU per API request, in one process, on PostgreSQL + Redis (issue 15). Prints, asserts nothing.

    python bench/api_cpu.py [--n 200] [--via client,asgi] [--profile submit] [--db NAME] [--redis-db N]

The CPU a web process spends per answer decides how many requests per second a core serves, and
CPU seconds (``time.process_time``: every thread of this process) hardly move when other
processes share the machine, unlike wall-clock latencies. This bench seeds the lab of
``bench/api_load.py`` (64 hosts × 8 GPUs, 20 projects, 40 users with API tokens, 1,200
submissions) into a PostgreSQL database of its own (``--db``, default ``fairway_api_cpu_bench``,
dropped and re-created; its name must contain "bench"), runs one tick so the cluster is full and
about 1,000 workloads wait with their pending reasons, then sends the load's four requests and
``GET /api/v1/me/`` in rounds (submit, detail, list, cancel, me — one of each per round, so a busy
minute weighs on all five alike; the load's mix is the first four) with the production settings
(``FAIRWAY_ENV=production``, throttles counted in Redis, the pool):

* ``client``: Django's test client (the WSGI request path: middleware chain, DRF, the view);
* ``asgi``: the ASGI application the Procfile serves (``config.asgi.application``: in-flight
  limit, the one thread hop, Django's ASGI request and response), called on an event loop in
  this process, without a socket or an HTTP parser.

The tick runs at its production cadence during the measurement, in the production layout's own
processes beside this one: a worker (``manage.py rundramatiq --queues scheduler``, one process,
one thread: the ticks the submissions and cancels request, debounced) and the clock (a tick every
``FAIRWAY_TICK_INTERVAL_S``, the sweeps), on the same database and Redis, so the requests meet the
tick's locks, writes and placements as on the layout; ``--no-tick`` leaves them out (before
mend31 the bench ticked once, at seeding, and the tick requests piled up in Redis unread). Their
CPU over the timed rounds is printed apart, as CPU ms per request (the tick's share), never mixed
into the request's own (``time.process_time`` counts this process only). The forward simulations
(queue ``estimates``) are not run: their requests wait in Redis. There are no agents: the hosts are
brought up as their first heartbeat would, and ``FAIRWAY_HOST_OFFLINE_AFTER_S`` is a day so that
the clock's sweep keeps them up.

``--pace S`` sleeps S seconds before each request (untimed), as a web process of the layout waits
between its requests while other processes run: its caches are then cold, as on the layout
(docs/benchmarks/api_load.md, eighth pass: +35 % CPU at 0.1 s on the shared box).

Prints per request kind and path the mean and median CPU ms, the wall ms and the SQL queries of
one request. ``--profile KIND`` (submit, detail, list, cancel, me, or ``mix``: the load's four in
its shares) runs cProfile over ``--profile-n`` more requests of that kind through the first
``--via`` (through ``asgi``, the request's own thread too) and prints the top functions
(``API_CPU_PSTATS=FILE`` also writes the raw profile, for pstats' callers and callees). The database is
dropped and the Redis database (an empty one, claimed as ``bench/api_load.py`` does, on
``REDIS_URL``'s server) flushed at the end (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import hashlib
import io
import json
import os
import pstats
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KINDS = ("submit", "detail", "list", "cancel", "me")
MIX = {"submit": 0.6, "detail": 0.2, "list": 0.15, "cancel": 0.05}  # the load's mix (no "me" in it)


def configure(args: argparse.Namespace) -> tuple[str, str]:
    """The environment of a production web process (bench/api_load.py's ``server_env``)."""
    server = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/"
    db_url = urlunparse(urlparse(server)._replace(path=f"/{args.db}"))
    from bench.api_load import DEFAULT_REDIS, claim_redis

    # A free (empty) Redis database number, claimed with api_load's marker; --redis-db: that one.
    # --cache-prefix: REDIS_URL's database as it is, shared (two trees at once), keys under the prefix.
    if args.cache_prefix:
        redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
    else:
        redis_url = claim_redis(os.environ.get("REDIS_URL") or DEFAULT_REDIS, args.redis_db)
    for key in [k for k in os.environ if k.startswith(("FAIRWAY_", "SECURE_"))]:
        del os.environ[key]
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=db_url,
        REDIS_URL=redis_url,
        FAIRWAY_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1,localhost,testserver",
        SECURE_SSL_REDIRECT="false",
        FAIRWAY_VAR_DIR=tempfile.mkdtemp(prefix="api-cpu-"),
        LOG_LEVEL="WARNING",
        WEB_WORKERS="4",
        # No agents here: the sweep leaves the hosts up (their one heartbeat is at seeding).
        FAIRWAY_HOST_OFFLINE_AFTER_S="86400",
        FAIRWAY_HOST_LOST_AFTER_S="172800",
    )
    if args.cache_prefix:
        os.environ["FAIRWAY_CACHE_PREFIX"] = args.cache_prefix
    return db_url, redis_url


def body(rng: random.Random, user: dict[str, Any]) -> dict[str, Any]:
    """bench/api_load.py's submission."""
    return {
        "name": "load",
        "budget": rng.choice(user["budgets"]),
        "cluster": "bench",
        "gpu_model": "H100",
        "gpu_count": rng.choice([1, 2, 4, 8]),
        "image": "ghcr.io/lab/train:1",
        "command": ["python", "train.py", "--steps", "1000"],
        "env": {"WANDB_PROJECT": "bench"},
        "min_runtime": "1h",
    }


class Requests:
    """The load's four requests: (method, path, token, JSON body or None), with the ids they need."""

    def __init__(self, users: list[dict[str, Any]], known: list[int], seed: int) -> None:
        self.users, self.known, self.rng = users, known, random.Random(seed)
        self.mine: dict[str, list[int]] = {u["name"]: [] for u in users}
        self.digest = hashlib.sha256()  # every answer's request kind, status and keys

    def make(self, kind: str) -> tuple[str, str, str, Any, dict[str, Any]]:
        user = self.rng.choice(self.users)
        if kind == "cancel":
            user = self.rng.choice([u for u in self.users if self.mine[u["name"]]] or self.users)
            mine = self.mine[user["name"]]
            if not mine:
                raise SystemExit("cancel before any submission")
            return "POST", f"/api/v1/workloads/{mine.pop(self.rng.randrange(len(mine)))}/cancel/", "", None, user
        if kind == "submit":
            return "POST", "/api/v1/workloads/", "", body(self.rng, user), user
        if kind == "detail":
            return "GET", f"/api/v1/workloads/{self.rng.choice(self.known)}/", "", None, user
        if kind == "me":
            return "GET", "/api/v1/me/", "", None, user
        return "GET", "/api/v1/workloads/", "limit=50", None, user

    def answered(self, kind: str, status: int, data: bytes, user: dict[str, Any]) -> None:
        expected = {"submit": (201,), "cancel": (200, 202)}.get(kind, (200,))
        if status not in expected:
            raise SystemExit(f"{kind}: {status} {data[:300]!r}")
        answer = json.loads(data) if data else None
        self.digest.update(f"{kind} {status} {sorted(answer) if isinstance(answer, dict) else type(answer)}\n".encode())
        if kind == "submit":
            self.mine[user["name"]].append(answer["id"])


class ClientVia:
    name = "client"

    def __init__(self) -> None:
        from django.test import Client

        self.client = Client()

    def __call__(self, method: str, path: str, query: str, data: Any, token: str) -> tuple[int, bytes]:
        url = f"{path}?{query}" if query else path
        headers = {"HTTP_AUTHORIZATION": f"Token {token}", "HTTP_ACCEPT": "application/json"}
        if method == "GET":
            response = self.client.get(url, **headers)
        else:
            payload = json.dumps(data) if data is not None else ""
            response = self.client.post(url, payload, content_type="application/json", **headers)
        return response.status_code, response.content


class AsgiVia:
    """config.asgi.application on an event loop of this process (no socket, no HTTP parser)."""

    name = "asgi"

    def __init__(self) -> None:
        from config.asgi import application

        self.app = application
        self.loop = asyncio.new_event_loop()

    def __call__(self, method: str, path: str, query: str, data: Any, token: str) -> tuple[int, bytes]:
        return self.loop.run_until_complete(self._call(method, path, query, data, token))

    async def _call(self, method: str, path: str, query: str, data: Any, token: str) -> tuple[int, bytes]:
        payload = json.dumps(data).encode() if data is not None else b""
        headers = [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Token {token}".encode()),
            (b"accept", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        if data is not None:
            headers.append((b"content-type", b"application/json"))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        sent = False
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, b"".join(chunks)

    def close(self) -> None:
        self.loop.close()


def count_queries(via: Any, request: tuple[str, str, str, Any, dict[str, Any]], requests: Requests, kind: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    method, path, query, data, user = request
    with CaptureQueriesContext(connection) as ctx:
        status, content = via(method, path, query, data, user["token"])
    requests.answered(kind, status, content, user)
    if os.environ.get("API_CPU_SQL"):
        print(f"--- {kind}: {method} {path} ---")
        for q in ctx.captured_queries:
            print(f"  {q['sql'][:400]}")
    return len(ctx.captured_queries)


TICK_PROCESSES = {
    "worker": ["rundramatiq", "--queues", "scheduler", "--processes", "1", "--threads", "1"],
    "clock": ["clock"],
}


class TickProcesses:
    """The layout's worker (the ``scheduler`` queue: the ticks) and clock, started beside this
    process with its environment; :meth:`cpu_s` is their CPU so far (every process of their groups)."""

    def __init__(self) -> None:
        self.procs = [
            subprocess.Popen(  # noqa: S603 -- our manage.py, fixed arguments
                [sys.executable, "manage.py", *argv],
                cwd=ROOT,
                env=os.environ.copy(),
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # rundramatiq forks: a group each, stopped whole
            )
            for argv in TICK_PROCESSES.values()
        ]
        self.groups = {p.pid for p in self.procs}
        self.began = time.time()

    def wait_first_tick(self, within: float = 180.0) -> None:
        """Until the worker has run a tick it was sent after starting (booted: its start-up CPU is
        then spent before the timed rounds)."""
        from scheduler.prom import last_ticks

        deadline = time.monotonic() + within
        while not any(at > self.began for _seconds, at in last_ticks().values()):
            self.check()
            if time.monotonic() > deadline:
                raise SystemExit(f"the tick's worker ran no tick within {within:.0f} s")
            time.sleep(0.2)

    def cpu_s(self) -> float:
        """User + system CPU seconds of the live processes of the groups (from /proc)."""
        total = 0
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    fields = stat[stat.rfind(")") + 2 :].split()
                    if int(fields[2]) in self.groups:  # pgrp
                        total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / os.sysconf("SC_CLK_TCK")

    def check(self) -> None:
        for proc, name in zip(self.procs, TICK_PROCESSES, strict=True):
            if proc.poll() is not None:
                raise SystemExit(f"the tick's {name} exited ({proc.returncode})")

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def measure(
    vias: list[Any], requests: Requests, n: int, warmup: int, pace: float = 0.0, ticks: TickProcesses | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    cpu: dict[tuple[str, str], list[float]] = {(v.name, k): [] for v in vias for k in KINDS}
    wall: dict[tuple[str, str], list[float]] = {(v.name, k): [] for v in vias for k in KINDS}
    queries: dict[tuple[str, str], int] = {}
    tick_cpu = 0.0
    for i in range(warmup + n):
        if ticks is not None and i == warmup:
            ticks.check()
            tick_cpu = ticks.cpu_s()
        for via in vias:
            for kind in KINDS:
                method, path, query, data, user = requests.make(kind)
                if pace:
                    time.sleep(pace)  # as a layout's process between requests: other processes run
                c0, w0 = time.process_time(), time.perf_counter()
                status, content = via(method, path, query, data, user["token"])
                c1, w1 = time.process_time(), time.perf_counter()
                requests.answered(kind, status, content, user)
                if i >= warmup:
                    cpu[(via.name, kind)].append((c1 - c0) * 1000)
                    wall[(via.name, kind)].append((w1 - w0) * 1000)
    if ticks is not None:
        ticks.check()
        tick_cpu = ticks.cpu_s() - tick_cpu
    # Queries counted once per kind (django's debug cursor wrapper costs CPU: not in the timings).
    from django.db import connection

    if connection.vendor:  # the test client's thread is the main thread: its connection
        for via in vias:
            if via.name == "client":
                for kind in KINDS:
                    queries[(via.name, kind)] = count_queries(via, requests.make(kind), requests, kind)
    results: dict[tuple[str, str], dict[str, Any]] = {
        key: {
            "cpu_mean": statistics.fmean(values),
            "cpu_median": statistics.median(values),
            "wall_median": statistics.median(wall[key]),
            "queries": queries.get(key),
        }
        for key, values in cpu.items()
    }
    if ticks is not None:
        results[("tick", "all")] = {"cpu_s": tick_cpu, "requests": n * len(vias) * len(KINDS)}
    return results


def profile(via: Any, requests: Requests, kind: str, n: int, top: int) -> None:
    """cProfile ``n`` requests of ``kind`` (``mix``: rounds of the load's four, 12/4/3/1 of 20).

    Through ``asgi`` the request runs on a thread of its own: a second profiler runs there (inside
    ``SyncChainASGIHandler._serve``), and both count their own thread's CPU (``time.thread_time``),
    so the stats printed are the event loop's and the request thread's together."""
    from config.overload import SyncChainASGIHandler

    prof = cProfile.Profile(time.thread_time)  # CPU, not the waits on PostgreSQL
    in_thread = cProfile.Profile(time.thread_time)
    serve = SyncChainASGIHandler._serve

    def profiled_serve(self: Any, scope: Any, body_file: Any) -> Any:
        in_thread.enable()
        try:
            return serve(self, scope, body_file)
        finally:
            in_thread.disable()

    kinds = [kind] if kind != "mix" else ["submit"] * 12 + ["detail"] * 4 + ["list"] * 3 + ["cancel"]
    SyncChainASGIHandler._serve = profiled_serve  # type: ignore[method-assign]
    try:
        for i in range(n):
            kind_now = kinds[i % len(kinds)]
            if kind_now == "cancel" and not any(requests.mine.values()):
                method, path, query, data, user = requests.make("submit")
                requests.answered("submit", *via(method, path, query, data, user["token"]), user)
            method, path, query, data, user = requests.make(kind_now)
            prof.enable()
            status, content = via(method, path, query, data, user["token"])
            prof.disable()
            requests.answered(kind_now, status, content, user)
    finally:
        SyncChainASGIHandler._serve = serve  # type: ignore[method-assign]
    stats = pstats.Stats(prof)
    if in_thread.getstats():
        stats.add(in_thread)
    if os.environ.get("API_CPU_PSTATS"):  # the raw profile, for pstats' callers/callees
        stats.dump_stats(os.environ["API_CPU_PSTATS"])
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(top)
        print(f"--- cProfile of {n} × {kind} via {via.name}, by {order} ---")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:20000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200, help="timed rounds (one request of each kind per round)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--pace", type=float, default=0.0, help="seconds slept before each request (untimed)")
    parser.add_argument("--via", default="client,asgi", help="client, asgi or both (comma-separated)")
    parser.add_argument("--profile", choices=(*KINDS, "mix"), help="cProfile this kind (mix: the load's) afterwards")
    parser.add_argument("--profile-n", type=int, default=200)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--db", default="fairway_api_cpu_bench", help="database name (dropped, re-created)")
    parser.add_argument("--redis-db", type=int, help="the (empty) Redis database number to use; default: a free one")
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seed-workloads", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the database and the Redis data")
    parser.add_argument(
        "--no-tick", action="store_true", help="no worker and clock during the measurement (one tick, at seeding)"
    )
    parser.add_argument(
        "--cache-prefix", help="use REDIS_URL's database as it is, the cache's keys under this prefix (deleted after)"
    )
    args = parser.parse_args()
    if args.cache_prefix and not args.no_tick:  # two runs' workers would read each other's tick requests
        raise SystemExit("--cache-prefix shares REDIS_URL's database, its queues too: add --no-tick")
    if "bench" not in args.db:
        raise SystemExit(f"refusing to drop database {args.db!r}: its name must contain 'bench'")
    db_url, redis_url = configure(args)

    from bench.api_load import _pg_kwargs, drop_database, release_redis, seed

    server = os.environ["DATABASE_URL"]
    try:
        import psycopg

        with psycopg.connect(dbname="postgres", autocommit=True, **_pg_kwargs(server)) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{args.db}"')
        began = time.process_time()
        world = seed(SimpleNamespace(hosts=args.hosts, gpus=args.gpus, seed_workloads=args.seed_workloads))
        from scheduler import lifecycle
        from scheduler.models import Cluster, Host, Workload
        from scheduler.tick import run_tick

        for host in Host.objects.filter(cluster__name="bench"):  # as its agent's first heartbeat: up
            lifecycle.record_heartbeat(host, [])
        run_tick(Cluster.objects.get(name="bench").pk)
        states: dict[str, int] = {}
        for state in Workload.objects.values_list("state", flat=True):
            states[state] = states.get(state, 0) + 1
        reasons: dict[str, int] = {}
        for reason in Workload.objects.filter(state="pending").values_list("pending_reason", flat=True):
            reasons[reason] = reasons.get(reason, 0) + 1
        known = list(Workload.objects.order_by("id").values_list("id", flat=True))
        from django.db import connection

        connection.close()
        print(f"seeded and ticked in {time.process_time() - began:.1f} CPU s: {states}; pending reasons {reasons}")
        makers = {"client": ClientVia, "asgi": AsgiVia}
        vias = [makers[name.strip()]() for name in args.via.split(",") if name.strip()]
        requests = Requests(world["users"], known, args.seed)
        ticks = None if args.no_tick else TickProcesses()
        if ticks is not None:
            ticks.wait_first_tick()
        try:
            results = measure(vias, requests, args.n, args.warmup, args.pace, ticks)
        finally:
            if ticks is not None:
                ticks.stop()
        tick = results.pop(("tick", "all"), None)
        print(
            f"CPU per request, {args.n} rounds after {args.warmup} warm-up "
            f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}):"
        )
        print(f"{'via':<7} {'request':<8} {'CPU mean ms':>12} {'CPU median':>11} {'wall median':>12} {'queries':>8}")
        for (via_name, kind), row in results.items():
            q = "" if row["queries"] is None else str(row["queries"])
            print(
                f"{via_name:<7} {kind:<8} {row['cpu_mean']:>12.2f} {row['cpu_median']:>11.2f} "
                f"{row['wall_median']:>12.2f} {q:>8}"
            )
        for via in vias:
            mix = sum(share * results[(via.name, k)]["cpu_mean"] for k, share in MIX.items())
            print(f"{via.name}: the load's mix (60/20/15/5) costs {mix:.2f} CPU ms per request")
        if tick is not None:
            print(
                f"the tick's processes (worker, clock) over the timed rounds: {tick['cpu_s']:.2f} CPU s, "
                f"{tick['cpu_s'] * 1000 / tick['requests']:.2f} CPU ms per request ({tick['requests']} requests)"
            )
        print(f"answers' digest (kind, status, keys): {requests.digest.hexdigest()[:16]}")
        if args.profile:
            profile(vias[0], requests, args.profile, args.profile_n, args.top)
        for via in vias:
            with contextlib.suppress(AttributeError):
                via.close()
    finally:
        from django.db import connections

        with contextlib.suppress(Exception):
            connections.close_all()
        with contextlib.suppress(Exception):
            from django.db import connection

            pool = getattr(connection, "pool", None)
            if pool is not None:
                pool.close()
        if not args.keep:
            drop_database(db_url)
            if args.cache_prefix:
                import redis

                client = redis.Redis.from_url(redis_url)
                for key in client.scan_iter(match=f"{args.cache_prefix}:*"):
                    client.delete(key)
                client.close()
            else:
                release_redis(redis_url)


if __name__ == "__main__":
    main()
