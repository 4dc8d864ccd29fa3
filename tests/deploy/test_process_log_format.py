"""left44: the worker (``manage.py rundramatiq``) and the clock write every line in Fairway's one
log format (``config.settings.LOG_FORMAT``: ``2026-12-06 16:44:27,191 INFO name: message``).

dramatiq's main process wrote its own (``[2026-12-06 16:44:27,190] [PID 20671] [MainThread]
[dramatiq.MainProcess] [INFO] Dramatiq '2.2.1' is booting up.``) beside its worker processes' lines
in Fairway's, the command printed `` * Discovered tasks module: …`` and the clock ``clock: a tick of
every cluster every 5s``, with no time at all."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.deploy.test_check_deploy import ROOT

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.()]+: \S")


def _env(tmp_path: Path) -> dict[str, str]:
    """The embedded mode (no Redis: dramatiq's stub broker), a database of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRWAY_", "DJANGO_"))}
    env.pop("REDIS_URL", None)
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'log.sqlite3'}", FAIRWAY_VAR_DIR=str(tmp_path))
    return env


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database migrated once for the module's clocks (slow50: each test ran ``migrate`` itself,
    seconds of a loaded box each); each test runs on a copy of its own (:func:`_migrated_env`)."""
    where = tmp_path_factory.mktemp("migrated")
    migrated = subprocess.run(  # noqa: S603 -- our own manage.py, fixed arguments
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=_env(where), capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    return where / "log.sqlite3"


def _migrated_env(tmp_path: Path, migrated_db: Path) -> dict[str, str]:
    """:func:`_env` on a copy of the migrated database."""
    shutil.copyfile(migrated_db, tmp_path / "log.sqlite3")
    return _env(tmp_path)


def _run_until(args: list[str], env: dict[str, str], ready: str, timeout: float = 90) -> list[str]:
    """``manage.py <args>`` until a line holds ``ready``, then SIGTERM; every line it wrote."""
    proc = subprocess.Popen(  # noqa: S603 -- our own manage.py, fixed arguments
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # dramatiq forks: the whole group is stopped
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if ready in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGTERM)  # as systemd stops it; dramatiq stops its workers
        out, _ = proc.communicate(timeout=60)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    lines += out.splitlines()
    assert any(ready in line for line in lines), "\n".join(lines)
    return [line for line in lines if line.strip()]


def test_the_worker_logs_every_line_in_fairways_format(tmp_path):
    lines = _run_until(
        ["rundramatiq", "--queues", "scheduler", "--processes", "1", "--threads", "1"],
        _env(tmp_path),
        ready="Worker process is ready for action",
    )
    assert [line for line in lines if not LINE.match(line)] == [], "\n".join(lines)
    said = "\n".join(lines)
    assert "INFO dramatiq.MainProcess: Dramatiq '" in said  # dramatiq's main process, Fairway's format
    assert "Discovered tasks module: 'scheduler.tasks'" in said
    assert "Worker has been shut down." in said


def test_the_clock_logs_every_line_in_fairways_format(tmp_path, migrated_db):
    interval = "30"
    env = _migrated_env(tmp_path, migrated_db)
    lines = _run_until(["clock", "--interval", interval], env, ready="a tick of every cluster")
    assert [line for line in lines if not LINE.match(line)] == [], "\n".join(lines)
    said = "\n".join(lines)
    assert f"INFO scheduler.clock: a tick of every cluster every {interval}s" in said
    assert "INFO scheduler.clock: stopped" in said


def _said_one_beat_failed(lines: list[str], what: str) -> None:
    """The clock's lines: no traceback, its first failed beat one WARNING line saying ``what`` (a
    pattern) and the next try, and a clean stop."""
    said = "\n".join(lines)
    assert "Traceback" not in said, said
    failed = [line for line in lines if "scheduler.clock: clock beat failed" in line]
    assert re.fullmatch(
        rf"\S+ \S+ WARNING scheduler\.clock: clock beat failed: {what}; the clock tries again in 0\.2s", failed[0]
    ), said
    assert "INFO scheduler.clock: stopped" in said


def test_the_clock_says_in_one_line_that_it_could_not_reach_the_database_and_retries(tmp_path):
    """left49: the clock started against an unreachable database printed psycopg's traceback at each
    beat; now one WARNING line per failed beat names the database and the next try (no traceback)."""
    env = _env(tmp_path)
    env.update(DATABASE_URL="postgres://postgres@127.0.0.1:8179/x", FAIRWAY_DB_POOL_TIMEOUT_S="0.5")
    lines = _run_until(["clock", "--interval", "0.2"], env, ready="scheduler.clock: clock beat failed")
    _said_one_beat_failed(lines, r"the database 127\.0\.0\.1:8179/x is unreachable \(PoolTimeout: .+\)")


def test_the_clock_says_in_one_line_that_it_could_not_reach_redis_and_retries(tmp_path, migrated_db):
    """small49: the clock against an unreachable Redis (the broker) printed redis-py's traceback at
    each beat; now one WARNING line per failed beat in the web's words
    (``config.middleware.redis_unreachable``), with the database's backoff."""
    env = _migrated_env(tmp_path, migrated_db)
    env.update(REDIS_URL="redis://:secret@127.0.0.1:8199/3")  # nothing listens there
    lines = _run_until(["clock", "--interval", "0.2"], env, ready="the clock tries again in 0.4s")
    assert "secret" not in "\n".join(lines)
    _said_one_beat_failed(lines, r"Redis 127\.0\.0\.1:8199/3 is unreachable \(ConnectionError: .*8199.*\)")


