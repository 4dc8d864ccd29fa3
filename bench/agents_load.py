"""Many simulated agents against one real server on PostgreSQL and Redis (issue 6, point 1). Prints, asserts nothing.

    python bench/agents_load.py [--agents 1000] [--duration 60] [--gpus 8] [--workloads N]
    python bench/agents_load.py --submit-rate 100    # the agents and 100 API submissions/s at once

What it does, all on loopback:

1. Recreates the database ``DATABASE_URL`` (default ``postgres://postgres@127.0.0.1:5432/fairway_load``;
   its name must contain "load"), migrates it, and registers the N hosts (``bench-0000`` ...) with
   ``do_register_host`` (N × ``--gpus`` H100), a budget ``org/load`` and a user.
2. Starts ``manage.py serve --with-worker --with-clock`` as a subprocess on ``REDIS_URL`` (default
   ``redis://127.0.0.1:6379/7``, flushed first) through this file's ``--serve-timed`` mode, which
   only wraps the web process's heartbeat flush with timers (see below) and then runs ``serve``.
3. Connects N asyncio websocket clients speaking ``agent/protocol.py``: ``hello`` with their GPUs,
   then a ``heartbeat`` with ``--gpus`` samples every ``--heartbeat`` seconds (random phase). A
   ``start`` is answered ``attempt started`` (and the attempt is then reported running); the
   receipt time of the first ``start`` of every attempt is recorded.
4. Once every agent is connected and ``--settle`` seconds more have passed (the ramp and the
   aftermath of its hellos are not measured), it measures for ``--duration`` seconds, submitting
   ``--workloads`` workloads through ``do_submit_workload`` (from a process of its own) spread
   over the first half of the window, so the server's ticks place them on the simulated hosts.

With ``--submit-rate R`` the submitter is an HTTP client instead (issue 15, point 5): it POSTs
``/api/v1/workloads/`` to the same server at R requests/s, open loop (request *i* sent at
``t0 + i/R`` whatever the answers before it, latency counted from then; ``bench/api_load.py``'s
client), for the whole window, and the report adds the submissions' achieved rate, p50/p99 and
errors next to the heartbeat handling and start-command latency it measured under that load.

Figures:

- messages per second: every frame agents sent plus every frame they received in the window.
- heartbeat handling time (p50/p99): measured **server-side**, from the receipt of a heartbeat
  (the consumer stamps it) to the commit of the flush that wrote it: the time it waited in the
  web process's buffer plus the flush (``lifecycle.record_heartbeats``), the wait for the flush
  thread included, which is where saturation shows. The protocol has no answer to a heartbeat,
  so a client-side round trip would need a probe the server does not normally see.
- flushes: how many, hosts per flush, database queries per flush (the write and the desired
  state of every host of the batch, counted in the flush thread), flush duration.
- start-command latency (p50/p99/max): agent receipt time of ``start`` minus ``Attempt.placed_at``,
  the time the tick decided the placement — a little *before* its commit, so this is an upper bound
  of commit → agent (same machine, same clock).

Measured on the 2-core development box, nothing else running (bench clients, server, PostgreSQL
and Redis sharing it; psycopg pool; ``--settle 15``; heartbeats coalesced and written once per
second, see scheduler/gateway.py):

- 1,000 agents: 204 msg/s (200 heartbeats/s offered, all handled); heartbeat receipt → committed
  p50 660 ms / p99 1.86 s; flushes of p50 194 hosts in 5 queries each whatever their size (965
  hosts: 6), flush p50 90 ms / p99 640 ms; **start latency p50 324 ms / p99 851 ms** (82 starts:
  the submitter, in its own process on the same 2 cores, got 82 of the 500 workloads in); no
  errors. Before the channel layer's Redis socket timeout was raised to 30 s (redis-py 8's 5 s
  default equals channels-redis's BZPOPMIN), the same run logged 840 consumer crashes.
- 200 agents (an earlier run, another engineer's benchmarks on the cores): 44 msg/s; heartbeat
  p50 541 ms / p99 1.01 s (the flush interval, mostly); flush p50 17 ms, 5 queries; start latency
  p50 101 ms / p99 243 ms (100 workloads).

Before (one transaction per heartbeat on Channels' single thread-sensitive sync thread, ~8
queries + a reconcile, ``--conn-max-age 60``): 200 agents 47 msg/s, heartbeat p50 693 ms / p99
1.69 s, start p99 0.99 s; 1,000 agents saturated (~18 heartbeats/s handled, heartbeat p50 16 s,
start p99 19.9 s). The remaining cost is PostgreSQL's: every stored sample rewrites 8 GPU rows
and 8 per-minute roll-up rows (mostly not HOT updates here, so every index is written too),
which is why samples are stored every third heartbeat per host (15 s at most).

Bounded: the ramp is limited to ``--ramp-timeout`` seconds, the run to ``--duration``; the server
is terminated (then killed) at the end whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/fairway_load"
DEFAULT_REDIS = "redis://127.0.0.1:6379/7"


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# --- server side: serve with heartbeat timing ----------------------------------------------------


def install_timers(out: str) -> None:
    """Time this process's heartbeat handling into ``out`` (JSON, rewritten every second: see
    :func:`report`): each heartbeat's receipt → its flush committed, and each flush's hosts,
    queries and seconds. Django must be set up."""
    from django.db import connection

    from scheduler import gateway, lifecycle

    _install_stop_dumps(out)
    waits: list[float] = []  # per heartbeat: receipt → its flush committed (s)
    received: list[float] = []  # per heartbeat: its receipt (epoch s), same order
    flushes: list[list[float]] = []  # per flush: [hosts, queries, seconds]
    record, flush_heartbeats = lifecycle.record_heartbeats, gateway.flush_heartbeats

    # hb34: a heartbeat waiting in its connection's inbox has its host's last_heartbeat written by a
    # flush first (no samples), then the whole of it in its turn: its first write is the host's liveness
    first_writes: list[list[float]] = []  # [receipt epoch s, seconds until its first write committed]
    written_once: set[tuple[int, float]] = set()

    def timed_record(reports: Any) -> None:
        record(reports)  # commits before it returns
        now = time.time()
        waits.extend(now - r.received_at.timestamp() for r in reports)
        received.extend(r.received_at.timestamp() for r in reports)
        for r in reports:
            key = (r.host_id, r.received_at.timestamp())
            if key not in written_once:
                written_once.add(key)
                first_writes.append([key[1], now - key[1]])

    # The hops of a start (seventh pass): the tick's commit → its push (``push_desired_state``,
    # per host), the channel layer → the consumer's ``desired.state``, the push thread's
    # ``desired_commands_many`` (began, ended), or a heartbeat flush's desired state; then the send.
    pushes: list[list[Any]] = []  # [epoch s, host ids] per push_desired_state call (this process)
    layer_in: list[list[float]] = []  # [host id, epoch s] per desired.state the consumer got
    push_calls: list[list[Any]] = []  # [began, ended, host ids] per desired_commands_many of a push
    flush_calls: list[list[Any]] = []  # [began, ended, host ids] per heartbeat flush
    push_desired_state, many = gateway.push_desired_state, gateway.desired_commands_many

    def stamped_push(host_ids: Any) -> None:
        ids = sorted(set(host_ids))
        pushes.append([time.time(), ids])
        push_desired_state(ids)

    def stamped_many(views: Any) -> Any:
        began = time.time()
        result = many(views)
        push_calls.append([began, time.time(), [v.host_id for v in views]])
        return result

    gateway.push_desired_state = stamped_push
    gateway.desired_commands_many = stamped_many

    # The tick's phases (this process's ticks): per phase its (ended, seconds) in this thread,
    # and the tick's end after its commit; the report splits placed_at → push with them.
    from scheduler import tick as tick_module

    tick_phases: list[list[Any]] = []  # [phase, ended epoch s, seconds]

    def timed(phase: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                tick_phases.append([phase, time.time(), time.perf_counter() - began])

        return wrapper

    tick_module.load_snapshot = timed("snapshot", tick_module.load_snapshot)
    tick_module.schedule = timed("policy", tick_module.schedule)
    tick_module._apply = timed("apply", tick_module._apply)  # noqa: SLF001 -- a bench instrument
    tick_module.run_tick = timed("tick (all, commit included)", tick_module.run_tick)
    # The rest of the tick's run (eighth pass): its two sweeps before the snapshot, and after its
    # commit the push to the agents and the standing's figures (also computed by a detail's
    # request when no tick cached them: those count here too).
    from scheduler import lifecycle, tick_figures

    lifecycle.stop_timed_out = timed("stop_timed_out", lifecycle.stop_timed_out)
    lifecycle.settle_dependencies = timed("settle_dependencies", lifecycle.settle_dependencies)
    gateway.push_desired_state = timed("push to the agents (on commit)", gateway.push_desired_state)
    tick_figures.budget_figures = timed("standing figures (on commit)", tick_figures.budget_figures)
    locked = tick_module._locked_transaction  # noqa: SLF001 -- a bench instrument

    @contextlib.contextmanager
    def timed_locked(cluster_id: int) -> Any:
        # The thread's connection (from the pool, shared with the web side in one `serve`), then
        # to holding the lock (BEGIN, the lock statement), and from the tick's last statement to
        # the commit's end (its hooks: the push, the figures).
        from django.db import connection

        began = time.perf_counter()
        connection.ensure_connection()  # what the transaction's first statement would wait for
        tick_phases.append(["connection (the pool)", time.time(), time.perf_counter() - began])
        began = time.perf_counter()
        with locked(cluster_id) as acquired:
            tick_phases.append(["BEGIN + lock statement", time.time(), time.perf_counter() - began])
            yield acquired
            began = time.perf_counter()
        tick_phases.append(["commit + on-commit hooks", time.time(), time.perf_counter() - began])

    tick_module._locked_transaction = timed_locked  # noqa: SLF001 -- a bench instrument
    from scheduler import tasks as tasks_module

    tasks_module.run_tick = tick_module.run_tick

    def counted_flush(reports: Any, views: Any, *alive: Any) -> Any:
        queries = 0
        wall = time.time()

        def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            nonlocal queries
            queries += 1
            return execute(sql, params, many, context)

        began = time.perf_counter()
        with connection.execute_wrapper(count):
            result = flush_heartbeats(reports, views, *alive)
        flushes.append([len(reports), queries, time.perf_counter() - began])
        flush_calls.append([wall, time.time(), [v.host_id for v in views]])
        return result

    lifecycle.record_heartbeats = timed_record
    gateway.flush_heartbeats = counted_flush

    # How long each consumer dispatch took (by ASGI/channel message type): while one runs, Channels
    # does not ask for the connection's next message and uvicorn stops reading its socket (pongs too).
    from scheduler.consumers import AgentConsumer

    dispatches: dict[str, list[float]] = {}
    lags: list[float] = []  # the event loop's lateness, sampled every 0.1 s
    dispatch = AgentConsumer.dispatch

    async def timed_dispatch(self: Any, message: Any) -> None:
        began = time.perf_counter()
        try:
            await dispatch(self, message)
        finally:
            dispatches.setdefault(str(message.get("type")), []).append(time.perf_counter() - began)

    AgentConsumer.dispatch = timed_dispatch  # type: ignore[method-assign]
    connect = AgentConsumer.connect

    async def connect_with_lag_probe(self: Any) -> None:
        global _lag_probe
        if _lag_probe is None:
            _lag_probe = asyncio.get_running_loop().create_task(_probe_lag(lags))
        await connect(self)

    AgentConsumer.connect = connect_with_lag_probe  # type: ignore[method-assign]
    starts: dict[int, float] = {}  # attempt wire id → when this process sent its first start
    start_hosts: dict[int, int] = {}  # attempt wire id → the host it was sent to
    send_msg = AgentConsumer.send_msg

    async def stamped_send_msg(self: Any, msg: Any) -> None:
        if type(msg).__name__ == "Start":
            starts.setdefault(msg.attempt_id, time.time())
            start_hosts.setdefault(msg.attempt_id, self.host.pk)
        await send_msg(self, msg)

    AgentConsumer.send_msg = stamped_send_msg  # type: ignore[method-assign]
    desired_state = AgentConsumer.desired_state

    async def stamped_desired_state(self: Any, event: Any) -> None:
        if event.get("hosts") is not None:  # a push to every hub: the hosts this process holds
            now, links = time.time(), gateway.hub().links
            layer_in.extend([int(h), now] for h in event["hosts"] if int(h) in links)
        elif self.host is not None:
            layer_in.append([self.host.pk, time.time()])
        await desired_state(self, event)

    AgentConsumer.desired_state = stamped_desired_state  # type: ignore[method-assign]

    thread_cpu: list[list[Any]] = []  # [epoch s, {Python thread name (digits left out): CPU s}] per second

    def cpu_by_thread() -> dict[str, float]:
        from bench.api_load import CLOCK_TICKS

        by_name: dict[str, float] = {}
        for thread in threading.enumerate():
            try:
                raw = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2 :].split()
            name = "loop" if thread is threading.main_thread() else thread.name.rstrip("0123456789_-")
            by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return by_name

    # Before the hub (hb34): a heartbeat's receipt → the hub buffers it (it waits in its connection's
    # inbox behind that connection's earlier messages, e.g. an attempt event waiting for the
    # agent-database threads); and each attempt event's wall on those threads (queue + work).
    hub_waits: list[list[float]] = []  # [epoch s of the receipt, seconds until the hub buffered it]
    attempt_events: list[list[float]] = []  # [epoch s the consumer asked, seconds until answered]
    buffer_heartbeat = gateway.AgentHub.heartbeat

    def timed_buffer(self: Any, host_id: int, link: Any, received_at: Any, samples: Any) -> None:
        at = received_at.timestamp()
        hub_waits.append([at, time.time() - at])
        buffer_heartbeat(self, host_id, link, received_at, samples)

    gateway.AgentHub.heartbeat = timed_buffer  # type: ignore[method-assign]
    from scheduler import consumers

    attempt_event = consumers._attempt_event  # noqa: SLF001 -- a bench instrument

    async def timed_attempt_event(*args: Any) -> Any:
        began = time.time()
        try:
            return await attempt_event(*args)
        finally:
            attempt_events.append([began, time.time() - began])

    consumers._attempt_event = timed_attempt_event  # noqa: SLF001 -- a bench instrument

    pool_stats: list[list[Any]] = []  # [epoch s, the connection pool's counters] per second (hb34)
    lists = {
        "first_writes": first_writes,
        "pool_stats": pool_stats,
        "hub_waits": hub_waits,
        "attempt_events": attempt_events,
        "flushes": flushes,
        "lags": lags,
        "pushes": pushes,
        "layer_in": layer_in,
        "push_calls": push_calls,
        "flush_calls": flush_calls,
        "tick_phases": tick_phases,
        "thread_cpu": thread_cpu,
    }
    written: dict[str, int] = {}  # what each earlier line held: only what is new is written

    def new(key: str, items: Any, upto: int | None = None) -> Any:
        n, m = written.get(key, 0), len(items) if upto is None else upto
        written[key] = m
        return items[n:m]

    def flush() -> None:
        # One JSON line per second with what came since the last (:func:`read_timings` merges
        # them): rewriting every list whole each second cost the web process ~0.15 ms of CPU per
        # heartbeat at 300 agents, counted as its own (web30).
        with open(out + "l", "a") as sink:
            while True:
                time.sleep(1.0)
                thread_cpu.append([time.time(), cpu_by_thread()])
                pool_stats.append([time.time(), _pool_stats()])
                both = min(len(waits), len(received))
                line = {
                    "heartbeats": new("heartbeats", waits, both),
                    "received": new("received", received, both),
                    **{key: new(key, items) for key, items in lists.items()},
                    "dispatches": {k: new("dispatches " + k, v) for k, v in list(dispatches.items())},
                    "starts": dict(new("starts", list(starts.items()))),
                    "start_hosts": dict(new("start_hosts", list(start_hosts.items()))),
                }
                sink.write(json.dumps(line) + "\n")
                sink.flush()

    threading.Thread(target=flush, daemon=True).start()


_lag_probe: asyncio.Task[None] | None = None


def _pool_stats() -> dict[str, int]:
    """This process's psycopg pool counters (cumulative; {} without a pool)."""
    from django.db import connection

    pool = getattr(connection, "pool", None) if connection.vendor == "postgresql" else None
    return {} if pool is None else dict(pool.get_stats())


