"""sso46: the failed-login limit per (user name, address) (``FAIRWAY_THROTTLE_LOGIN_USER``, 10 a
minute) was a peek before the password check and a push after it, two steps: a burst of attempts
sent at once all passed the peek, and every one had its password checked. Now an attempt takes
its place in the count before the password is checked, in one atomic step of the cache (Redis
with ``REDIS_URL``, else the process's local memory): at most the limit are checked, on the API
and the web page together; a right password forgets the pair's failures as before, and an
attempt whose password was never checked (an incomplete form) gives its place back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

LOGIN = "/api/v1/auth/login/"
ADDR = "198.51.100.46"
LIMIT = 10


class CountingBackend:
    """An authentication backend whose password check takes a while (PBKDF2 takes ~0.3 s) and
    counts how many checks ran: every one is a password evaluated."""

    lock = threading.Lock()
    checked = 0
    right = "the right password"  # noqa: S105 -- a test fixture

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None, **kw: Any) -> None:
        with CountingBackend.lock:
            CountingBackend.checked += 1
        time.sleep(0.3)
        return None

    def get_user(self, user_id: int) -> None:
        return None


@pytest.fixture(params=["locmem", "redis"])
def real_cache(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    """The cache the throttle counts in: the process's local memory (no ``REDIS_URL``), and Redis
    (``REDIS_URL``; skipped without it)."""
    if request.param == "redis":
        request.getfixturevalue("redis_cache")
    else:
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {
        **rest["DEFAULT_THROTTLE_RATES"],
        "login": "1000/min",  # the per-address limit out of the way: only the pair's failures count
        "login_user": f"{LIMIT}/min",
    }
    settings.REST_FRAMEWORK = rest
    settings.AUTHENTICATION_BACKENDS = [f"{__name__}.CountingBackend"]
    CountingBackend.checked = 0
    yield request.param


def _api(username: str, password: str = "wrong") -> int:  # noqa: S107 -- a wrong password
    body = {"username": username, "password": password}
    return APIClient().post(LOGIN, body, format="json", REMOTE_ADDR=ADDR).status_code


def _web(username: str, password: str = "wrong") -> int:  # noqa: S107
    return Client().post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ADDR).status_code


def _burst(n: int, attempt: Any) -> list[int]:
    """``n`` attempts released at once from ``n`` threads; their status codes."""
    start = threading.Barrier(n)
    codes: list[int] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            start.wait(10)
            codes.append(attempt(i))
        except BaseException as exc:  # noqa: BLE001 -- reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return codes


@pytest.mark.parametrize("where", ["api", "web", "both"])
def test_a_burst_of_attempts_gets_no_more_password_checks_than_the_limit(db, real_cache, where):
    def attempt(i: int) -> int:
        if where == "api" or (where == "both" and i % 2):
            return _api("admin")
        return _web("Admin ")  # the same pair however the name is written

    codes = _burst(3 * LIMIT, attempt)
    assert CountingBackend.checked == LIMIT, CountingBackend.checked
    assert sorted(codes).count(429) == 2 * LIMIT
    # And the pair stays refused for the window, from either door.
    assert _api("admin") == 429 and _web("admin") == 429
    assert CountingBackend.checked == LIMIT


def test_an_attempt_whose_password_is_not_checked_gives_its_place_back(db, real_cache):
    # A form without a password (the page asks again): nothing checked, nothing counted.
    assert [_web("admin", password="") for _ in range(LIMIT + 2)] == [200] * (LIMIT + 2)
    assert CountingBackend.checked == 0
    assert [_api("admin") for _ in range(LIMIT + 1)] == [400] * LIMIT + [429]
    assert CountingBackend.checked == LIMIT
