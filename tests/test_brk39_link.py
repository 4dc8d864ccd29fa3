"""brk39: an agent reconnecting with another GPU inventory (one GPU fell off the bus) over a real
connection: its heartbeats name its GPUs by its own indices, which the server maps by UUID while
the inventory waits for approval (the bulk flush wrote them by index onto other cards)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agent import protocol
from scheduler.models import GPU, Cluster
from tests.test_gateway_batch import _communicator, _heartbeat, _receive, _register, _run


@pytest.fixture
def fast_flush(settings: Any) -> None:
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 0.05}


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_held_hosts_heartbeat_over_the_link_lands_on_the_card_that_sent_it(fast_flush):
    cluster = Cluster.objects.create(name="shifted")
    [(host, token)] = _register(cluster, 1, prefix="s")
    GPU.objects.filter(host=host, index=1).update(health="unhealthy")
    # GPU 0 fell off the bus: the agent calls registered GPU 1 (healthy again) its GPU 0.
    hello = {
        "v": 1,
        "type": "hello",
        "id": 1,
        "host": host.name,
        "agent_version": "test",
        "gpus": [{"index": 0, "uuid": f"GPU-{host.name}-1", "model": "H100", "memory_mb": 80000, "health": "healthy"}],
        "attempts": [],
    }

    async def run() -> None:
        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(hello))
        assert isinstance(await _receive(comm), protocol.Welcome)
        beat = json.loads(_heartbeat(2, [], util=61.0))
        beat["gpus"] = beat["gpus"][:1]
        await comm.send_to(text_data=json.dumps(beat))
        for _ in range(100):
            if await sync_to_async(GPU.objects.filter(host=host, index=1, last_sample__utilization_pct=61.0).exists)():
                break
            await asyncio.sleep(0.05)
        await comm.disconnect()

    _run(run())
    assert dict(GPU.objects.filter(host=host).values_list("index", "health")) == {0: "healthy", 1: "healthy"}
    assert GPU.objects.get(host=host, index=1).last_sample["utilization_pct"] == 61.0