def _install_stop_dumps(out: str) -> None:
    """SIGUSR1: every thread's stack (``faulthandler``); SIGUSR2: every asyncio task's stack on the
    server's loop; both appended to ``<out>.stacks`` (:func:`_stop_with_dumps` sends them to a web
    process still alive after its SIGTERM)."""
    import faulthandler
    import signal

    from scheduler import gateway

    dump = open(out + ".stacks", "a")  # noqa: SIM115 -- open for the process's life
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)

    def tasks(_signum: int, _frame: Any) -> None:
        loop = gateway._server_loop  # noqa: SLF001 -- a bench instrument
        if loop is None:
            return
        pending = asyncio.all_tasks(loop)
        print(f"--- {len(pending)} tasks at {time.time():.3f}", file=dump)
        for task in pending:
            print(f"task {task.get_name()} {task.get_coro()!r}", file=dump)
            coro: Any = task.get_coro()
            while coro is not None:  # the chain of awaits, outermost first
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is not None:
                    print(f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}", file=dump)
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        dump.flush()

    signal.signal(signal.SIGUSR2, tasks)


async def _probe_lag(lags: list[float]) -> None:
    """Append how late the event loop wakes a 0.1 s sleep, forever (the loop's queueing)."""
    while True:
        began = time.perf_counter()
        await asyncio.sleep(0.1)
        lags.append(time.perf_counter() - began - 0.1)


