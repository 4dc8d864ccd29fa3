"""Many agent connections ending at once, on the Redis channel layer (web29).

Each ending connection ends its channel-layer read with a read-end message (sig28, never by
cancelling it: scheduler/layer_read.py, ``LayerReadConsumer``). Sent through Redis, every one
of those messages took its turn in the process's one shared Redis read, a message at a time: with
1,000 agents leaving a web process at once (``bench/agents_load.py --agents 1000 --layout``'s stop)
reads waited past the 10 s bound, were cancelled or left running, and the web process needed
SIGKILL. The read-end message now goes in the layer's in-process buffer of the channel; Redis
carries one only for the read that holds the shared read. Counted here, not timed: 40 connections
ending together send at most a couple of read-end messages through Redis (40 before), and every
connection's task ends with no read cancelled or left behind.

Runs on ``REDIS_URL`` when set, else the local Redis when it answers (skipped otherwise), with a
channel prefix of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from channels.testing import WebsocketCommunicator

from agent import protocol
from config.asgi import application
from scheduler import consumers, layer_read
from scheduler.models import Cluster
from tests.e2e.test_redis_log_tails import REDIS_URL, _redis_answers, redis_layer  # noqa: F401 -- a fixture

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not _redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
]

CONNECTIONS = 40


def _hello(host: str) -> str:
    gpus = [{"index": 0, "uuid": f"GPU-{host}-0", "model": "H100", "memory_mb": 80000, "health": "healthy"}]
    return json.dumps(
        {"v": 1, "type": "hello", "id": 1, "host": host, "agent_version": "t", "gpus": gpus, "attempts": []}
    )


def test_many_connections_ending_at_once_end_their_reads_without_a_redis_message_each(redis_layer, monkeypatch, caplog):  # noqa: F811
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="many")
    hosts = [
        do_register_host(cluster, f"d{i:03d}", [(0, f"GPU-d{i:03d}-0", "H100", 80000)]) for i in range(CONNECTIONS)
    ]

    async def run() -> list[str]:
        from channels.db import aclose_old_connections
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        ends: list[str] = []
        send = layer.send

        async def counted_send(channel: str, message: dict) -> None:
            if message.get("type") == layer_read.READ_END:
                ends.append(channel)
            await send(channel, message)

        monkeypatch.setattr(layer, "send", counted_send)
        comms = []
        try:
            for host, token in hosts:
                comm = WebsocketCommunicator(
                    application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
                )
                assert (await comm.connect(timeout=10))[0]
                await comm.send_to(text_data=_hello(host.name))
                welcome = protocol.decode(await comm.receive_from(timeout=10), allowed=protocol.SERVER_MESSAGE_TYPES)
                assert isinstance(welcome, protocol.Welcome)
                comms.append(comm)
            # When every agent leaves at once (the connections end as a SIGTERM'd process's do)
            await asyncio.gather(*(c.disconnect(code=consumers.CLOSE_SERVICE_RESTART, timeout=60) for c in comms))
            # Then every connection's task ended on its own (disconnect cancels it only past 60 s)
            assert all(c.future.done() and not c.future.cancelled() for c in comms)
            return ends
        finally:
            await aclose_old_connections()

    with caplog.at_level(logging.WARNING, logger="scheduler.consumers"):
        ends = asyncio.run(run())
    print(f"read-end messages through Redis: {len(ends)}")
    assert len(ends) <= 2, f"{len(ends)} read-end messages sent through Redis for {CONNECTIONS} connections"
    troubles = [r.getMessage() for r in caplog.records if "channel read" in r.getMessage()]
    assert troubles == []


def _pooled_redis_connections(layer) -> int:  # noqa: ANN001 -- channels-redis's layer
    """Connections channels-redis's pools of this event loop have opened (and keep)."""
    loop_layer = layer._layers.get(asyncio.get_running_loop())  # noqa: SLF001 -- counted, a test
    if loop_layer is None:
        return 0
    pools = [client.connection_pool for client in loop_layer._connections.values()]  # noqa: SLF001
    return sum(len(p._available_connections) + len(p._in_use_connections) for p in pools)  # noqa: SLF001


def test_many_connections_ending_at_once_do_not_open_a_redis_connection_each(redis_layer):  # noqa: F811
    """web30: a SIGTERM'd web process closes all its agents' sockets (1012) at once; each disconnect
    leaves its groups through channels-redis, whose pool opened a Redis connection per concurrent
    call (a TCP connect, a handshake, redis-py's package-metadata lookup): with 500 agents the process
    still ran 8 s after its SIGTERM. Counted, not timed: 40 connections ending together open at most
    ``LAYER_SLOTS`` Redis connections more (40 before)."""
    from scheduler import gateway
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="slots")
    hosts = [
        do_register_host(cluster, f"s{i:03d}", [(0, f"GPU-s{i:03d}-0", "H100", 80000)]) for i in range(CONNECTIONS)
    ]

    async def run() -> tuple[int, int]:
        from channels.db import aclose_old_connections
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        comms = []
        try:
            for host, token in hosts:
                comm = WebsocketCommunicator(
                    application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
                )
                assert (await comm.connect(timeout=10))[0]
                await comm.send_to(text_data=_hello(host.name))
                welcome = protocol.decode(await comm.receive_from(timeout=10), allowed=protocol.SERVER_MESSAGE_TYPES)
                assert isinstance(welcome, protocol.Welcome)
                comms.append(comm)
            before = _pooled_redis_connections(layer)
            await asyncio.gather(*(c.disconnect(code=consumers.CLOSE_SERVICE_RESTART, timeout=60) for c in comms))
            assert all(c.future.done() and not c.future.cancelled() for c in comms)
            return before, _pooled_redis_connections(layer)
        finally:
            await aclose_old_connections()

    before, after = asyncio.run(run())
    print(f"Redis connections of the layer: {before} before the disconnects, {after} after")
    assert after - before <= gateway.LAYER_SLOTS, (before, after)