def test_redis_unreachable_names_the_address_without_credentials(settings):
    import redis.exceptions

    from config.middleware import is_redis_unreachable, redis_unreachable

    settings.REDIS_URL = "redis://user:pw@redis.example.org:6380/2"
    exc = redis.exceptions.ConnectionError("Error 111 connecting to redis.example.org:6380.\n Connection refused.")
    assert is_redis_unreachable(exc) and not is_redis_unreachable(ValueError("x"))
    assert redis_unreachable(exc) == (
        "Redis redis.example.org:6380/2 is unreachable "
        "(ConnectionError: Error 111 connecting to redis.example.org:6380. Connection refused.)"
    )
    settings.REDIS_URL = "unix:///run/redis/redis.sock?db=1"
    assert redis_unreachable(exc).startswith("Redis /run/redis/redis.sock is unreachable")


def test_the_clocks_retries_back_off_to_at_most_half_a_minute():
    from scheduler.clock import retry_delay

    assert [retry_delay(5.0, n) for n in (1, 2, 3, 4, 5)] == [5.0, 10.0, 20.0, 30.0, 30.0]
    assert [retry_delay(0.2, n) for n in (1, 2)] == [0.2, 0.4]
    assert retry_delay(60.0, 3) == 60.0  # never sooner than the interval


def _silent_redis(full: bool) -> tuple[socket.socket, list[socket.socket]]:
    """A local TCP "Redis" that never answers: it accepts and never reads (``full=False``), or its
    backlog of one is full and it never accepts, so that the kernel drops the next SYN (as a host
    behind a firewall that drops them): a connect then waits for its timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0 if full else 16)
    held: list[socket.socket] = []  # closed by the test with the server
    if full:
        for _ in range(3):  # a backlog of 0 holds one or two, by kernel: then SYNs are dropped
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(server.getsockname())
            held.append(filler)
    else:

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    held.append(server.accept()[0])

        threading.Thread(target=accept, daemon=True).start()
    return server, held


@pytest.mark.parametrize(
    ("full", "said"),
    [(False, "Timeout reading from socket"), (True, "Timeout connecting to server")],
    ids=["accepts-never-answers", "drops-syns"],
)
def test_the_clock_bounds_its_wait_on_a_redis_that_never_answers_and_retries(tmp_path, full, said):
    """left50: the clock's Redis clients (the broker, the markers) waited as long as redis-py's own
    default (5 s in redis-py 8; none before it: forever) on a Redis that accepts and never answers,
    or drops SYNs; now FAIRWAY_REDIS_CONNECT_TIMEOUT_S / FAIRWAY_REDIS_SOCKET_TIMEOUT_S bound it,
    and the beat fails in one line and retries as for an unreachable one."""
    env = _env(tmp_path)
    migrated = subprocess.run(  # noqa: S603 -- our own manage.py, fixed arguments
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    server, held = _silent_redis(full)
    try:
        port = server.getsockname()[1]
        env.update(
            REDIS_URL=f"redis://127.0.0.1:{port}/3",
            FAIRWAY_REDIS_CONNECT_TIMEOUT_S="0.5",
            FAIRWAY_REDIS_SOCKET_TIMEOUT_S="0.5",
        )
        lines = _run_until(["clock", "--interval", "0.2"], env, ready="the clock tries again in 0.4s")
    finally:
        for sock in (server, *held):
            sock.close()
    _said_one_beat_failed(lines, rf"Redis 127\.0\.0\.1:{port}/3 is unreachable \(TimeoutError: {said}\)")
    at = {
        "start": next(line for line in lines if "a tick of every cluster" in line),
        "failed": next(line for line in lines if "clock beat failed" in line),
    }
    stamp = {k: datetime.strptime(v[:23] + "+0000", "%Y-%m-%d %H:%M:%S,%f%z") for k, v in at.items()}
    took = (stamp["failed"] - stamp["start"]).total_seconds()
    assert took < 3, f"the first beat failed after {took:.1f} s (redis-py's default: 5 s)"
