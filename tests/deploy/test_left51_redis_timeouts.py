"""left51: the web's cache (the API's throttle counters) and the channel layer (agents, exec and
port-forward sessions) built their Redis clients with redis-py's own timeouts (5 s to connect and to
read in redis-py 8, none before it) where the clock's are bounded by FAIRWAY_REDIS_CONNECT_TIMEOUT_S
and FAIRWAY_REDIS_SOCKET_TIMEOUT_S (left50). The cache takes both (its ``OPTIONS``), the channel
layer the connect timeout (its host's options; its reads keep their own 30 s, past channels-redis's
5 s blocking read). Against a local "Redis" that accepts and never answers, or drops SYNs
(:func:`tests.deploy.test_process_log_format._silent_redis`), each fails within the bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.test_check_deploy import ROOT
from tests.deploy.test_process_log_format import _silent_redis

_PROBE = r"""
import json, sys, time
import django
django.setup()
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache

def timed(call):
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        return {"took": time.monotonic() - start, "error": f"{type(exc).__name__}: {exc}"}
    return {"took": time.monotonic() - start, "error": None}

layer = get_channel_layer()
calls = {
    "cache": lambda: cache.get("left51"),
    "layer": lambda: async_to_sync(layer.send)("left51", {"type": "probe"}),
}
print(json.dumps({who: timed(calls[who]) for who in sys.argv[1:]}))
"""


def _probe(tmp_path: Path, port: int, *who: str) -> dict[str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRWAY_", "DJANGO_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        FAIRWAY_VAR_DIR=str(tmp_path),
        REDIS_URL=f"redis://127.0.0.1:{port}/3",
        FAIRWAY_REDIS_CONNECT_TIMEOUT_S="0.5",
        FAIRWAY_REDIS_SOCKET_TIMEOUT_S="0.5",
    )
    done = subprocess.run(  # noqa: S603 -- our own interpreter, a fixed script
        [sys.executable, "-c", _PROBE, *who], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cache_bounds_its_wait_on_a_redis_that_accepts_and_never_answers(tmp_path):
    server, held = _silent_redis(full=False)
    try:
        said = _probe(tmp_path, server.getsockname()[1], "cache")
    finally:
        for sock in (server, *held):
            sock.close()
    cache = said["cache"]
    assert cache["error"] and "Timeout" in str(cache["error"]), said
    # redis-py's default read timeout: 5 s (once, or again on a retry)
    assert float(str(cache["took"])) < 3, said


@pytest.mark.parametrize("who", ["cache", "layer"])
def test_the_cache_and_the_channel_layer_bound_a_connect_to_a_redis_that_drops_syns(tmp_path, who):
    server, held = _silent_redis(full=True)
    try:
        said = _probe(tmp_path, server.getsockname()[1], who)
    finally:
        for sock in (server, *held):
            sock.close()
    failed = said[who]
    assert failed["error"] and "Timeout connecting" in str(failed["error"]), said
    # redis-py's default connect timeout: 5 s an attempt (4 attempts with its default retry)
    assert float(str(failed["took"])) < 4, said
