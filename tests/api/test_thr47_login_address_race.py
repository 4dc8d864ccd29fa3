"""thr47: the per-address login limit (``FAIRWAY_THROTTLE_LOGIN``, every attempt per client
address, :class:`accounts.api.views.LoginThrottle`) was DRF's ``AnonRateThrottle``: it read the
address's log of attempts, and wrote it back with one more, two steps of the cache. Attempts sent
at once from one address all read the same log, each wrote it back with one more, and all passed:
a guesser with parallel connections got as many password checks as connections, whatever the
limit, on Redis and in local memory alike. Now each attempt takes its place in one atomic step
(Redis: one script; any other cache: ``cache.add`` of a free slot), so a burst gets at most the
limit, from the API and the web page together.

The caches here answer reads after a delay (``SlowReads``: a round trip to Redis, or a thread
descheduled between the read and the write, made certain): the race is then lost every time by a
read-then-write counter, while an atomic step has nothing between its read and its write. The
last test needs no delay: six processes sharing Redis, four attempts each at one instant (before:
20 and 8 of the 24 let through a limit of 5, in two runs)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client
from rest_framework.test import APIClient

from config.cache import FairwayRedisCache
from tests.api.test_sso46_login_burst import _burst as burst

LOGIN = "/api/v1/auth/login/"
ADDR = "203.0.113.47"
LIMIT = 5
BURST = 4 * LIMIT
DELAY = 0.25  # seconds a read of a throttle's count takes (the burst starts at a barrier: far less apart)


class SlowReads:
    """A cache whose reads of throttle counts (DRF's keys, ``throttle_…``) answer :data:`DELAY`
    after the value was read (one delay per read, ``get_many`` included); other reads, writes
    and ``add`` are the cache's own."""

    _inside = threading.local()

    def _delay(self, keys: list[str]) -> None:
        if not getattr(self._inside, "on", False) and any(k.startswith("throttle_") for k in keys):
            time.sleep(DELAY)

    def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        value = super().get(key, *args, **kwargs)  # type: ignore[misc]
        self._delay([key])
        return value

    def get_many(self, keys: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        self._inside.on = True  # the cache's own get_many may read key by key: delayed once
        try:
            values = super().get_many(keys, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._inside.on = False
        self._delay(keys)
        return values


class WrongPasswords:
    """Every password is wrong, at once (no PBKDF2 for each of the burst's attempts)."""

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None, **kw: Any) -> None:
        return None

    def get_user(self, user_id: int) -> None:
        return None


class SlowLocMemCache(SlowReads, LocMemCache):
    pass


class SlowRedisCache(SlowReads, FairwayRedisCache):
    pass


@pytest.fixture(params=["locmem", "redis"])
def slow_cache(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    if request.param == "redis":
        prefix = request.getfixturevalue("redis_cache")
        settings.CACHES = {"default": {**settings.CACHES["default"], "BACKEND": f"{__name__}.SlowRedisCache"}}
        assert settings.CACHES["default"]["KEY_PREFIX"] == prefix
    else:
        # a location of its own: LocMemCache keeps its entries by location for the process, and an
        # ``id()`` comes back for a later test (the address refused an hour by the one before: all 429)
        location = f"thr47-{uuid.uuid4().hex}"
        settings.CACHES = {"default": {"BACKEND": f"{__name__}.SlowLocMemCache", "LOCATION": location}}
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {
        **rest["DEFAULT_THROTTLE_RATES"],
        "login": f"{LIMIT}/hour",  # the window outlasts the test
        "login_user": "100/min",  # the pair's failures out of the way: only the address counts
    }
    settings.REST_FRAMEWORK = rest
    settings.AUTHENTICATION_BACKENDS = [f"{__name__}.WrongPasswords"]
    yield request.param


def _api(i: int) -> int:
    body = {"username": f"guess{i}", "password": "wrong"}
    return APIClient().post(LOGIN, body, format="json", REMOTE_ADDR=ADDR).status_code


def _web(i: int) -> int:
    body = {"username": f"guess{i}", "password": "wrong"}
    return Client().post("/login/", body, REMOTE_ADDR=ADDR).status_code


def _burst(attempt: Any) -> list[int]:
    """:data:`BURST` attempts released at once from as many threads; their status codes."""
    codes = burst(BURST, attempt)
    assert len(codes) == BURST
    return codes


@pytest.mark.parametrize("door", ["api", "web", "both"])
def test_a_burst_from_one_address_gets_no_more_attempts_than_the_limit(db, slow_cache, door):
    def attempt(i: int) -> int:
        return _api(i) if door == "api" or (door == "both" and i % 2) else _web(i)

    codes = _burst(attempt)
    assert codes.count(429) == BURST - LIMIT, sorted(codes)
    # The ones let through had their password checked: a wrong one (the API's 400, the page's 200).
    assert all(c in {"api": (400,), "web": (200,), "both": (200, 400)}[door] for c in codes if c != 429), codes
    # The address stays refused for the window, from either door; another address is not.
    assert _api(BURST) == 429 and _web(BURST) == 429
    other = {"username": "x", "password": "y"}
    assert APIClient().post(LOGIN, other, format="json", REMOTE_ADDR="203.0.113.48").status_code == 400


RACER = """
import sys, time
from django.test import RequestFactory
from rest_framework.request import Request
from accounts.api.views import LoginThrottle
raw = RequestFactory().post("/api/v1/auth/login/", REMOTE_ADDR=sys.argv[1])
request = Request(raw)
request._request.user = None
print("ready", flush=True)
start = float(sys.stdin.readline())
time.sleep(max(0.0, start - time.time()))
print([LoginThrottle().allow_request(request, None) for _ in range(int(sys.argv[2]))].count(True))
"""


def test_web_processes_racing_on_redis_get_no_more_than_the_limit(redis_cache):
    """Without any delay: web processes sharing Redis (``REDIS_URL``), each sending attempts from
    one address at the same instant. DRF's read-then-write let several read the same log."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    processes, each = 6, 4
    env = {k: v for k, v in os.environ.items() if k not in {"FAIRWAY_ENV", "DJANGO_SETTINGS_MODULE"}}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        FAIRWAY_CACHE_PREFIX=redis_cache,
        FAIRWAY_THROTTLE_LOGIN=f"{LIMIT}/hour",
    )
    code = "import django; django.setup()\n" + RACER
    racers = [
        subprocess.Popen(  # noqa: S603 -- our interpreter, our code
            [sys.executable, "-c", code, ADDR, str(each)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(processes)
    ]
    # slow50: the common instant is set once every process said it is set up (it was a fixed 15 s
    # ahead, waited in full however soon they were ready), a second ahead: each one sleeps until it
    readies = [r.stdout.readline() for r in racers]  # type: ignore[union-attr]
    start = time.time() + 1.0
    for r in racers:  # to all before any is waited for
        try:
            r.stdin.write(f"{start!r}\n")  # type: ignore[union-attr]
            r.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:  # it ended before: its output says why
            pass
    outs = [r.communicate(timeout=120) for r in racers]
    assert readies == ["ready\n"] * processes, ([e[-500:] for _, e in outs], readies)
    assert all(r.returncode == 0 for r in racers), [e[-500:] for _, e in outs]
    assert time.time() > start, "a process answered before the common instant"
    allowed = [int(o.strip().splitlines()[-1]) for o, _ in outs]
    assert sum(allowed) == LIMIT, allowed
