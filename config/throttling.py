"""DRF's request throttles, decided in one Redis round trip (issue 15).

DRF's ``SimpleRateThrottle`` keeps each client's *sliding log* (the instants of its requests in
the last ``duration`` seconds, newest first) as one pickled list in the cache: a request reads
it (one round trip), drops the instants older than ``duration``, is refused when ``num_requests``
remain, and otherwise writes the list back with its own instant first (a second round trip, the
whole list pickled again: 2 × ~0.15 ms and a list of up to ``num_requests`` floats per request).

:class:`OneTripThrottleMixin` applies *the same rule* to the same log kept as a Redis list, in one
Lua script (``EVALSHA``): drop from the tail the instants ``<= now - duration``, refuse when
``num_requests`` remain, else push ``now`` at the head and set the key's expiry to ``duration``
(as DRF's ``cache.set(key, history, duration)``). The instants are the client's ``timer()``
(``repr`` of a float: Lua reads back the same double), so the decisions and ``wait()`` are DRF's;
the one difference is that the script is atomic, where DRF's read-then-write loses a concurrent
request's instant (two processes may both admit the last allowed request). The list lives under
the cache key DRF would use plus ``:log`` (a pickled value from before stays unread and expires).

With any cache other than ``config.cache.FairwayRedisCache`` (the tests' local memory, no
``REDIS_URL``) the throttles are DRF's unchanged. ``tests/api/test_throttle_one_trip.py``
compares both on Redis, decision by decision.
"""

from __future__ import annotations

from typing import Any

from rest_framework import throttling

from config.cache import FairwayRedisCache

# KEYS[1]: the log; ARGV: now (a float's repr), duration (s), num_requests.
# Returns {allowed (0/1), the log's length without this request, the oldest instant kept or false}.
SLIDING_LOG = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local duration = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local last = redis.call('LINDEX', key, -1)
while last and tonumber(last) <= now - duration do
  redis.call('RPOP', key)
  last = redis.call('LINDEX', key, -1)
end
local n = redis.call('LLEN', key)
if n >= limit then
  return {0, n, last or false}
end
redis.call('LPUSH', key, ARGV[1])
redis.call('EXPIRE', key, duration)
return {1, n, last or false}
"""
_scripts: dict[int, Any] = {}  # id(redis client) → its registered script


def throttle_script(cache: Any) -> Any:
    """:data:`SLIDING_LOG` for ``cache`` (a throttle's ``cache``: DRF's default is the settings'
    default cache), or None when the cache is not Redis."""
    from django.core.cache import caches

    return _script(caches["default"] if cache is throttling.default_cache else cache)


def _script(cache: Any) -> Any:
    """The registered script for ``cache``'s Redis client, or None when the cache is not Redis."""
    backend = getattr(cache, "_cache", None) if isinstance(cache, FairwayRedisCache) else None
    if backend is None:
        return None
    client = backend.get_client(write=True)
    script = _scripts.get(id(client))
    if script is None or script.registered_client is not client:
        script = _scripts[id(client)] = client.register_script(SLIDING_LOG)
    return script


class OneTripThrottleMixin:
    """``allow_request`` and ``wait`` of a ``SimpleRateThrottle``, in one round trip on Redis."""

    cache: Any
    rate: str | None
    num_requests: int
    duration: int
    timer: Any

    def allow_request(self, request: Any, view: Any) -> bool:
        from django.core.cache import caches

        cache = caches["default"] if self.cache is throttling.default_cache else self.cache
        script = _script(cache)
        if script is None or self.rate is None:
            return super().allow_request(request, view)  # type: ignore[misc,no-any-return]
        self.key = self.get_cache_key(request, view)  # type: ignore[attr-defined]
        if self.key is None:
            return True
        self.now = self.timer()
        log_key = cache.make_and_validate_key(f"{self.key}:log")
        allowed, count, oldest = script(keys=[log_key], args=[repr(self.now), self.duration, self.num_requests])
        # What DRF's wait() reads: the log's length and its oldest instant (after the drop, and
        # with this request's instant when it was admitted).
        self._count = int(count) + (1 if allowed else 0)
        self._oldest = float(oldest) if oldest else (self.now if allowed else None)
        return bool(allowed)

    def wait(self) -> float | None:
        if not hasattr(self, "_count"):
            return super().wait()  # type: ignore[misc,no-any-return]
        remaining = self.duration if self._oldest is None else self.duration - (self.now - self._oldest)
        available = self.num_requests - self._count + 1
        if available <= 0:
            return None
        return remaining / float(available)


class AnonRateThrottle(OneTripThrottleMixin, throttling.AnonRateThrottle):
    """DRF's ``AnonRateThrottle`` (scope ``anon``, per client address), in one round trip."""


class UserRateThrottle(OneTripThrottleMixin, throttling.UserRateThrottle):
    """DRF's ``UserRateThrottle`` (scope ``user``, per user), in one round trip."""


class SettingsRate:
    """Read the rate from the settings when asked (DRF reads them once, at import): a scope's rate
    in ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``, changed by the settings at run time (tests)."""

    scope: str

    def get_rate(self) -> str | None:
        from rest_framework.settings import api_settings

        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)  # type: ignore[no-any-return]


class QuoteRateThrottle(SettingsRate, OneTripThrottleMixin, throttling.UserRateThrottle):
    """Quotes per user (scope ``quote``, ``FAIRWAY_THROTTLE_QUOTE``, default 30/min), on top of the
    user's API rate: a quote runs a forward simulation of the cluster (up to 300 ms at demo size,
    DESIGN.md §9) where other requests read rows, so 6,000 a minute of them would hold the web
    process's cores. The API's ``workloads/quote/`` and the submit page's Quote button count in it."""

    scope = "quote"


class ExecRateThrottle(SettingsRate, OneTripThrottleMixin, throttling.UserRateThrottle):
    """One-shot commands in running attempts per user (scope ``exec``, ``FAIRWAY_THROTTLE_EXEC``,
    default 30/min), on top of the user's API rate, as quotes: each holds a request thread up to its
    timeout and runs a process on a GPU host (``POST workloads/{id}/exec/``, docs/jobs.md)."""

    scope = "exec"


def quote_wait(request: Any) -> float | None:
    """None when ``request`` (a Django or DRF request of a signed-in user) may run a quote now,
    counted in :class:`QuoteRateThrottle`'s log; else the seconds to wait (DRF's ``wait``, at least 1)."""
    throttle = QuoteRateThrottle()
    if throttle.allow_request(request, None):
        return None
    return max(1.0, throttle.wait() or 1.0)
