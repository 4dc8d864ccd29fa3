"""``config.throttling``: DRF's sliding-log throttle decided in one Redis round trip, against DRF's
own throttle (the oracle), decision by decision and ``wait()`` by ``wait()``, on Redis."""

from __future__ import annotations

from typing import Any

from rest_framework import throttling

from config.throttling import UserRateThrottle


class _User:
    is_authenticated = True

    def __init__(self, pk: int) -> None:
        self.pk = pk


class _Request:
    def __init__(self, pk: int) -> None:
        self.user = _User(pk)
        self.META: dict[str, str] = {"REMOTE_ADDR": "10.0.0.1"}


def _decide(cls: type, clock: list[float], rate: str, user: int) -> tuple[bool, Any]:
    throttle = cls()
    throttle.rate = rate
    throttle.num_requests, throttle.duration = throttle.parse_rate(rate)
    throttle.timer = lambda: clock[0]
    allowed = throttle.allow_request(_Request(user), None)
    return allowed, (None if allowed else throttle.wait())


def test_one_round_trip_decides_as_drf_s_sliding_log(db, redis_cache):
    from django.core.cache import caches

    redis_client = caches["default"]._cache.get_client(write=True)
    # Requests of two users at irregular instants, bursts beyond the limit, gaps longer than the
    # window, instants exactly on its edge: each decided by both (their own logs) at one instant.
    clock = [1_700_000_000.125]
    steps = [0.0, 0.1, 0.1, 0.0, 0.3, 0.5, 0.2, 0.2, 1.0, 0.9, 0.1, 3.0, 0.05, 0.05, 0.05, 0.9, 0.45, 7.0]
    decisions = []
    for step in steps * 3:
        clock[0] += step
        for user in (1, 2):
            ours = _decide(UserRateThrottle, clock, "5/s", user)
            drf = _decide(throttling.UserRateThrottle, clock, "5/s", user)
            assert ours == drf, (clock[0], user, ours, drf)
            decisions.append(ours[0])
    assert True in decisions and False in decisions  # both answers were compared
    key = caches["default"].make_and_validate_key("throttle_user_1:log")
    assert 0 < redis_client.ttl(key) <= 1  # DRF's timeout: the window


def test_without_redis_the_throttle_is_drf_s(db):
    # The tests' local-memory cache: DRF's own path (the pickled log in the cache).
    from django.core.cache import cache

    clock = [100.0]
    assert [_decide(UserRateThrottle, clock, "2/m", 7)[0] for _ in range(3)] == [True, True, False]
    assert cache.get("throttle_user_7") == [100.0, 100.0]


# --- The memos' versions and the user's throttle in one round trip (config.throttling.versions_with_throttle) ---

ME = "/api/v1/me/"


def _redis_commands(monkeypatch: Any) -> list[str]:
    import redis

    sent: list[str] = []
    execute = redis.Redis.execute_command

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "execute_command", counting)
    return sent


def test_a_token_request_reads_the_versions_and_decides_its_throttle_in_one_round_trip(
    researcher, api_client_for, redis_cache, monkeypatch
):
    monkeypatch.setattr(UserRateThrottle, "rate", "4/min", raising=False)
    client = api_client_for(researcher)
    assert client.get(ME).status_code == 200  # cold: the token's rows read and kept
    assert client.get(ME).status_code == 200  # the joint script loaded in Redis
    sent = _redis_commands(monkeypatch)
    answers = [client.get(ME) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2]["Retry-After"] and 0 < int(answers[2]["Retry-After"]) <= 60
    assert sent == ["EVALSHA"] * 3  # one round trip per request, the refused one included


