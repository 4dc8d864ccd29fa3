"""The server image (Containerfile, `make image`) built and run with podman against the host's
PostgreSQL and Redis (``--network host``): `migrate`, then `web`, `worker` and `clock` containers;
the web container serves /readyz, the admin login page and its collected static files as the
unprivileged user, and the worker and clock containers tick a cluster (its tick shows in /metrics).

Uses the cached base image of `make image` (localhost/fairway-base:bookworm, built by mmdebstrap;
.ci/run makes it once): skipped without podman and mmdebstrap, or before `make image` ran. With the
base cached the build reuses its layers (the virtualenv layer until requirements-server.lock
changes), so the test costs well under a minute.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
BASE = os.environ.get("BASE_IMAGE", "localhost/fairway-base:bookworm")
IMAGE = "localhost/fairway-test:latest"
pytestmark = [
    pytest.mark.skipif(not PODMAN or not shutil.which("mmdebstrap"), reason="podman or mmdebstrap is not installed"),
    pytest.mark.timeout(600),
]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([PODMAN or "podman", *args], capture_output=True, text=True, timeout=timeout)  # noqa: S603
    if check and run.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args[:3])}... failed ({run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
        )
    return run


def runtime() -> list[str]:
    return [] if shutil.which("crun") or not shutil.which("runc") else ["--runtime", "runc"]


def ulimits() -> list[str]:
    """This host's hard ``nofile`` limit is below podman's default (as in tests/agent/test_docker_runtime.py)."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=32768:32768"]


@pytest.fixture(scope="module")
def image() -> str:
    if podman("image", "exists", BASE, check=False).returncode != 0:
        pytest.skip(f"no cached base image {BASE}: run `make image` first (docs/deploy.md)")
    # The build of `make image` (its flags, the build-time CA bundle), under another name.
    env = {**os.environ, "IMAGE": IMAGE.rsplit(":", 1)[0], "BASE_IMAGE": BASE}
    build = subprocess.run(  # noqa: S603 -- the repository's own script
        ["/bin/bash", str(REPO / "scripts" / "build_image.sh")], capture_output=True, text=True, env=env, timeout=540
    )
    assert build.returncode == 0, f"make image failed:\n{build.stdout[-4000:]}{build.stderr[-4000:]}"
    return IMAGE


@pytest.fixture
def database() -> Iterator[str]:
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    # The server of DATABASE_URL (CI's), through its maintenance database `postgres`.
    admin = (
        re.sub(r"/[^/]*$", "/postgres", url)
        if url.startswith("postgres")
        else "postgres://postgres@127.0.0.1:5432/postgres"
    )
    name = f"fairway_image_{os.getpid()}"
    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL on the host: {exc}")
    with conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
        yield re.sub(r"/[^/]*$", f"/{name}", admin)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url() -> str:
    import redis

    url = re.sub(r"/\d*$", "", os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379") + "/13"  # a db of its own
    try:
        redis.Redis.from_url(url, socket_timeout=5).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis on the host: {exc}")
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 -- http://127.0.0.1 only
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def wait_for(what: str, probe, timeout: float = 90) -> object:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_image_runs_web_worker_and_clock_against_postgres_and_redis(image: str, database: str, redis_url: str):
    port = free_port()
    tag = f"fairway-test-{os.getpid()}"
    env = {
        "SECRET_KEY": "image-test-" + "x" * 50,
        "DATABASE_URL": database,
        "REDIS_URL": redis_url,
        "ALLOWED_HOSTS": "fairway.example.org,127.0.0.1",
        "PORT": str(port),
        "WEB_WORKERS": "1",
        "WORKER_PROCESSES": "1",
        "WORKER_THREADS": "2",
        "FAIRWAY_CACHE_PREFIX": tag,
        "FAIRWAY_TICK_INTERVAL_S": "1",
    }
    common = [
        *runtime(),
        "run",
        *ulimits(),
        "--network",
        "host",
        *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
    ]
    started: list[str] = []
    try:
        podman(*common, "--rm", image, "migrate", timeout=180)
        create = "from scheduler.services import do_create_cluster; do_create_cluster('image')"
        podman(*common, "--rm", image, "manage", "shell", "-c", create, timeout=120)
        for process in ("web", "worker", "clock"):
            podman(*common, "-d", "--name", f"{tag}-{process}", image, process)
            started.append(f"{tag}-{process}")
        base = f"http://127.0.0.1:{port}"

        status, body = wait_for("/readyz", lambda: (r := get(f"{base}/readyz"))[0] == 200 and r)  # type: ignore[misc]
        assert '"database"' in body and '"migrations"' in body
        # The worker and the clock tick the cluster: its tick shows in /metrics.
        wait_for(
            "a tick of the cluster",
            lambda: 'fairway_tick_last_run_timestamp_seconds{cluster="image"}' in get(f"{base}/metrics")[1],
        )
        # The admin login page behind a TLS proxy, with its static files collected at build time.
        status, page = get(f"{base}/admin/login/", **{"X-Forwarded-Proto": "https"})
        assert status == 200 and "Django administration" in page
        css = re.search(r'href="(/static/admin/css/[^"]+\.css)"', page)
        assert css and re.search(r"\.[0-9a-f]{12}\.css$", css.group(1)), "hashed static names (collectstatic)"
        assert get(base + css.group(1), **{"X-Forwarded-Proto": "https"})[0] == 200
        assert podman("exec", f"{tag}-web", "id", "-u").stdout.strip() == "10001"
        # The image's health probe (Host: the first ALLOWED_HOSTS name), as compose's readiness check runs it.
        podman("exec", f"{tag}-web", "python", "deploy/image/healthcheck.py", "/readyz?exclude=tick")
        podman("healthcheck", "run", f"{tag}-web")  # the image's HEALTHCHECK (/livez)
        for name in started:
            assert podman("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true", name
    except BaseException:
        for name in started:
            logs = podman("logs", "--tail", "40", name, check=False)
            print(f"--- {name}\n{logs.stdout}{logs.stderr}")
        raise
    finally:
        for name in started:
            podman("rm", "-f", "-t", "5", name, check=False)
