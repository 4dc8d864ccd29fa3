"""Helpers of ``test_production_layout.py`` and ``test_db_failover.py``: real processes, a failover
TCP balancer, the REST API.

Nothing here imports Django: the production layout is driven from outside, like an operator
(process manager, load balancer, ``curl``) would, and read back through the API and SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """Named subprocesses, each in its own session (process group), output to ``<logs>/<name>.log``.

    ``kill9`` sends SIGKILL to a whole group (uvicorn, or dramatiq's supervisor and its worker
    processes); ``stop_all`` sends SIGTERM to every group still alive, then SIGKILL after ``grace``.
    """

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs = logs
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.argv: dict[str, list[str]] = {}
        self.envs: dict[str, dict[str, str]] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        env = dict(self.env if env is None else env)
        self.argv[name], self.envs[name] = list(argv), env
        with (self.logs / f"{name}.log").open("ab") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} start: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(  # noqa: S603 -- our own programs, fixed arguments
                list(argv), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[name] = proc
        return proc

    def restart(self, name: str) -> subprocess.Popen[bytes]:
        return self.start(name, self.argv[name], self.envs[name])

    def run(self, name: str, argv: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> str:
        """Run a command to its end (bounded); returns its output; fails with it on a non-zero exit."""
        proc = self.start(name, argv, env)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9(name)
            raise AssertionError(f"{name} did not finish within {timeout:g}s:\n{self.tail(name)}") from None
        out = self.output(name)
        assert rc == 0, f"{name} exited {rc}:\n{self.tail(name)}"
        return out

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill9(self, name: str) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def stop_all(self, grace: float = 3.0, first: Sequence[str] = ()) -> list[str]:
        """SIGTERM every live group (``first`` ones first), wait up to ``grace``, SIGKILL the rest;
        returns the names of the processes that needed the SIGKILL."""
        order = [n for n in first if n in self.procs] + [n for n in self.procs if n not in first]
        # Only groups whose leader still runs: a group of a command that ended long ago may be gone
        # and its id reused by someone else's process.
        live = [self.procs[name] for name in order if self.procs[name].poll() is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        stubborn = [name for name in order if self.procs[name] in live and self.procs[name].poll() is None]
        for proc in live:
            # The group, not just the leader: dramatiq's worker processes, uvicorn's children.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        return stubborn

    def output(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def tail(self, name: str, lines: int = 40) -> str:
        return "\n".join(self.output(name).splitlines()[-lines:])

    def report(self, lines: int = 60) -> str:
        """The last lines of every process's log, for a failure message."""
        return "\n".join(
            f"===== {name} ({'running' if self.alive(name) else f'exit {self.procs[name].returncode}'}) "
            f"{self.logs / (name + '.log')}\n{self.tail(name, lines)}"
            for name in self.procs
        )


class Balancer:
    """A TCP load balancer 127.0.0.1:``port`` → the first of ``backends`` that accepts a connection.

    What a reverse proxy with several web upstreams does for an agent's websocket: each new
    connection goes to the first reachable backend (the preference order differs per agent),
    an established one lives as long as its backend. ``connections`` records
    ``(time, backend port)`` of every relayed connection.
    """

    def __init__(self, backends: Sequence[int]) -> None:
        self.backends = list(backends)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.connections: list[tuple[float, int]] = []
        self.closed = False
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        threading.Thread(target=self._accept, name=f"balancer-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = None
            for port in self.backends:
                try:
                    upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
                except OSError:
                    continue
                self.connections.append((time.monotonic(), port))
                break
            if upstream is None:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._live |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._live -= {src, dst}

    def current_backend(self) -> int | None:
        return self.connections[-1][1] if self.connections else None

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.close()
        with self._lock:
            live = list(self._live)
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class Api:
    """The REST API of one web process with a personal token (urllib, no Django)."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.token = token

    def call(self, method: str, path: str, body: Any = None, timeout: float = 15) -> tuple[int, Any]:
        req = urllib.request.Request(  # noqa: S310 -- http:// of the local test servers
            f"{self.base_url}/api/v1/{path.lstrip('/')}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 -- see above
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def get(self, path: str, timeout: float = 15) -> Any:
        status, data = self.call("GET", path, timeout=timeout)
        assert status == 200, (path, status, data)
        return data

    def post(self, path: str, body: Any = None, expect: int = 200) -> Any:
        status, data = self.call("POST", path, body if body is not None else {})
        assert status == expect, (path, status, data)
        return data


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, on_timeout: Callable[[], str] = str) -> Any:
    """Poll ``predicate`` every 0.2 s until truthy (returned); AssertionError after ``timeout`` s
    with ``on_timeout()`` (the processes' logs) in the message. Exceptions of the predicate count
    as "not yet" (a web process restarting) and the last one is shown on timeout."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, AssertionError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for {what}"
                + (f" (last error: {last!r})" if last else "")
                + f"\n{on_timeout()}"
            )
        time.sleep(0.2)


def kill_attempt_processes(state_dir: Path) -> None:
    """Attempts outlive their agent by design (own process groups); the test kills what is left."""
    attempts = state_dir / "attempts"
    for record in attempts.glob("*.json") if attempts.is_dir() else ():
        try:
            data = json.loads(record.read_text())
            if data.get("pid"):
                os.killpg(int(data["pid"]), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        else:
            if data.get("var_tmp"):  # its private /var/tmp (docs/isolation.md): the next agent would remove it
                shutil.rmtree(str(data["var_tmp"]), ignore_errors=True)


@contextlib.contextmanager
def own_redis_db(redis_url: str) -> Iterator[str]:
    """A Redis database number nobody uses (claimed with a marker key); flushed at the end."""
    import redis

    base = urlparse(redis_url)
    marker = "fairway:prodlayout:owner"
    for number in range(15, 0, -1):
        url = urlunparse(base._replace(path=f"/{number}"))
        client = redis.Redis.from_url(url)
        if client.set(marker, os.getpid(), nx=True, ex=3600):
            if client.dbsize() == 1:
                break
            client.delete(marker)  # someone else's data is there: not ours
        client.close()
    else:
        pytest.skip("no free Redis database number (1..15) to run the production layout on")
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def server_env(db_url: str, redis_url: str, var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRWAY_", "DJANGO_", "SECURE_"))}
    env.update(
        DATABASE_URL=db_url,
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
        FAIRWAY_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECURE_SSL_REDIRECT="false",  # no TLS-terminating proxy in this test
        FAIRWAY_VAR_DIR=str(var_dir),
        FAIRWAY_DB_POOL_MAX_SIZE="4",
        FAIRWAY_HEARTBEAT_S="0.5",
        FAIRWAY_HEARTBEAT_FLUSH_S="0.1",
        FAIRWAY_TICK_INTERVAL_S="0.5",
        FAIRWAY_TICK_DEBOUNCE_S="0.1",
        FAIRWAY_GRACE_PERIOD_S="3",
        FAIRWAY_HOST_OFFLINE_AFTER_S="20",
        LOG_LEVEL="INFO",
    )
    return env


def web_argv(port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port),
        "--workers", "1", "--ws", "websockets-sansio", "--ws-ping-interval", "120", "--ws-ping-timeout", "60",
        "--ws-max-size", "262144",
        "--lifespan", "off", "--proxy-headers", "--timeout-graceful-shutdown", "30",
        "--log-level", "warning",
    ]  # fmt: skip