def serve_timed(out: str, port: int) -> None:
    """Run ``manage.py serve`` with heartbeat handling timed into the folder ``out``."""
    _raise_fd_limit()
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    if os.environ.get("BENCH_CONN_MAX_AGE"):
        settings.DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ["BENCH_CONN_MAX_AGE"])
        settings.DATABASES["default"].get("OPTIONS", {}).pop("pool", None)  # the pool needs CONN_MAX_AGE 0

    install_timers(str(Path(out) / "serve.json"))
    call_command(
        "serve", host="127.0.0.1", port=port, with_worker=True, with_clock=True, worker_threads=2, log_level="warning"
    )


def start_layout(args: argparse.Namespace, logs: Path, timings: Path) -> Any:
    """``--layout``: the Procfile's processes (every line: web processes, worker, clock, ...) as
    ``bench/api_load.py`` starts them, the web line's application wrapped by :func:`install_timers`
    (``bench/agents_timed_asgi.py``, one timing file per web process); returns the layout."""
    from bench.api_load import Layout, procfile_lines, server_env, set_autogroup_nice, wait_ready

    if args.autogroup_nice is not None:
        set_autogroup_nice(args.autogroup_nice)  # this process's session: the agents, the submitter

    opts = argparse.Namespace(
        port=args.port, web_workers=args.web_workers, worker_processes=2, worker_threads=4, env=[]
    )
    env = server_env(opts, os.environ["DATABASE_URL"], os.environ["REDIS_URL"], logs.parent / "var")
    env.update(FAIRWAY_HEARTBEAT_S=os.environ["FAIRWAY_HEARTBEAT_S"], BENCH_TIMING_DIR=str(timings))
    if args.profile:
        env["BENCH_PROFILE"] = args.profile
    if args.sample:
        env["BENCH_SAMPLE"] = args.sample
    # LOG_LEVEL=INFO: the ticks' lines (_report_ticks)
    for name in ("FAIRWAY_HEARTBEAT_FLUSH_S", "FAIRWAY_WEB_MAX_IN_FLIGHT", "FAIRWAY_AGENT_DB_THREADS", "LOG_LEVEL"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    (logs.parent / "var").mkdir(exist_ok=True)
    layout = Layout(env, logs, args.autogroup_nice)
    for name, line in procfile_lines().items():
        if name == "release":
            continue
        if name == "web":
            if "config.asgi:application" not in line:
                raise SystemExit("the Procfile's web line no longer names config.asgi:application")
            line = line.replace("config.asgi:application", "bench.agents_timed_asgi:application")
        layout.start(name, ["bash", "-c", f"ulimit -n $(ulimit -Hn); {line}"])
    wait_ready(f"http://127.0.0.1:{args.port}", layout, 120)
    return layout


# --- setup ---------------------------------------------------------------------------------------


def recreate_database(url: str) -> None:
    import psycopg
    from dj_database_url import parse

    cfg = parse(url)
    name = cfg["NAME"]
    if "load" not in name:
        raise SystemExit(f"refusing to recreate database {name!r}: its name must contain 'load'")
    kwargs = {"host": cfg["HOST"] or "127.0.0.1", "port": cfg["PORT"] or 5432, "user": cfg["USER"] or "postgres"}
    if cfg.get("PASSWORD"):
        kwargs["password"] = cfg["PASSWORD"]
    with psycopg.connect(dbname="postgres", autocommit=True, **kwargs) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def start_analyzer(url: str, every: float) -> tuple[threading.Event, threading.Thread]:
    """``--analyze-every S``: ``ANALYZE`` the bench's database every ``S`` seconds until the returned
    event is set, as autovacuum would (its default ``autovacuum_naptime`` is 60 s). The bench
    recreates its database, so every table grows from empty during the window; with autovacuum off
    (this machine) the planner never gets statistics and two reads of the start path ran 0.9 s
    each (docs/benchmarks/api_load.md, lat31). Prints a warning when the server's autovacuum is off."""
    import psycopg

    stop = threading.Event()

    def loop() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(every):
                conn.execute("ANALYZE")

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    if row and row[0] == "off" and not every:
        print(
            "note: PostgreSQL's autovacuum is off here: the recreated tables get no statistics during the run "
            "(--analyze-every 60 does what autovacuum's default would)"
        )
    thread = threading.Thread(target=loop, name="bench-analyze", daemon=True)
    if every:
        thread.start()
    return stop, thread


def setup_world(n: int, gpus: int) -> list[tuple[str, str]]:
    """Migrate, create budget/user/cluster, register ``n`` hosts; returns [(host name, token)].
    The user's API token is written to ``BENCH_TOKEN_FILE`` when that is set (``--submit-rate``)."""
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accounts.models import User
    from budgets.services import do_create_budget
    from scheduler.services import do_create_cluster, do_register_host

    cluster = do_create_cluster("load")
    org = do_create_budget(name="org", parent=None)
    do_create_budget(name="load", parent=org)
    user = User.objects.create_superuser("bench", password="bench")  # noqa: S106 -- throwaway bench database
    if os.environ.get("BENCH_TOKEN_FILE"):
        from accounts.services import create_api_token

        Path(os.environ["BENCH_TOKEN_FILE"]).write_text(create_api_token(user)[1])
    hosts = []
    for i in range(n):
        name = f"bench-{i:04d}"
        specs = [(g, f"GPU-{name}-{g}", "H100", 81559) for g in range(gpus)]
        host, token = do_register_host(cluster, name, specs)
        hosts.append((host.name, token))
    return hosts


# --- agents --------------------------------------------------------------------------------------


class Stats:
    def __init__(self) -> None:
        self.measuring = False
        self.sent = 0
        self.received = 0
        self.heartbeats = 0
        self.starts: dict[int, float] = {}  # attempt wire id -> first receipt (epoch seconds)
        self.connected = 0
        self.errors: list[str] = []
        self.cpu_before: dict[str, float] = {}  # CPU seconds by process group at the window's start
        self.cpu_after: dict[str, float] = {}
        self.load_before = self.load_after = 0.0  # 1-minute load average at the window's ends
        self.window_wall = (0.0, 0.0)  # the measured window, epoch seconds
        self.lags: list[float] = []  # this process's event loop lateness (s), sampled every 0.1 s


def _web_loop_cpu(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds of the web processes' main threads (uvicorn's event loops: the consumers,
    decode, websockets) as ``web loops``, the kernel's part of it (system calls) as ``web loops
    (system)``; the rest of ``web`` is their other threads (heartbeat flushes, pushes,
    agent-database work, HTTP requests' synchronous chains)."""
    from bench.api_load import CLOCK_TICKS

    pgid, total, system = groups.get("web", groups.get("serve")), 0.0, 0.0
    threads: dict[str, float] = {}  # "web thread <name>": the other threads, by name (digits left out)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
            fields = raw[raw.rindex(")") + 2 :].split()
            if int(fields[2]) != pgid:
                continue
            for task in (stat.parent / "task").iterdir():
                raw = (task / "stat").read_text()
                fields = raw[raw.rindex(")") + 2 :].split()
                seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
                if task.name == stat.parent.name:  # the main thread (tid = pid)
                    total += seconds
                    system += int(fields[12]) / CLOCK_TICKS
                else:
                    name = "web thread " + raw[raw.index("(") + 1 : raw.rindex(")")].rstrip("0123456789_-")
                    threads[name] = threads.get(name, 0.0) + seconds
        except (OSError, ValueError, IndexError):
            continue
    return {"web loops": total, "web loops (system)": system, **threads}


def _own_cpu() -> dict[str, float]:
    """CPU seconds of this process (the simulated agents) and of its waited-for children (the
    submitter: the layout's processes are waited for only after the report)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"agents (client)": me.ru_utime + me.ru_stime, "submitter": kids.ru_utime + kids.ru_stime}


async def agent(name: str, token: str, url: str, gpus: int, period: float, stats: Stats, stop: asyncio.Event) -> None:
    import websockets

    from agent import protocol

    seq = 0
    running: set[int] = set()

    async def send(ws: Any, msg: protocol.Message) -> None:
        nonlocal seq
        seq += 1
        data = protocol.encode(type(msg)(**{**_fields(msg), "id": seq}))
        await ws.send(data)
        if stats.measuring:
            stats.sent += 1

    try:
        async with websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=60, ping_interval=None
        ) as ws:
            await send(
                ws,
                protocol.Hello(
                    host=name,
                    agent_version="load-1",
                    gpus=[protocol.GpuInfo(g, f"GPU-{name}-{g}", "H100", 81559, "healthy") for g in range(gpus)],
                    attempts=[],
                ),
            )
            welcome = protocol.decode(await asyncio.wait_for(ws.recv(), 120))
            if not isinstance(welcome, protocol.Welcome):
                stats.errors.append(f"{name}: {welcome}")
                return
            stats.connected += 1

            async def reader() -> None:
                try:
                    await read()
                except Exception as exc:  # noqa: BLE001 -- counted and reported
                    stats.errors.append(f"{name} reader: {type(exc).__name__}: {exc}")
                    raise

            async def read() -> None:
                async for text in ws:
                    now = time.time()
                    if stats.measuring:
                        stats.received += 1
                    msg = protocol.decode(text)
                    if isinstance(msg, protocol.Start):
                        stats.starts.setdefault(msg.attempt_id, now)
                        if msg.attempt_id not in running:
                            running.add(msg.attempt_id)
                            await send(ws, protocol.AttemptEvent(attempt_id=msg.attempt_id, state="started"))
                    elif isinstance(msg, protocol.Stop):
                        running.discard(msg.attempt_id)
                        await send(ws, protocol.AttemptEvent(attempt_id=msg.attempt_id, state="exited", exit_code=0))

            read_task = asyncio.create_task(reader())
            await asyncio.sleep(random.uniform(0, period))  # noqa: S311 -- phase only
            while not stop.is_set() and not read_task.done():
                samples = [
                    protocol.GpuSample(
                        index=g,
                        utilization_pct=random.uniform(0, 100),  # noqa: S311
                        memory_used_mb=random.randint(0, 81559),  # noqa: S311
                        temperature_c=55.0,
                        power_w=350.0,
                        ecc_uncorrected=0,
                        health="healthy",
                        xids=[],
                    )
                    for g in range(gpus)
                ]
                await send(ws, protocol.Heartbeat(gpus=samples, running=sorted(running)))
                if stats.measuring:
                    stats.heartbeats += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)
            read_task.cancel()
    except Exception as exc:  # noqa: BLE001 -- counted and reported
        stats.errors.append(f"{name}: {type(exc).__name__}: {exc}")


def _fields(msg: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}


def submit_workloads(count: int, over: float) -> None:
    """Submit ``count`` workloads (1, 2, 4 or 8 GPUs) through the service, spread over ``over`` seconds.

    Runs in its own process (``--submit``): in the clients' process it would compete with 1,000
    websocket clients for one interpreter and fall far behind.
    """
    import django

    django.setup()
    from accounts.models import User
    from scheduler.services import do_submit_workload

    user = User.objects.get(username="bench")

    def submit(i: int) -> None:
        do_submit_workload(
            user,
            name=f"load-{i}",
            budget="load",
            cluster="load",
            gpu_model="H100",
            gpu_count=random.choice([1, 2, 4, 8]),  # noqa: S311
            image="",
            command=["sleep", "infinity"],
            env=None,
            min_runtime_s=3600,
        )

    batches = max(1, int(over))
    per = [count // batches + (1 if b < count % batches else 0) for b in range(batches)]
    i = 0
    for n in per:
        began = time.monotonic()
        for _ in range(n):
            i += 1
            submit(i)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))


def submit_http(spec: str) -> None:
    """``--submit-http RATE:SECONDS:PORT:TOKEN_FILE:OUT``: open-loop API submissions, latencies to OUT."""
    from bench.api_load import Http

    rate_s, seconds_s, port, token_file, out = spec.split(":", 4)
    rate, seconds, token = float(rate_s), float(seconds_s), Path(token_file).read_text().strip()
    latencies: list[float] = []
    errors: dict[str, int] = {}

    async def one(http: Http, scheduled: float) -> None:
        body = {
            "name": "load",
            "budget": "org/load",
            "cluster": "load",
            "gpu_model": "H100",
            "gpu_count": random.choice([1, 2, 4, 8]),  # noqa: S311
            "image": "",
            "command": ["sleep", "infinity"],
            "min_runtime": "1h",
        }
        try:
            status, headers, _data = await asyncio.wait_for(http.request("POST", "/api/v1/workloads/", token, body), 30)
        except TimeoutError:
            errors["timeout"] = errors.get("timeout", 0) + 1
            return
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
            errors["conn"] = errors.get("conn", 0) + 1
            return
        if status == 201:
            latencies.append(time.monotonic() - scheduled)
        else:
            kind = "shed" if status == 503 and "retry-after" in headers else str(status)
            errors[kind] = errors.get(kind, 0) + 1

    async def main() -> float:
        http = Http(f"http://127.0.0.1:{port}")
        tasks: set[asyncio.Task[None]] = set()
        t0 = time.monotonic()
        for i in range(int(rate * seconds)):
            scheduled = t0 + i / rate
            if (delay := scheduled - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(http, scheduled))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        window = max(seconds, time.monotonic() - t0)
        if tasks:
            await asyncio.wait(tasks, timeout=35)
        http.close()
        return window

    window = asyncio.run(main())
    Path(out).write_text(json.dumps({"latencies": latencies, "errors": errors, "window": window}))


async def run_agents(args: argparse.Namespace, hosts: list[tuple[str, str]], url: str) -> tuple[Stats, float]:
    stats, stop = Stats(), asyncio.Event()
    tasks = []
    probe = asyncio.create_task(_probe_lag(stats.lags))
    ramp_began = time.monotonic()
    for i, (name, token) in enumerate(hosts):
        tasks.append(asyncio.create_task(agent(name, token, url, args.gpus, args.heartbeat, stats, stop)))
        if i % 25 == 24:
            await asyncio.sleep(0.25)
    while stats.connected + len(stats.errors) < len(hosts) and time.monotonic() - ramp_began < args.ramp_timeout:  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    ramp = time.monotonic() - ramp_began
    print(f"ramp: {stats.connected}/{len(hosts)} agents connected in {ramp:.1f}s ({len(stats.errors)} errors)")
    await asyncio.sleep(args.settle)  # the hellos' aftermath (ticks, pushes, a first full flush) is the ramp's
    from bench.api_load import cpu_by_group

    stats.measuring = True
    del stats.lags[:]  # the client's loop lateness is reported for the window only
    stats.cpu_before = {**cpu_by_group(args.cpu_groups), **_own_cpu(), **_web_loop_cpu(args.cpu_groups)}
    stats.load_before = os.getloadavg()[0]
    window_began = time.monotonic()
    stats.window_wall = (time.time(), float("inf"))
    if args.submit_rate:
        spec = f"{args.submit_rate}:{args.duration}:{args.port}:{args.token_file}:{args.submissions_file}"
        submitter = await asyncio.create_subprocess_exec(sys.executable, __file__, "--submit-http", spec, cwd=ROOT)
    else:
        submitter = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--submit", f"{args.workloads}:{args.duration / 2}", cwd=ROOT
        )
    await asyncio.sleep(args.duration)
    if args.submit_rate:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(submitter.wait(), 40)  # its last answers, then its report
    stats.measuring = False
    window = time.monotonic() - window_began
    stats.window_wall = (stats.window_wall[0], time.time())
    stats.load_after = os.getloadavg()[0]
    probe.cancel()
    if args.sigterm_connected:  # a deploy's restart: the web processes stop with their agents connected
        await asyncio.to_thread(_stop_with_dumps, args.layout_obj, args.timings, args.dump_after)
    if submitter.returncode is None:
        submitter.kill()
    await submitter.wait()  # waited for: its CPU is in RUSAGE_CHILDREN
    stats.cpu_after = {**cpu_by_group(args.cpu_groups), **_own_cpu(), **_web_loop_cpu(args.cpu_groups)}
    stop.set()
    await asyncio.wait(tasks, timeout=15)
    return stats, window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds after the ramp")
    parser.add_argument(
        "--analyze-every",
        type=float,
        default=0.0,
        help="ANALYZE the bench's database every S seconds during the run, as autovacuum would (0: never)",
    )
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per simulated host")
    parser.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat period (s)")
    parser.add_argument("--workloads", type=int, default=None, help="workloads submitted (default agents/2)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--ramp-timeout", type=float, default=180.0)
    parser.add_argument("--settle", type=float, default=15.0, help="seconds between the ramp and the window")
    parser.add_argument(
        "--conn-max-age",
        type=int,
        default=None,
        help="the server's CONN_MAX_AGE (s) for this run, without the connection pool; default: the settings' pool",
    )
    parser.add_argument(
        "--submit-rate",
        type=float,
        default=None,
        help="API submissions/s (open loop, HTTP) during the whole window instead of --workloads",
    )
    parser.add_argument(
        "--layout",
        action="store_true",
        help="serve with the Procfile's processes (--web-workers web processes, worker, clock) instead of one `serve`",
    )
    parser.add_argument("--web-workers", type=int, default=2, help="with --layout: WEB_WORKERS (default 2)")
    parser.add_argument(
        "--sigterm-connected",
        action="store_true",
        help="with --layout: SIGTERM the web processes at the window's end with the agents still connected",
    )
    parser.add_argument(
        "--dump-after",
        type=float,
        default=8.0,
        help="with --layout: dump the stacks of a web process still running this many seconds after its SIGTERM",
    )
    parser.add_argument(
        "--autogroup-nice",
        type=int,
        help="with --layout: the sessions' CPU weight against the box's other sessions (bench/api_load.py's option)",
    )
    parser.add_argument(
        "--profile",
        metavar="AFTER:SECONDS",
        default="",
        help="with --layout: cProfile every web process's event-loop thread from AFTER s after its start for SECONDS",
    )
    parser.add_argument(
        "--sample",
        metavar="AFTER:SECONDS",
        default="",
        help="with --layout: sample every web process's event-loop stack each ms (agents_timed_asgi.py)",
    )
    parser.add_argument("--serve-timed", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--submit-http", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--submit", metavar="COUNT:SECONDS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workloads is None:
        args.workloads = max(1, args.agents // 2)
    os.environ.setdefault("DATABASE_URL", DEFAULT_DB)
    os.environ.setdefault("REDIS_URL", DEFAULT_REDIS)
    os.environ["FAIRWAY_HEARTBEAT_S"] = str(args.heartbeat)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("FAIRWAY_DB_POOL", "true")  # as in production (FAIRWAY_ENV=production)
    if args.conn_max_age is not None:
        os.environ["BENCH_CONN_MAX_AGE"] = str(args.conn_max_age)
    if args.serve_timed:
        serve_timed(args.serve_timed, args.port)
        return
    if args.submit_http:
        submit_http(args.submit_http)
        return
    if args.submit:
        count, over = args.submit.split(":")
        submit_workloads(int(count), float(over))
        return
    _raise_fd_limit()
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    recreate_database(os.environ["DATABASE_URL"])
    scratch = Path(tempfile.mkdtemp(prefix="agents-load-"))
    args.token_file, args.submissions_file = scratch / "token", scratch / "submissions.json"
    if args.submit_rate:
        os.environ["BENCH_TOKEN_FILE"] = str(args.token_file)
    import django

    django.setup()
    began = time.monotonic()
    hosts = setup_world(args.agents, args.gpus)
    print(f"setup: {len(hosts)} hosts × {args.gpus} GPUs registered in {time.monotonic() - began:.1f}s")
    from django.db import connection

    connection.close()
    start_analyzer(os.environ["DATABASE_URL"], args.analyze_every)  # a daemon thread: ends with the bench

    timings = scratch / "heartbeats"
    timings.mkdir()
    if args.layout:
        (scratch / "logs").mkdir()
        layout = start_layout(args, scratch / "logs", timings)
        args.layout_obj, args.timings = layout, timings
        args.cpu_groups = {name: proc.pid for name, proc in layout.procs.items()}
        try:
            stats, window = asyncio.run(run_agents(args, hosts, f"ws://127.0.0.1:{args.port}/ws/agent/"))
            time.sleep(1.5)  # the timing files are flushed every second
            if not args.sigterm_connected:  # else the web processes were stopped on purpose
                layout.check()
            report(args, stats, window, timings)
            _report_ticks(
                scratch / "logs" / "worker.log", getattr(args, "start_times", None), getattr(args, "layer_in", None)
            )
            _report_autogroups(args.cpu_groups)
        finally:
            _stop_with_dumps(layout, timings)
            stubborn = layout.stop()
            if stubborn:
                print(f"needed SIGKILL: {', '.join(stubborn)}; logs {scratch / 'logs'}")
        return
    server = subprocess.Popen(  # noqa: S603 -- this interpreter and this file
        [sys.executable, __file__, "--serve-timed", str(timings), "--port", str(args.port)],
        cwd=ROOT,
        start_new_session=True,
    )
    args.cpu_groups = {"serve": server.pid}
    try:
        _wait_port(args.port, 60)
        stats, window = asyncio.run(run_agents(args, hosts, f"ws://127.0.0.1:{args.port}/ws/agent/"))
        time.sleep(1.5)  # the timing file is flushed every second
        report(args, stats, window, timings)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)


def _stop_with_dumps(layout: Any, timings: Path, after: float = 8.0) -> None:
    """SIGTERM the web processes; any still alive ``after`` s later has its threads' and tasks'
    stacks dumped (:func:`_install_stop_dumps`, into ``timings``) before the layout's own stop."""
    web = layout.procs.get("web")
    if web is None or web.poll() is not None:
        return
    began = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(web.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        web.wait(after)
    if web.poll() is not None:
        print(f"web exited {time.monotonic() - began:.1f}s after SIGTERM")
        return
    kids = [int(p) for p in Path(f"/proc/{web.pid}/task/{web.pid}/children").read_text().split()]
    print(f"web alive {after:g}s after SIGTERM: dumping workers {kids} into {timings}")
    for pid in kids:
        for sig in (signal.SIGUSR2, signal.SIGUSR1):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            time.sleep(0.5)


def _wait_port(port: int, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"the server did not listen on port {port} within {timeout:.0f}s")


def _connections_label() -> str:
    if os.environ.get("BENCH_CONN_MAX_AGE"):
        return f"CONN_MAX_AGE {os.environ['BENCH_CONN_MAX_AGE']} s, no pool"
    from django.conf import settings

    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    return f"psycopg pool {pool}" if pool else "CONN_MAX_AGE 0, no pool"


def _report_autogroups(groups: dict[str, int]) -> None:
    """The autogroup nice of each layout process's session: the CPU is shared between sessions
    before ``nice`` counts, so a session at 19 against the others' 0 gets next to nothing on a busy
    machine (config/priority.py; a worker whose session went to 19 never booted: 0 placed)."""
    shown = []
    for name, pid in groups.items():
        try:
            shown.append(f"{name} {Path(f'/proc/{pid}/autogroup').read_text().split()[-1]}")
        except (OSError, IndexError):
            shown.append(f"{name} ?")
    print("sessions' autogroup nice: " + ", ".join(shown))


def _report_ticks(log: Path, start_times: Any = None, layer_in: Any = None) -> None:
    """The worker's ticks that started work (their INFO line, ``LOG_LEVEL=INFO``): a start's
    ``placed_at`` is its tick's beginning, so a start reaches no agent before its tick committed.
    With ``start_times`` (placed_at, server send, agent receipt per wire id: :func:`report`), each
    start's placed_at → its tick's commit → the web process's send → receipt: the tick is the one
    whose beginning (the log line's time less its seconds) is its placed_at. With ``layer_in``
    ([host id, epoch s] per ``desired.state`` a consumer got), commit → send is split at the first
    ``desired.state`` of the start's host after the commit, where one came before the send (else
    the start is counted as sent by a heartbeat flush)."""
    import bisect
    import datetime as dt
    import re

    if not log.exists():
        return
    seconds: list[float] = []
    phases: dict[str, list[float]] = {}
    commits: list[tuple[float, float]] = []  # (beginning, commit) epoch s per tick with its phases
    for m in re.finditer(
        r"^(\S+ \S+) INFO scheduler\.tick: tick cluster .+?: (\d+) started.*\((\d+\.\d+)s(?:; ([^)]*))?\)",
        log.read_text(errors="replace"),
        re.M,
    ):
        if int(m.group(2)) > 0:
            seconds.append(float(m.group(3)))
            parts = dict(part.partition("=")[::2] for part in (m.group(4) or "").split())
            for name, value in parts.items():
                phases.setdefault(name, []).append(float(value))
            if "commit" in parts:  # the log line is written after the hooks
                ended = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()  # local
                commits.append((ended - float(m.group(3)), ended - float(parts.get("hooks", 0)) / 1000))
    if seconds:
        ms = [x * 1000 for x in seconds]
        print(
            f"ticks that started work (placed_at → commit and its hooks): {len(ms)}, "
            f"p50 {pct(ms, 50):.0f} ms, p99 {pct(ms, 99):.0f} ms"
        )
    if phases:  # the tick's log line names its phases (scheduler.tick._phases), each from the previous
        print(
            "  their phases p50 / p99 ms: "
            + ", ".join(f"{k} {pct(v, 50):.0f} / {pct(v, 99):.0f}" for k, v in phases.items())
        )
    if commits and start_times:
        placed, sent, receipt = start_times[:3]
        split: dict[str, list[float]] = {}
        layer: dict[int, list[float]] = {}
        for hid, at in layer_in or ():
            layer.setdefault(int(hid), []).append(at)
        for times in layer.values():
            times.sort()
        host_of = {int(w): int(h) for w, h in (start_times[3] if len(start_times) > 3 else {}).items()}
        flushed = 0
        for wire, at in placed.items():
            p = at.timestamp()
            began, committed = min(commits, key=lambda c: abs(c[0] - p))
            if abs(began - p) > 0.05 or wire not in sent or wire not in receipt:
                continue
            for name, value in (
                ("placed → commit", committed - p),
                ("commit → send", sent[wire] - committed),
                ("send → receipt", receipt[wire] - sent[wire]),
            ):
                split.setdefault(name, []).append(value * 1000)
            if wire in host_of:
                row = layer.get(host_of[wire], [])
                i = bisect.bisect_left(row, committed)
                if i < len(row) and row[i] <= sent[wire]:
                    hop = split.setdefault("(of which) commit → desired.state", [])
                    hop.append((row[i] - committed) * 1000)
                    split.setdefault("desired.state → send", []).append((sent[wire] - row[i]) * 1000)
                else:
                    flushed += 1
        if split:
            n = len(split["placed → commit"])
            print(
                f"start split per start ({n} matched to their tick): "
                + ", ".join(f"{k} p50 {pct(v, 50):.0f} / p99 {pct(v, 99):.0f} ms" for k, v in split.items())
                + (f" ({flushed} sent before any desired.state: a heartbeat flush's)" if host_of else "")
            )


def _report_hops(hops: dict[str, Any], placed: dict[int, Any], sent: dict[int, float]) -> None:
    """Each start's hops (timings of :func:`install_timers`; the push stamps need the tick in a
    timed process: without ``--layout``): placed_at → the tick's push (its commit and the
    ``on_commit`` callbacks before it), push → the consumer's ``desired.state`` (channel layer and
    the consumer's queue), → the push thread's call began (its queue), the call, → the send. A
    start whose host had a heartbeat flush end before the push call did is counted as the flush's."""
    import bisect

    def by_host(rows: list[list[Any]], at: int, hosts: int) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for row in rows:
            for hid in row[hosts] if isinstance(row[hosts], list) else [row[hosts]]:
                out.setdefault(int(hid), []).append(row[at])
        return {k: sorted(v) for k, v in out.items()}

    def first_after(times: dict[int, list[float]], hid: int, t: float) -> float | None:
        row = times.get(hid, [])
        i = bisect.bisect_left(row, t)
        return row[i] if i < len(row) else None

    pushes = by_host(hops.get("pushes", []), 0, 1)
    layer_in = by_host(hops.get("layer_in", []), 1, 0)
    calls: dict[int, list[tuple[float, float]]] = {}
    for began, ended, ids in hops.get("push_calls", []):
        for hid in ids:
            calls.setdefault(int(hid), []).append((began, ended))
    flush_ends = by_host(hops.get("flush_calls", []), 1, 2)
    parts: dict[str, list[float]] = {}
    by_flush = 0
    for wire, host in hops.get("start_hosts", {}).items():
        if wire not in placed or wire not in sent:
            continue
        p, s = placed[wire].timestamp(), sent[wire]
        # With --layout the tick runs in the (untimed) worker: no push stamps; the first hop is then
        # placed_at → the consumer's desired.state (the tick, its commit, the channel layer).
        pushed = first_after(pushes, host, p)
        timed_push = pushed is not None and pushed <= s
        if not timed_push:
            pushed = p
        got = first_after(layer_in, host, pushed)
        call = next((c for c in sorted(calls.get(host, [])) if got is not None and c[0] >= got), None)
        flushed = first_after(flush_ends, host, pushed)
        if got is None or call is None or call[1] > s or (flushed is not None and flushed < call[1]):
            by_flush += 1
            if timed_push:
                parts.setdefault("placed_at → push (tick commit)", []).append(pushed - p)
            continue
        hops_before = (
            (
                ("placed_at → push (tick commit)", pushed - p),
                ("push → consumer desired.state (channel layer)", got - pushed),
            )
            if timed_push
            else (("placed_at → consumer desired.state (tick, commit, channel layer)", got - p),)
        )
        for name, value in (
            *hops_before,
            ("desired.state → push thread's call began", call[0] - got),
            ("push thread's call (desired_commands_many)", call[1] - call[0]),
            ("call ended → start sent", s - call[1]),
        ):
            parts.setdefault(name, []).append(value)
    by_phase: dict[str, list[float]] = {}
    for phase, _ended, seconds in hops.get("tick_phases", []):
        by_phase.setdefault(phase, []).append(seconds)
    for phase, values in by_phase.items():
        ms = [x * 1000 for x in values]
        print(f"tick phase {phase} (every tick): {len(ms)}, p50 {pct(ms, 50):.0f} ms, p99 {pct(ms, 99):.0f} ms")
    for name, values in parts.items():
        ms = [x * 1000 for x in values]
        print(f"start hop {name}: {len(ms)}, p50 {pct(ms, 50):.0f} ms, p99 {pct(ms, 99):.0f} ms, max {max(ms):.0f} ms")
    if parts:
        print(f"starts sent by a heartbeat flush (not the push): {by_flush}")


def read_timings(path: Path) -> dict[str, Any]:
    """One web process's timings: the lines :func:`install_timers` appended, merged."""
    timed: dict[str, Any] = {}
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:  # a line cut by the process's end
            continue
        for key, value in line.items():
            if key == "dispatches":
                for kind, values in value.items():
                    timed.setdefault(key, {}).setdefault(kind, []).extend(values)
            elif isinstance(value, dict):
                timed.setdefault(key, {}).update(value)
            else:
                timed.setdefault(key, []).extend(value)
    return timed


def report(args: argparse.Namespace, stats: Stats, window: float, timings: Path) -> None:
    from django.db import close_old_connections

    from scheduler.models import Attempt, Workload

    close_old_connections()
    durations: list[float] = []
    in_window: list[float] = []  # heartbeats received in the measured window
    flushes: list[list[float]] = []
    dispatches: dict[str, list[float]] = {}
    lags: list[float] = []
    sent_starts: dict[int, float] = {}  # wire id → the server's send of its first start
    hops: dict[str, Any] = {}
    thread_cores: dict[str, float] = {}
    for path in sorted(timings.glob("*.jsonl")):  # one per web process
        timed = read_timings(path)
        durations += timed.get("heartbeats", [])
        for at, wait in zip(timed.get("received", []), timed.get("heartbeats", []), strict=False):
            if stats.window_wall[0] <= at <= stats.window_wall[1]:
                in_window.append(wait)
        flushes += timed.get("flushes", [])
        lags += timed.get("lags", [])
        for wire, at in timed.get("starts", {}).items():
            sent_starts[int(wire)] = min(at, sent_starts.get(int(wire), at))
        for kind, values in timed.get("dispatches", {}).items():
            dispatches.setdefault(kind, []).extend(values)
        hops.setdefault("pool_stats_by_process", []).append(timed.get("pool_stats", []))
        for key in (
            "pushes",
            "layer_in",
            "push_calls",
            "flush_calls",
            "tick_phases",
            "hub_waits",
            "attempt_events",
            "first_writes",
        ):
            hops.setdefault(key, []).extend(timed.get(key, []))
        hops.setdefault("start_hosts", {}).update({int(k): v for k, v in timed.get("start_hosts", {}).items()})
        inside = [row for row in timed.get("thread_cpu", []) if stats.window_wall[0] <= row[0] <= stats.window_wall[1]]
        if len(inside) >= 2:  # CPU of each of this web process's threads over the window (by name)
            (t0, first), (t1, last) = inside[0], inside[-1]
            for name, seconds in last.items():
                thread_cores[name] = thread_cores.get(name, 0.0) + (seconds - first.get(name, 0.0)) / (t1 - t0)
    # A start names the attempt by its wire id (scheduler.gateway), not its primary key.
    placed = dict(Attempt.objects.filter(wire_id__in=list(stats.starts)).values_list("wire_id", "placed_at"))
    latencies = [stats.starts[a] - placed[a].timestamp() for a in stats.starts if a in placed]
    n_attempts, n_workloads = Attempt.objects.count(), Workload.objects.count()
    served_by = (
        f"the Procfile's layout ({args.web_workers} web processes, worker, clock)"
        if args.layout
        else "one `manage.py serve` process (web, worker, clock)"
    )
    print(
        f"agents: {stats.connected} connected, {args.gpus} GPUs each, heartbeat every {args.heartbeat:g}s; "
        f"served by {served_by}; server connections: {_connections_label()}"
    )
    if stats.cpu_after:
        cores = {k: (stats.cpu_after[k] - stats.cpu_before.get(k, 0.0)) / window for k in stats.cpu_after}
        print("cores busy in the window: " + ", ".join(f"{k} {v:.2f}" for k, v in cores.items()))
        web = sum(v for k, v in cores.items() if k in ("web", "serve"))
        client = cores.get("agents (client)", 0.0)
        if stats.heartbeats:
            per = window / stats.heartbeats * 1000
            print(
                f"CPU per heartbeat sent: web {web * per:.2f} ms (event loops {cores.get('web loops', 0.0) * per:.2f},"
                f" {cores.get('web loops (system)', 0.0) * per:.2f} of it in the kernel),"
                f" agents client {client * per:.2f} ms "
                f"(everything the process did in the window ÷ heartbeats); "
                f"load average {stats.load_before:.1f} → {stats.load_after:.1f}"
            )
    if thread_cores and stats.heartbeats:
        per = window / stats.heartbeats * 1000
        print(
            "web threads, CPU ms per heartbeat sent (all web processes, by thread name): "
            + ", ".join(f"{k} {v * per:.3f}" for k, v in sorted(thread_cores.items(), key=lambda kv: -kv[1]) if v > 0)
        )
    print(
        f"messages/s: {(stats.sent + stats.received) / window:.0f} "
        f"(sent {stats.sent}, received {stats.received} in {window:.1f}s; "
        f"heartbeats {stats.heartbeats / window:.0f}/s)"
    )
    ms = [d * 1000 for d in durations]
    print(
        f"heartbeat handling (receipt → its flush committed, {len(ms)} heartbeats incl. ramp): "
        f"p50 {pct(ms, 50):.1f} ms, p99 {pct(ms, 99):.1f} ms, max {max(ms, default=float('nan')):.1f} ms"
    )
    if in_window:
        ms = [d * 1000 for d in in_window]
        print(
            f"heartbeat handling in the window ({len(ms)} heartbeats received in it): "
            f"p50 {pct(ms, 50):.1f} ms, p99 {pct(ms, 99):.1f} ms, max {max(ms):.1f} ms"
        )
    if flushes:
        hosts, queries, secs = ([f[i] for f in flushes] for i in range(3))
        print(
            f"flushes: {len(flushes)}, hosts per flush p50 {pct(hosts, 50):.0f} / max {max(hosts):.0f}, "
            f"queries per flush (write + desired state) p50 {pct(queries, 50):.0f} / max {max(queries):.0f}, "
            f"flush duration p50 {pct(secs, 50) * 1000:.0f} ms / p99 {pct(secs, 99) * 1000:.0f} ms"
        )
    if stats.lags:
        lag = [x * 1000 for x in stats.lags]
        print(
            f"agents client event loop lateness in the window: p50 {pct(lag, 50):.0f} ms, "
            f"p99 {pct(lag, 99):.0f} ms, max {max(lag):.0f} ms"
        )
    by_process = [
        [row for row in rows if stats.window_wall[0] <= row[0] <= stats.window_wall[1]]
        for rows in hops.get("pool_stats_by_process", [])
    ]
    got = [(rows[0][1], rows[-1][1]) for rows in by_process if len(rows) >= 2]
    if got:
        n = sum(b.get("requests_num", 0) - a.get("requests_num", 0) for a, b in got)
        queued = sum(b.get("requests_queued", 0) - a.get("requests_queued", 0) for a, b in got)
        wait = sum(b.get("requests_wait_ms", 0) - a.get("requests_wait_ms", 0) for a, b in got)
        print(
            f"web processes' connection pools in the window: {n} checkouts, {queued} waited for a connection "
            f"({wait / max(queued, 1):.0f} ms each on average, {wait / 1000:.1f} s in all)"
        )
    for key, label in (
        ("first_writes", "heartbeat receipt → its first write committed (the host's liveness)"),
        ("hub_waits", "heartbeat receipt → buffered by the hub (its connection's inbox)"),
        ("attempt_events", "attempt events on the agent-database threads (queue + work)"),
    ):
        inside = [x * 1000 for at, x in hops.get(key, []) if stats.window_wall[0] <= at <= stats.window_wall[1]]
        if inside:
            print(
                f"{label}, in the window: {len(inside)}, p50 {pct(inside, 50):.0f} ms, "
                f"p99 {pct(inside, 99):.0f} ms, max {max(inside):.0f} ms"
            )
    if lags:
        lag = [x * 1000 for x in lags]
        print(
            f"web event loop lateness (0.1 s probe): p50 {pct(lag, 50):.0f} ms, "
            f"p99 {pct(lag, 99):.0f} ms, max {max(lag):.0f} ms"
        )
    for kind, values in sorted(dispatches.items()):
        d = [x * 1000 for x in values]
        print(
            f"consumer dispatch {kind} (socket not read meanwhile; incl. ramp): {len(d)}, "
            f"p50 {pct(d, 50):.1f} ms, p99 {pct(d, 99):.0f} ms, max {max(d):.0f} ms"
        )
    lat = [x * 1000 for x in latencies]
    # for _report_ticks's per-start split (and each start's host, for its desired.state hop)
    args.start_times = (placed, sent_starts, stats.starts, hops.get("start_hosts", {}))
    args.layer_in = hops.get("layer_in", [])  # and its commit → consumer desired.state hop
    if sent_starts:
        server = [
            (sent_starts[a] - placed[a].timestamp()) * 1000 for a in stats.starts if a in placed and a in sent_starts
        ]
        wire = [(stats.starts[a] - sent_starts[a]) * 1000 for a in stats.starts if a in sent_starts]
        print(
            f"start commands split: placed_at → the web process sends it p50 {pct(server, 50):.0f} ms, "
            f"p99 {pct(server, 99):.0f} ms; sent → agent receipt p50 {pct(wire, 50):.0f} ms, p99 {pct(wire, 99):.0f} ms"
        )
    _report_hops(hops, placed, sent_starts)
    print(
        f"start commands: {len(lat)} attempts started of {n_attempts} placed "
        f"({n_workloads} of {args.workloads} workloads submitted in the window); "
        f"placed_at → agent receipt p50 {pct(lat, 50):.0f} ms, p99 {pct(lat, 99):.0f} ms, "
        f"max {max(lat, default=float('nan')):.0f} ms"
    )
    if args.submit_rate:
        submitted = json.loads(args.submissions_file.read_text()) if args.submissions_file.exists() else {}
        sub = [x * 1000 for x in submitted.get("latencies", [])]
        errors = submitted.get("errors", {})
        print(
            f"API submissions: offered {args.submit_rate:g}/s, achieved {len(sub) / submitted.get('window', 1):.1f}/s "
            f"(201), p50 {pct(sub, 50):.0f} ms, p99 {pct(sub, 99):.0f} ms, errors {sum(errors.values())} {errors or ''}"
        )
        print(
            f"agents+submissions heartbeat_p99_ms={pct(ms, 99):.0f} start_p99_ms={pct(lat, 99):.0f} "
            f"submit_p99_ms={pct(sub, 99):.0f} submit_achieved_rps={len(sub) / submitted.get('window', 1):.1f}"
        )
    dropped = sum("keepalive ping timeout" in e for e in stats.errors)
    print(f"agents dropped on keepalive ping timeout: {dropped} (of {len(stats.errors)} agent errors)")
    from scheduler.models import HostEvent

    # hb34: a connected host whose heartbeats wait longer than FAIRWAY_HOST_OFFLINE_AFTER_S (in its
    # connection's inbox, behind its attempt events) is taken offline by the sweep
    print(f"hosts taken offline during the run (the sweep): {HostEvent.objects.filter(kind='offline').count()}")
    if stats.errors:
        print(f"errors ({len(stats.errors)}): {stats.errors[:5]}")
    if lat:
        print(f"mean start latency {statistics.fmean(lat):.0f} ms")
    profiles = sorted(str(p) for p in timings.glob("*.prof"))
    if profiles:
        import pstats

        print(f"event-loop profiles of the web processes: {' '.join(profiles)}")
        pstats.Stats(*profiles).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
