"""Failed agent authentications per client address (flood51; docs/deploy.md, "The agent link").

Each connection to ``/ws/agent/`` with a bad or missing host token cost two queries on the
agent-database threads (:func:`scheduler.gateway.agent_db`) and a warning line, unbounded: a flood
from one address queued ahead of real agents' hellos and events and filled the log. Now the
failures of one client address are counted as the API's failed logins are
(:class:`accounts.api.views.SlotThrottle`, in the default cache: Redis when ``REDIS_URL`` is set,
shared by the web processes), past ``FAIRWAY_THROTTLE_AGENT_AUTH`` (default 30/min) a connection
is refused before any query, and each process logs one line a minute about the refused ones.

The address is the API throttles' (DRF's ``get_ident`` of the request Django makes of the
handshake: ``REMOTE_ADDR``, or behind ``FAIRWAY_TRUSTED_PROXIES`` proxies the address the
outermost of them saw). A place is taken before the token is checked (one atomic ``cache.add``: a
burst sent at once gets no more than the bound, sso46) and given back when it was good: a success
counts nothing.
"""

from __future__ import annotations

import collections
import io
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest

from accounts.api.views import SlotThrottle

logger = logging.getLogger("scheduler.consumers")

REFUSAL_LOG_EVERY_S = 60.0
"""A process logs connections the bound refused at most once in this many seconds."""
REFUSAL_ADDRESSES_KEPT = 1000
"""Distinct addresses one refusal line counts by name (a flood from many counts the rest together)."""


class AgentAuthFailureThrottle(SlotThrottle):
    """Failed agent authentications per client address (scope ``agent_auth``)."""

    scope = "agent_auth"

    def get_cache_key(self, request: Any, view: object) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def handshake_request(scope: dict[str, Any]) -> ASGIRequest:
    """The request Django makes of a websocket's handshake (its ``META``: ``REMOTE_ADDR`` from the
    scope's client, ``HTTP_X_FORWARDED_FOR`` from its headers, as for HTTP)."""
    return ASGIRequest({**scope, "method": "GET"}, io.BytesIO())


class AgentAuthLimit:
    """One connection's place among its address's failures."""

    def __init__(self, scope: dict[str, Any]) -> None:
        self.request = handshake_request(scope)
        self.throttle = AgentAuthFailureThrottle()

    @property
    def address(self) -> str | None:
        return self.throttle.get_ident(self.request)  # type: ignore[no-any-return]

    @property
    def rate(self) -> str | None:
        return self.throttle.rate

    def _take(self) -> float | None:
        if self.throttle.take(self.request):
            return None
        return max(1.0, self.throttle.wait() or 1.0)

    async def take(self) -> float | None:
        """None: the token may be checked (a place is held until :meth:`give_back`); else the
        seconds until the address's oldest failure leaves the window. Off the event loop (a cache
        round trip), and not on the agent-database threads."""
        try:
            return await sync_to_async(self._take, thread_sensitive=False)()
        except Exception:  # noqa: BLE001 -- the cache lost: the link's own Redis step reports it
            logger.debug("agent authentication limit not read", exc_info=True)
            return None

    async def give_back(self) -> None:
        """The token was good (or not checked): the place taken counts nothing."""
        try:
            await sync_to_async(self.throttle.give_back, thread_sensitive=False)()
        except Exception:  # noqa: BLE001 -- as in take: the slot expires with its window anyway
            logger.debug("agent authentication limit not given back", exc_info=True)


class RefusalLog:
    """The process's log of connections the bound refused: one line at the first, then at most one
    every :data:`REFUSAL_LOG_EVERY_S`, counting those refused since the last."""

    def __init__(self) -> None:
        self.next_at = 0.0
        self.refused = 0
        self.addresses: collections.Counter[str] = collections.Counter()

    def note(self, address: str | None, rate: str | None) -> None:
        self.refused += 1
        name = str(address)
        if name in self.addresses or len(self.addresses) < REFUSAL_ADDRESSES_KEPT:
            self.addresses[name] += 1
        now = time.monotonic()
        if now < self.next_at:
            return
        top, most = self.addresses.most_common(1)[0] if self.addresses else ("?", 0)
        since = "" if self.next_at == 0.0 else f" in the last {REFUSAL_LOG_EVERY_S:.0f} s"
        logger.warning(
            "agent connections refused before authentication: %d%s, from %s address(es) (most from %s: %d), "
            "each past FAIRWAY_THROTTLE_AGENT_AUTH=%s failed authentications from its address; "
            "none asked the database (next such line in %.0f s at the earliest)",
            self.refused,
            since,
            len(self.addresses) if len(self.addresses) < REFUSAL_ADDRESSES_KEPT else f"{REFUSAL_ADDRESSES_KEPT}+",
            top,
            most,
            rate,
            REFUSAL_LOG_EVERY_S,
        )
        self.next_at = now + REFUSAL_LOG_EVERY_S
        self.refused = 0
        self.addresses.clear()


REFUSALS = RefusalLog()
