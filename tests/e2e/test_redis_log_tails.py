"""Log tails of a workload spanning several hosts, on the Redis channel layer (issue 14, finding 9).

The other gateway tests use the in-memory layer, which never saw "Two event loops are trying to
receive() on one channel layer at once!": channels-redis lets one event loop at a time receive on
a layer instance, the consumers receive on the server's loop, and each host part's request ran
``async_to_sync`` (a loop of its own) in a worker thread. This test runs on Redis: ``REDIS_URL``
when set, else the local Redis at 127.0.0.1:6379 when it answers (skipped otherwise), with a
channel prefix of its own so that concurrent runs do not collide.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from agent import protocol
from config.asgi import application
from scheduler import gateway
from scheduler.models import Attempt, AttemptGPU, Cluster, Host, Workload

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


def _redis_answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not _redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
]


@pytest.fixture
def redis_layer(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": f"fw-test-{uuid.uuid4().hex[:12]}", "expiry": 10},
        }
    }
    yield


def _gang(hosts: list[Host]) -> Attempt:
    from accounts.models import User
    from budgets.models import Budget

    user = User.objects.create_user("logs-user")
    budget = Budget.objects.create(name="logs-budget")
    w = Workload.objects.create(
        name="gang",
        owner=user,
        budget=budget,
        cluster=hosts[0].cluster,
        gpu_model="H100",
        gpu_count=len(hosts),
        command=["sleep", "9"],
        min_runtime_s=60,
        submitted_at=timezone.now(),
        seq=1,
        state=Workload.State.RUNNING,
    )
    a = Attempt.objects.create(
        workload=w, number=1, host=hosts[0], allocated=True, placed_at=timezone.now(), started_at=timezone.now()
    )
    for rank, host in enumerate(hosts):
        AttemptGPU.objects.create(attempt=a, gpu=host.gpus.get(index=0), rank=rank)
    return a


def test_log_tails_of_a_gang_on_two_hosts_work_on_the_redis_layer(redis_layer):
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="logs", allow_root_workloads=True)
    registered = [do_register_host(cluster, name, [(0, f"GPU-{name}", "H100", 80000)]) for name in ("gang-1", "gang-2")]
    attempt = _gang([h for h, _ in registered])
    asyncio.run(_two_hosts(registered, attempt))


async def _two_hosts(registered: list[tuple[Host, str]], attempt: Attempt) -> None:
    from channels.layers import get_channel_layer

    assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
    comms = []
    for host, token in registered:
        comm = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
        )
        assert (await comm.connect())[0]
        await comm.send_to(
            text_data=json.dumps(
                {
                    "v": 1,
                    "type": "hello",
                    "id": 1,
                    "host": host.name,
                    "agent_version": "t",
                    "gpus": [
                        {
                            "index": 0,
                            "uuid": f"GPU-{host.name}",
                            "model": "H100",
                            "memory_mb": 80000,
                            "health": "healthy",
                        }
                    ],  # fmt: skip
                    "attempts": [{"attempt_id": attempt.wire_id, "state": "running", "exit_code": None, "age_s": None}],
                }
            )
        )
        assert isinstance(await _next(comm, protocol.Welcome), protocol.Welcome)
        comms.append((host, comm))

    # the API asks from a request thread while the consumers receive on this (the server's) loop
    tails = asyncio.ensure_future(sync_to_async(gateway.attempt_log_tails, thread_sensitive=False)(attempt.pk, 100))
    for seq, (host, comm) in enumerate(comms, start=2):
        ask = await _next(comm, protocol.Logs)
        assert ask.attempt_id == attempt.wire_id
        reply = {"v": 1, "type": "log", "id": seq, "attempt_id": attempt.wire_id, "data": f"out of {host.name}",
                 "offset": 0, "eof": False}  # fmt: skip
        await comm.send_to(text_data=json.dumps(reply))
    parts = await asyncio.wait_for(tails, 15)

    assert [(p.host, p.rank, p.error, p.data) for p in parts] == [
        ("gang-1", 0, None, "out of gang-1"),
        ("gang-2", 1, None, "out of gang-2"),
    ]
    for _host, comm in comms:
        await comm.disconnect()


async def _next(comm: WebsocketCommunicator, kind: type[protocol.Message]) -> protocol.Message:
    while True:
        msg = protocol.decode(await comm.receive_from(timeout=10), allowed=protocol.SERVER_MESSAGE_TYPES)
        if isinstance(msg, kind):
            return msg


def test_a_replaced_log_tail_loop_is_closed_on_its_own_thread(redis_layer, settings):
    """When the channel layer's settings change (tests), the log-tail loop is replaced: the old one
    must be closed on its own thread, where channels-redis's close wrapper flushes the layer's Redis
    connections. Stopped but never closed, it was closed later by its ``__del__`` in whichever
    thread collected it: with a loop running there (uvicorn's, Playwright's between sync calls, as
    at the browser test's teardown) the flush could not run, "coroutine 'RedisLoopLayer.flush' was
    never awaited", and its connections stayed open."""
    import gc
    import time
    import warnings

    old_loop, old_layer = gateway._log_tail_runner()
    asyncio.run_coroutine_threadsafe(old_layer.send("fw-test.x", {"type": "t"}), old_loop).result(5)
    assert old_loop in old_layer._layers  # channels-redis wrapped this loop's close

    settings.CHANNEL_LAYERS = {"default": {**settings.CHANNEL_LAYERS["default"], "CONFIG": {
        **settings.CHANNEL_LAYERS["default"]["CONFIG"], "prefix": f"fw-test-{uuid.uuid4().hex[:12]}"}}}  # fmt: skip
    new_loop, _ = gateway._log_tail_runner()
    assert new_loop is not old_loop
    deadline = time.monotonic() + 5
    while not old_loop.is_closed() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert old_loop.is_closed()
    assert old_loop not in old_layer._layers  # the wrapper ran: the layer's connections were flushed

    del old_loop, old_layer
    running = asyncio.new_event_loop()
    asyncio.events._set_running_loop(running)  # as Playwright marks its loop between sync calls
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
    finally:
        asyncio.events._set_running_loop(None)
        running.close()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_pushes_from_threads_are_sent_on_the_process_own_layer_loop(redis_layer, monkeypatch):
    """push36: a push from a thread without an event loop (the tick's commit in the worker, an agent
    thread's exit in a web process) is sent on the process's own layer loop, over its kept Redis
    connection: ``async_to_sync`` made a thread, an event loop and a Redis connection per push
    (~4 ms of CPU in the tick's hooks; 26–89 ms of them under load), and in a web process waited
    for the server's event loop."""
    from channels_redis.core import RedisChannelLayer

    loops: list[asyncio.AbstractEventLoop] = []
    send = RedisChannelLayer.group_send

    async def spy(self: RedisChannelLayer, group: str, message: dict) -> None:
        loops.append(asyncio.get_running_loop())
        await send(self, group, message)

    monkeypatch.setattr(RedisChannelLayer, "group_send", spy)
    gateway.push_desired_state([1])  # its host's group
    gateway.push_desired_state(range(1, 10))  # the hubs' group
    gateway.close_host_links([2])
    own_loop, _layer = gateway._log_tail_runner()
    assert len(loops) == 3 and all(loop is own_loop for loop in loops)
