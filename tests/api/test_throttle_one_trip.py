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
