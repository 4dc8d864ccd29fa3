"""The login throttle (issue 14, finding 7): not bypassed by X-Forwarded-For, failures keyed by
user name and address too (sec63), and counted in Redis (shared by every web process) when
REDIS_URL is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/api/v1/auth/login/"


@pytest.fixture
def rates(settings):
    """Small login rates: 3 per address, 5 failures per user name and address (a minute each)."""

    def set_rates(login: str = "3/min", login_user: str = "5/min", proxies: int | None = None) -> None:
        rest = dict(settings.REST_FRAMEWORK)
        rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "login": login, "login_user": login_user}
        if proxies is not None:
            rest["NUM_PROXIES"] = proxies
        settings.REST_FRAMEWORK = rest

    set_rates()
    return set_rates


def _login(username: str, *, addr: str = "10.0.0.1", xff: str | None = None) -> int:
    extra = {"REMOTE_ADDR": addr}
    if xff is not None:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    body = {"username": username, "password": "wrong"}
    return APIClient().post(LOGIN, body, format="json", **extra).status_code


def test_varying_x_forwarded_for_does_not_reset_the_address_counter(db, rates):
    rates(login_user="1000/min")
    codes = [_login(f"user{i}", xff=f"203.0.113.{i}") for i in range(5)]
    assert codes == [400, 400, 400, 429, 429]


def test_behind_one_trusted_proxy_the_address_the_proxy_saw_is_counted(db, rates):
    rates(login_user="1000/min", proxies=1)
    # The proxy appends the address it saw; what the client wrote before it is ignored.
    codes = [_login(f"user{i}", addr="10.9.9.9", xff=f"198.51.100.{i}, 192.0.2.7") for i in range(4)]
    assert codes == [400, 400, 400, 429]
    assert _login("other", addr="10.9.9.9", xff="192.0.2.8") == 400  # another client: its own counter


def test_one_user_names_failures_are_throttled_per_address(db, rates):
    # sec63: counted per name from any address, they locked the person out from everywhere
    rates(login="1000/min")
    codes = [_login("researcher", addr="10.0.1.1") for _ in range(7)]
    assert codes == [400] * 5 + [429, 429]
    assert _login(" Researcher ", addr="10.0.1.1") == 429  # the same name, however written
    assert _login("researcher", addr="10.0.2.1") == 400  # another address: its own count
    assert _login("teammate", addr="10.0.1.1") == 400


def _settings_in_a_process(env: dict[str, str], code: str) -> str:
    full = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "FAIRWAY_ENV", "DJANGO_SETTINGS_MODULE"}}
    full.update(env, DJANGO_SETTINGS_MODULE="config.settings")
    out = subprocess.run(  # noqa: S603 -- our interpreter, our code
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_with_redis_url_the_cache_is_redis_and_proxies_are_trusted_in_production():
    code = (
        "from django.conf import settings; import json; "
        "print(json.dumps([settings.CACHES['default']['BACKEND'], settings.REST_FRAMEWORK['NUM_PROXIES']]))"
    )
    assert json.loads(_settings_in_a_process({"REDIS_URL": "redis://127.0.0.1:1/0"}, code)) == [
        "config.cache.FairwayRedisCache",  # Django's RedisCache, one client object per pool
        0,
    ]
    production = {"FAIRWAY_ENV": "production", "SECRET_KEY": "x" * 55 + "abcde", "ALLOWED_HOSTS": "example.org"}
    assert json.loads(_settings_in_a_process(production, code))[1] == 1
    assert json.loads(_settings_in_a_process({**production, "FAIRWAY_TRUSTED_PROXIES": "2"}, code))[1] == 2


def test_throttle_counts_are_shared_with_another_process(db, rates, redis_cache):
    # Given this process's cache in Redis under a prefix of its own (parallel runs do not collide)
    prefix = redis_cache
    rates(login="1000/min")
    # When this process spends researcher's failed logins from one address
    assert [_login("researcher", addr="127.0.0.1") for i in range(5)] == [400] * 5
    # Then another process (same REDIS_URL and prefix) refuses the next one
    code = """
from django.test import RequestFactory
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from accounts.api.views import LoginFailureThrottle
raw = RequestFactory().post("/api/v1/auth/login/", '{"username": "researcher"}', content_type="application/json")
print(LoginFailureThrottle().allow_request(Request(raw, parsers=[JSONParser()]), None))
"""
    env = {"REDIS_URL": os.environ["REDIS_URL"], "FAIRWAY_CACHE_PREFIX": prefix, "FAIRWAY_THROTTLE_LOGIN_USER": "5/min"}
    assert _settings_in_a_process(env, code) == "False"
