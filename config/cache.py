"""Django's Redis cache with one client object per connection pool.

``django.core.cache.backends.redis.RedisCacheClient.get_client`` builds a new ``redis.Redis``
object for every cache operation (its response-callback table, ~170 entries, included): two
per API request for the throttle's read and write. A ``redis.Redis`` object holds no connection
of its own (each command borrows one from the pool) and is safe to share between threads, so
one per pool serves every operation; behaviour is otherwise Django's.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:  # two threads may both build one: harmless, one is kept
            if index not in self._pools:
                self._pools[index] = self._pool_class.from_url(self._servers[index], **self._pool_options)
            client = self._clients[index] = self._client(connection_pool=self._pools[index])
        return client


class FairwayRedisCache(RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
