"""Django's Redis cache with one client object and one connection pool per process.

``django.core.cache.caches`` keeps a cache object per thread and per asynchronous context, and
under ASGI every request runs on a thread of its own (Django's ``ThreadSensitiveContext``): each
request built a ``RedisCache``, its ``RedisCacheClient``, a new ``redis.ConnectionPool`` and so a
new TCP connection to Redis (connect and handshake), which stayed open until the cyclic garbage
collector freed the pool. Measured on the layout of ``bench/api_load.py`` (docs/benchmarks/
api_load.md, eighth pass): 557 connections received by Redis for 300 requests, and ~1,000
idle ones held by the four web processes; in one process (``bench/api_cpu.py``) the requests inherit the seeding
thread's cache object, which is why the in-process figures did not show it.

Here the client (``RedisCacheClient``: its pools and its ``redis.Redis`` objects) is kept per
process and per configuration (servers and ``OPTIONS``), shared by every cache object built from
that configuration; a ``redis.ConnectionPool`` and a ``redis.Redis`` are safe to share between
threads (each command borrows a connection from the pool), and the pool reconnects after a fork.
``get_client`` also keeps one ``redis.Redis`` per pool: Django's builds one per cache operation
(its response-callback table, ~170 entries, included). Behaviour is otherwise Django's (the key
prefix, version and timeouts stay the cache object's).
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._lock = threading.Lock()

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            with self._lock:  # one pool per server: two threads must not each open one
                client = self._clients.get(index)
                if client is None:
                    if index not in self._pools:
                        self._pools[index] = self._pool_class.from_url(self._servers[index], **self._pool_options)
                    client = self._clients[index] = self._client(connection_pool=self._pools[index])
        return client


_clients: dict[tuple[tuple[str, ...], str], SharedClientRedisCacheClient] = {}
_clients_lock = threading.Lock()


def shared_client(servers: list[str], options: dict[str, Any]) -> SharedClientRedisCacheClient:
    """The process's client for ``servers`` with ``options`` (made on first use)."""
    key = (tuple(servers), repr(sorted(options.items())))
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = SharedClientRedisCacheClient(servers, **options)
    return client


class FairwayRedisCache(RedisCache):
    @cached_property
    def _cache(self) -> SharedClientRedisCacheClient:
        return shared_client(self._servers, self._options)
