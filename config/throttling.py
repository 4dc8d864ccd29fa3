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
        log_key = cache.make_and_validate_key(f"{self.key}:log")
        http = getattr(request, "_request", request)
        decided = getattr(http, "_fairway_throttle_decided", None)
        if decided is not None and decided[0] == log_key and decided[1] == self.rate:
            # Decided by the same rule with the memos' versions (versions_with_throttle): once.
            http._fairway_throttle_decided = None
            _, _, self.now, allowed, count, oldest = decided
        else:
            self.now = self.timer()
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


# --- The memos' versions and the user's throttle in one round trip (issue 15, nineteenth pass) ---
#
# KEYS: the memos' version keys, then the log. ARGV[1..3]: as SLIDING_LOG; ARGV[4]: the index (in
# KEYS) of the version the request's user was found under, ARGV[5]: that version's stored value.
# Returns the versions' stored values, then -1 when that version changed (nothing else done), else
# SLIDING_LOG's three answers.
VERSIONS_AND_LOG = """
local n = #KEYS - 1
local out = {}
for i = 1, n do out[i] = redis.call('GET', KEYS[i]) end
if out[tonumber(ARGV[4])] ~= ARGV[5] then
  out[n + 1] = -1
  return out
end
local key = KEYS[n + 1]
local now = tonumber(ARGV[1])
local duration = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local last = redis.call('LINDEX', key, -1)
while last and tonumber(last) <= now - duration do
  redis.call('RPOP', key)
  last = redis.call('LINDEX', key, -1)
end
local count = redis.call('LLEN', key)
if count >= limit then
  out[n + 1] = 0
else
  redis.call('LPUSH', key, ARGV[1])
  redis.call('EXPIRE', key, duration)
  out[n + 1] = 1
end
out[n + 2] = count
out[n + 3] = last or false
return out
"""
_joint_scripts: dict[int, Any] = {}
_made_keys: dict[tuple[Any, ...], list[str]] = {}  # the versions' keys in the cache, per prefix and version


def _user_throttle(request: Any) -> Any:
    """The view's one user throttle when DRF would run it right after authentication with nothing
    between that could refuse the request: every permission is ``IsAuthenticated`` (an
    authenticated user passes it), the throttles are this module's ``AnonRateThrottle`` (no key for
    an authenticated user) and one ``UserRateThrottle`` with a rate, counted in the default cache.
    None otherwise (then the throttle takes its own round trip, in DRF's order)."""
    from rest_framework.permissions import IsAuthenticated
    from rest_framework.views import APIView

    view = (getattr(request, "parser_context", None) or {}).get("view")
    if view is None:
        return None
    cls = type(view)
    if cls.check_permissions is not APIView.check_permissions or cls.check_throttles is not APIView.check_throttles:
        return None  # DRF's order of the gates is what this relies on
    try:
        if cls.get_permissions is APIView.get_permissions:  # DRF's: one instance of each class
            if any(permission is not IsAuthenticated for permission in view.permission_classes):
                return None
        elif any(type(permission) is not IsAuthenticated for permission in view.get_permissions()):
            return None
        if cls.get_throttles is APIView.get_throttles:  # DRF's: one instance of each class
            classes = view.throttle_classes
            if any(c is not AnonRateThrottle and c is not UserRateThrottle for c in classes):
                return None
            throttles = [c() for c in classes if c is UserRateThrottle]
        else:
            throttles = view.get_throttles()
    except Exception:
        return None
    found = None
    for throttle in throttles:
        if type(throttle) is AnonRateThrottle:
            continue
        if type(throttle) is not UserRateThrottle or found is not None:
            return None
        found = throttle
    if found is None or found.rate is None or found.cache is not throttling.default_cache:
        return None
    return found


def versions_with_throttle(request: Any, user_pk: Any, memo_key: str, version: str) -> bool:
    """Read the request's memo versions (``config.memo.request_tokens``) and decide its user
    throttle in one Redis round trip, for a request whose user this process found, by its
    credentials alone, under ``memo_key``'s ``version`` (``accounts.auth``). The throttle is decided
    only if that version is still the stored one (else the request authenticates on the current
    rows and the throttle takes its own trip). Returns whether the versions were read (False: no
    Redis cache, or the view's throttles are not the plain user throttle; nothing done)."""
    from django.core.cache import caches

    from config import memo

    cache = caches["default"]
    backend = getattr(cache, "_cache", None) if isinstance(cache, FairwayRedisCache) else None
    if backend is None or not memo.shared():
        return False
    throttle = _user_throttle(request)
    if throttle is None:
        return False
    memos = list(memo.PER_REQUEST)
    names = [memo_.key for memo_ in memos]
    if memo_key not in names:
        return False
    made = _made_keys.get((cache.key_prefix, cache.version, *names))
    if made is None:
        made = _made_keys[(cache.key_prefix, cache.version, *names)] = [cache.make_and_validate_key(n) for n in names]
    serializer = backend._serializer
    client = backend.get_client(write=True)
    script = _joint_scripts.get(id(client))
    if script is None or script.registered_client is not client:
        script = _joint_scripts[id(client)] = client.register_script(VERSIONS_AND_LOG)
    ident = throttle.cache_format % {"scope": throttle.scope, "ident": user_pk}
    log_key = cache.make_and_validate_key(f"{ident}:log")
    now = throttle.timer()
    try:
        answer = script(
            keys=[*made, log_key],
            args=[
                repr(now),
                throttle.duration,
                throttle.num_requests,
                names.index(memo_key) + 1,
                serializer.dumps(version),
            ],
        )
    except Exception:  # a cache outage: the usual paths (they log it and carry on)
        return False
    tokens: dict[str, Any] = {}
    for memo_, raw in zip(memos, answer, strict=False):
        value = serializer.loads(raw) if raw is not None else None
        tokens[memo_.key] = value if isinstance(value, str) else memo_.version()  # missing: created
    http = getattr(request, "_request", request)
    http._fairway_memo_tokens = tokens
    allowed = int(answer[len(memos)])
    if allowed >= 0:
        oldest = answer[len(memos) + 2]
        http._fairway_throttle_decided = (log_key, throttle.rate, now, allowed, int(answer[len(memos) + 1]), oldest)
    return True
