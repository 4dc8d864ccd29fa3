"""``manage.py serve``: the web server (HTTP + agent websockets) and, in the embedded mode, the worker and clock.

Embedded (no ``REDIS_URL``): the dramatiq broker is the stub broker, which only
this process can reach, so the worker threads and the clock always run here.
With ``REDIS_URL`` only the web server runs unless ``--with-worker`` and/or
``--with-clock`` are given (run ``manage.py rundramatiq`` and one clock elsewhere).
With ``FAIRWAY_ENV=production`` it refuses to start without Redis or on SQLite, as the clock and
the workers (scheduler/management/production.py).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import dramatiq
import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agent.protocol import MAX_MESSAGE_BYTES
from fairway_cli.args import whole_number
from scheduler.management.production import refuse_without_shared_services

logger = logging.getLogger("fairway.serve")

WS_PING_INTERVAL_S = 120.0
WS_PING_TIMEOUT_S = 60.0
"""The web processes' keepalive pings to each agent (uvicorn's ``--ws-ping-interval`` /
``--ws-ping-timeout``; the Procfile, the image and the systemd unit say the same): one every 120 s,
a pong 60 s late closes the socket, so the socket of an agent gone without a word (power cut,
partition) is closed within 3 minutes, before its host is lost (``FAIRWAY_HOST_LOST_AFTER_S``,
300 s). The agent pings every 20 s (agent/client.py ``PING_INTERVAL_S``): it is the side that
must notice a dead link soon and reconnect; the host's state comes from its heartbeats. At
uvicorn's default (20 s) each connection carried two pings and two pongs every 20 s, as many
control frames as heartbeats (docs/deploy.md, "The agent link")."""

WS_MAX_SIZE_BYTES = MAX_MESSAGE_BYTES
"""The largest websocket message the web processes take (uvicorn's ``--ws-max-size``; the Procfile,
the image and the systemd unit say the same): the agent protocol's own limit, so a larger frame is
refused by the server's websocket layer (close 1009, "message too big") before it is buffered. At
uvicorn's default (16 MiB) one host's token could make a web process hold 16 MiB per frame that
the app then refused (brk41)."""


def server_config(app: Any, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    """The web process's uvicorn settings (``manage.py serve``; the Procfile's command line says the same)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http="httptools",  # the C parser and libuv loop, as the Procfile (docs/benchmarks/api_load.md)
        loop="uvloop",
        # A bound on the graceful shutdown (HTTP requests in flight); agent connections end at
        # once (scheduler/consumers.py, AgentConsumer.__call__; docs/deploy.md, "Restarting").
        timeout_graceful_shutdown=30,
        ws="websockets-sansio",
        ws_ping_interval=WS_PING_INTERVAL_S,
        ws_ping_timeout=WS_PING_TIMEOUT_S,
        ws_max_size=WS_MAX_SIZE_BYTES,
        lifespan="off",
        log_level=log_level,
        proxy_headers=True,
    )


def start_worker(threads: int = 1) -> dramatiq.Worker:
    """An in-process dramatiq worker on the configured broker (the actors are imported first)."""
    import scheduler.tasks  # noqa: F401 -- declares the actors (and their queues) on the broker

    worker = dramatiq.Worker(dramatiq.get_broker(), worker_threads=threads, worker_timeout=100)
    worker.start()
    return worker


def one_process_pool_size(pool: Mapping[str, Any], max_connections: int, environ: Mapping[str, str]) -> int | None:
    """The pool's max size for a ``serve`` that runs the worker in its own process, or None to keep
    the settings' (an operator's ``FAIRWAY_DB_POOL_MAX_SIZE`` or ``FAIRWAY_DB_PROCESSES``).

    The settings' default shares ``max_connections`` among the Procfile's processes (two web
    processes, two workers, the estimates, the clock, a command: 12 each). One ``serve`` is all
    of them: its requests (one connection each while in flight), the agents' threads, the
    heartbeat flushes and the worker's ticks queue for one pool, and a tick waited there behind
    the requests (docs/benchmarks/api_load.md, eighth pass: p50 455 / p99 1,428 ms). Here it gets
    the share of two processes (itself and one ``manage.py`` command), never less than before."""
    if environ.get("FAIRWAY_DB_POOL_MAX_SIZE") or environ.get("FAIRWAY_DB_PROCESSES"):
        return None
    reserve = max(3, max_connections // 10)  # as config/settings.py
    return max(int(pool["max_size"]), (max_connections - reserve) // 2)


def size_the_pool_for_this_process() -> int | None:
    """Apply :func:`one_process_pool_size` before the process's first connection makes the pool
    (PostgreSQL with the pool on); returns the new max size, or None when nothing changed."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    if not isinstance(pool, dict) or "default" in getattr(DatabaseWrapper, "_connection_pools", {}):
        return None
    size = one_process_pool_size(pool, int(getattr(settings, "DB_MAX_CONNECTIONS", 100)), os.environ)
    if size is not None:
        pool["max_size"] = size
    return size


class Command(BaseCommand):
    help = "Run the Fairway web server (HTTP + agent websockets); embedded mode adds the worker and the clock."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--port", type=whole_number(1, 65535), default=8000, help="port to bind (default 8000)")
        parser.add_argument("--with-worker", action="store_true", help="also run a dramatiq worker in this process")
        parser.add_argument("--with-clock", action="store_true", help="also run the clock in this process")
        parser.add_argument(
            "--worker-threads", type=int, default=2, help="threads of the in-process worker (ticks and estimates)"
        )
        parser.add_argument("--log-level", default="info", help="uvicorn log level (default info)")

    def handle(self, *args: Any, **opts: Any) -> None:
        refuse_without_shared_services("serve (the web server)")
        from scheduler.clock import Clock

        embedded = not settings.REDIS_URL
        with_worker = embedded or opts["with_worker"]
        with_clock = embedded or opts["with_clock"]
        config = server_config("config.asgi:application", opts["host"], opts["port"], opts["log_level"])
        server = uvicorn.Server(config)
        if with_worker:
            size_the_pool_for_this_process()
        worker = start_worker(opts["worker_threads"]) if with_worker else None
        clock = Clock().start() if with_clock else None
        broker = type(dramatiq.get_broker()).__name__
        self.stdout.write(
            f"web on http://{opts['host']}:{opts['port']} (agents: ws://{opts['host']}:{opts['port']}/ws/agent/); "
            f"worker: {'in-process' if worker else 'external'} ({broker}); "
            f"clock: {f'every {clock.interval}s' if clock else 'external'}"
        )
        try:
            server.run()  # returns on SIGINT/SIGTERM after a graceful shutdown
        except KeyboardInterrupt:
            pass
        finally:
            self.stdout.write("shutting down: clock, worker")
            if clock is not None:
                clock.stop()
            if worker is not None:
                stopper = threading.Thread(target=worker.stop, kwargs={"timeout": 5000}, daemon=True)
                stopper.start()
                stopper.join(10)
            self.stdout.write("bye")