def test_versions_and_throttle_in_one_trip_answer_as_drf_s_throttle_after_authentication(
    researcher, teammate, api_client_for, redis_cache, monkeypatch
):
    """Random requests of two users, token writes between them (a changed version: the request
    authenticates on the current rows and its throttle takes its own trip), against DRF's own
    throttle (the oracle: ``rest_framework.throttling.UserRateThrottle`` over a local cache at the
    same instants): the same status and ``Retry-After`` for every request."""
    import math
    import random
    import secrets

    from django.core.cache import cache
    from django.core.cache.backends.locmem import LocMemCache

    import accounts.auth
    from accounts.auth import TOKENS
    from accounts.services import create_api_token

    clock = [1_700_000_000.25]
    monkeypatch.setattr(throttling.SimpleRateThrottle, "timer", staticmethod(lambda: clock[0]))
    # A window of a minute of the test's clock: the logs' expiry (real seconds) never comes first.
    monkeypatch.setattr(UserRateThrottle, "rate", "6/min", raising=False)
    oracle_cache = LocMemCache("oracle", {})
    paths: list[bool] = []
    joint = accounts.auth.versions_with_throttle

    def recording(request: Any, *args: Any) -> bool:
        read = joint(request, *args)
        paths.append(getattr(request._request, "_fairway_throttle_decided", None) is not None)
        return read

    monkeypatch.setattr(accounts.auth, "versions_with_throttle", recording)
    users = [researcher, teammate]
    clients = [api_client_for(user) for user in users]
    rng = random.Random(30)
    statuses: list[int] = []
    for _ in range(160):
        clock[0] += rng.choice([0.0, 0.0, 0.5, 2.0, 6.0, 15.0, 40.0])
        if rng.random() < 0.06:
            create_api_token(rng.choice(users))  # the tokens' version changes here
        if rng.random() < 0.1:  # ... or in another process: this one's rows are under an old version
            cache.delete(TOKENS.key) if rng.random() < 0.5 else cache.set(TOKENS.key, secrets.token_hex(8), None)
        which = rng.randrange(2)
        answer = clients[which].get(ME)
        oracle = throttling.UserRateThrottle()
        oracle.cache, oracle.rate = oracle_cache, "6/min"
        oracle.num_requests, oracle.duration = oracle.parse_rate(oracle.rate)
        allowed = oracle.allow_request(_Request(users[which].pk), None)
        expected = (200, None) if allowed else (429, str(math.ceil(oracle.wait())))
        assert (answer.status_code, answer.get("Retry-After")) == expected, clock[0]
        statuses.append(answer.status_code)
    assert True in paths and False in paths  # both paths were taken (False: a changed version)
    assert 200 in statuses and 429 in statuses


_PROCESS = """
import sys, django
django.setup()
from rest_framework.permissions import IsAuthenticated
from rest_framework.views import APIView
from accounts.auth import TOKENS
from config.throttling import UserRateThrottle, versions_with_throttle

class View(APIView):
    permission_classes = [IsAuthenticated]
    throttle_classes = [UserRateThrottle]

class User:
    is_authenticated = True
    pk = 1

class Http:
    pass

class Request:
    def __init__(self):
        self._request, self.parser_context, self.user, self.META = Http(), {"view": View()}, User(), {}

admitted = joint = 0
for _ in range(int(sys.argv[1])):
    request = Request()
    assert versions_with_throttle(request, 1, TOKENS.key, TOKENS.version())
    joint += request._request._fairway_throttle_decided is not None
    admitted += UserRateThrottle().allow_request(request, None)
print(admitted, joint)
"""


def test_the_joint_trip_refuses_at_the_rate_across_processes(redis_cache):
    """Three web processes (two here in one trip each, and this one through the throttle's own
    trip) admit the same user's requests at the rate in all, not each."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, FAIRWAY_CACHE_PREFIX=redis_cache, FAIRWAY_THROTTLE_USER="10/min")
    env.pop("DATABASE_URL", None)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    processes = [
        subprocess.Popen([sys.executable, "-c", _PROCESS, "12"], env=env, stdout=subprocess.PIPE, text=True)  # noqa: S603
        for _ in range(2)
    ]
    here = 0
    for _ in range(6):
        throttle = UserRateThrottle()
        throttle.rate = "10/min"
        throttle.num_requests, throttle.duration = throttle.parse_rate(throttle.rate)
        here += throttle.allow_request(_Request(1), None)
    results = [process.communicate(timeout=60)[0].split() for process in processes]
    assert all(process.returncode == 0 for process in processes)
    assert [int(joint) for _, joint in results] == [12, 12]  # every decision in the joint trip
    assert here + sum(int(admitted) for admitted, _ in results) == 10


def test_a_request_refused_by_a_permission_is_not_counted_by_the_throttle(
    researcher, api_client_for, hosts, redis_cache, monkeypatch
):
    """DRF checks permissions before throttles: a 403 is not counted. The joint trip is taken only
    where the view's gates are ``IsAuthenticated`` alone, so a host action refused to a researcher
    (its own ``get_permissions``) leaves the user's log as it was."""
    monkeypatch.setattr(UserRateThrottle, "rate", "3/min", raising=False)
    client = api_client_for(researcher)
    assert client.get(ME).status_code == 200
    for _ in range(5):
        assert client.post("/api/v1/hosts/a100-1/drain/", {}, format="json").status_code == 403
    assert [client.get(ME).status_code for _ in range(3)] == [200, 200, 429]
