"""The agent link does not wait on one thread (docs/benchmarks/api_load.md, "Fifth pass"): a frame
that touches no database is handled while asgiref's one thread-sensitive thread is busy, and a
message waiting for the database does not stop the connection's socket from being read (uvicorn
reads nothing, keepalive pongs included, until Channels asks for the next message)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections

from agent import protocol
from scheduler import gateway, lifecycle
from scheduler.models import Attempt, Cluster, Host
from tests.test_gateway_batch import _communicator, _heartbeat, _hello, _place, _receive, _register, _run


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_heartbeats_and_pushes_are_handled_while_the_sync_thread_is_busy(settings: Any) -> None:
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 0.05}
    cluster = Cluster.objects.create(name="busy-sync")
    [(host, token)] = _register(cluster, 1, prefix="s")
    release = threading.Event()
    blocked = SyncToAsync.single_thread_executor.submit(release.wait, 30)  # e.g. other consumers' work

    def last_heartbeat() -> Any:
        return Host.objects.get(pk=host.pk).last_heartbeat

    # not the async ORM, which would wait for that thread; connections closed after each call
    read = database_sync_to_async(last_heartbeat, thread_sensitive=False)

    async def run() -> None:
        try:
            comm = _communicator(token)
            assert (await comm.connect(timeout=5))[0]
            await comm.send_to(text_data=_hello(host.name))
            assert isinstance(await _receive(comm), protocol.Welcome)
            before = await read()
            await comm.send_to(text_data=_heartbeat(2, []))
            for _ in range(100):
                if await read() != before:
                    break
                await asyncio.sleep(0.05)
            assert await read() != before  # flushed
            attempt_id = await database_sync_to_async(_place, thread_sensitive=False)(host, "pushed")
            await get_channel_layer().group_send(gateway.host_group(host.pk), {"type": "desired.state"})
            start = await _receive(comm, wait=5)
            assert isinstance(start, protocol.Start) and start.attempt_id == attempt_id
            assert not blocked.done()  # all of it while the sync thread was held
            await comm.disconnect()
        finally:
            release.set()

    _run(run())
    blocked.result(timeout=10)


def _a_started_event_held(
    settings: Any, monkeypatch: Any, cluster_name: str, prefix: str
) -> tuple[Host, str, int, threading.Event, threading.Event]:
    """A host with one placed attempt whose ``started`` event, once sent, waits in
    ``lifecycle.attempt_started`` (``entered`` set) until ``release`` is set: a row lock held by a
    tick, a pool whose connections HTTP requests hold. Heartbeats flushed every 0.05 s."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 0.05}
    cluster = Cluster.objects.create(name=cluster_name)
    [(host, token)] = _register(cluster, 1, prefix=prefix)
    attempt_id = _place(host, "slow")
    entered, release = threading.Event(), threading.Event()
    started = lifecycle.attempt_started

    def slow_started(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)
        return started(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "attempt_started", slow_started)
    return host, token, attempt_id, entered, release


async def _connect_and_send_the_started_event(
    token: str, host_name: str, attempt_id: int, entered: threading.Event
) -> WebsocketCommunicator:
    """Connect as the host, take its welcome and start, send the attempt's ``started`` event and
    return once it waits (:func:`_a_started_event_held`)."""
    comm = _communicator(token)
    assert (await comm.connect(timeout=5))[0]
    await comm.send_to(text_data=_hello(host_name))
    assert isinstance(await _receive(comm), protocol.Welcome)
    assert isinstance(await _receive(comm), protocol.Start)
    event = protocol.AttemptEvent(id=2, attempt_id=attempt_id, state="started")
    await comm.send_to(text_data=protocol.encode(event))
    for _ in range(100):
        if entered.is_set():
            break
        await asyncio.sleep(0.02)
    assert entered.is_set()
    return comm


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_the_socket_is_read_while_an_attempt_event_waits_for_the_database(settings: Any, monkeypatch: Any) -> None:
    host, token, attempt_id, entered, release = _a_started_event_held(settings, monkeypatch, "slow-event", "e")

    async def run() -> None:
        comm = await _connect_and_send_the_started_event(token, host.name, attempt_id, entered)
        for seq in (3, 4, 5):  # read (taken off the connection's input) while the event waits
            await comm.send_to(text_data=_heartbeat(seq, [attempt_id]))
        await asyncio.sleep(0.3)
        assert comm.input_queue.empty()
        release.set()
        ack = await _receive(comm, wait=10)
        assert isinstance(ack, protocol.Ack) and ack.ack == 2  # the event's answer, in order
        await comm.disconnect()

    try:
        _run(run())
    finally:
        release.set()


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_an_event_read_before_the_close_is_recorded_and_nothing_is_sent_to_the_closed_socket(
    monkeypatch: Any,
) -> None:
    """web29: at a bench's stop hundreds of queued events were drained after their sockets closed,
    each ack raising ClientDisconnected (logged with its traceback) while the process shut down."""
    cluster = Cluster.objects.create(name="closed-event")
    [(host, token)] = _register(cluster, 1, prefix="c")
    attempt_id = _place(host, "queued")
    entered, release = threading.Event(), threading.Event()
    started = lifecycle.attempt_started

    def slow_started(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)
        return started(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "attempt_started", slow_started)

    async def run() -> list[dict[str, Any]]:
        comm = _communicator(token)
        assert (await comm.connect(timeout=5))[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        assert isinstance(await _receive(comm), protocol.Start)
        await comm.send_to(
            text_data=protocol.encode(protocol.AttemptEvent(id=2, attempt_id=attempt_id, state="started"))
        )
        for _ in range(100):
            if entered.is_set():
                break
            await asyncio.sleep(0.02)
        assert entered.is_set()
        closing = asyncio.ensure_future(comm.disconnect(timeout=20))  # the agent leaves meanwhile
        await asyncio.sleep(0.2)
        release.set()
        await closing
        out = []
        while not comm.output_queue.empty():
            out.append(comm.output_queue.get_nowait())
        return out

    outputs: list[list[dict[str, Any]]] = []

    async def keep() -> None:
        outputs.append(await run())

    try:
        _run(keep())
    finally:
        release.set()
    (after_close,) = outputs
    assert [m for m in after_close if m.get("type") == "websocket.send"] == []
    assert Attempt.objects.get(wire_id=attempt_id).started_at is not None  # recorded all the same


def _threads_holding_a_connection(executor: ThreadPoolExecutor) -> int:
    """How many of ``executor``'s threads hold a database connection now (each thread asked once:
    a barrier keeps a thread from taking two of the questions)."""
    n = max(1, len(executor._threads))  # noqa: SLF001 -- the threads it started
    barrier = threading.Barrier(n)

    def holds() -> bool:
        held = connections["default"].connection is not None
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(5)
        return held

    return sum(f.result(timeout=20) for f in [executor.submit(holds) for _ in range(n)])


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_the_agent_links_threads_hold_no_connection_between_calls(settings: Any) -> None:
    """Each database call of the agent link gives its connection back (with the pool: to the pool),
    also while Channels' test communicator waits: it replaces ``channels.db.close_old_connections``
    with a no-op for the whole process meanwhile, and the calls that ended then kept their pooled
    connections (the agent threads one each, the hub threads of every test's event loop one each for
    good), until the pool was empty and a hello waited for a connection until the test's end."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 0.05}
    cluster = Cluster.objects.create(name="give-back")
    [(host, token)] = _register(cluster, 1, prefix="g")
    hubs: list[gateway.AgentHub] = []

    async def run() -> None:
        place = database_sync_to_async(_place, thread_sensitive=False)
        comm = _communicator(token)
        assert (await comm.connect(timeout=5))[0]  # the token: an agent thread
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)  # hello, desired state: agent threads
        first = await place(host, "flushed")
        await comm.send_to(text_data=_heartbeat(2, []))
        start = await _receive(comm, wait=5)  # the hub's flush thread
        assert isinstance(start, protocol.Start) and start.attempt_id == first
        second = await place(host, "pushed", 1)
        await get_channel_layer().group_send(gateway.host_group(host.pk), {"type": "desired.state"})
        start = await _receive(comm, wait=5)  # the hub's push thread
        # The hello's reconcile may already have sent ``first`` (placed right after the welcome):
        # the heartbeat, which reports nothing running, then has it sent once more (level-triggered).
        while isinstance(start, protocol.Start) and start.attempt_id == first:
            start = await _receive(comm, wait=5)
        assert isinstance(start, protocol.Start) and start.attempt_id == second
        hubs.append(gateway.hub())
        await comm.disconnect()

    _run(run())

    [hub] = hubs
    assert _threads_holding_a_connection(gateway.agent_db_executor()) == 0
    assert _threads_holding_a_connection(hub.flush_executor) == 0
    assert _threads_holding_a_connection(hub.push_executor) == 0


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_behind_a_waiting_attempt_event_keeps_its_host_alive_then_is_handled_whole(
    settings: Any, monkeypatch: Any
) -> None:
    """hb34: a heartbeat waits its turn behind its connection's attempt event (seconds after a
    tick's burst of starts: up to 53 s, and the sweep took connected hosts offline), but the next
    flush refreshes its host's ``last_heartbeat``; its samples and ``running`` set wait for its
    turn, then are written as before. Before: nothing of it was written while the event waited."""
    host, token, attempt_id, entered, release = _a_started_event_held(settings, monkeypatch, "alive-behind", "a")

    def state() -> tuple[Any, Any]:
        from scheduler.models import GPU

        return (
            Host.objects.get(pk=host.pk).last_heartbeat,
            GPU.objects.get(host_id=host.pk, index=0).last_sample.get("utilization_pct"),
        )

    read = database_sync_to_async(state, thread_sensitive=False)

    async def run() -> None:
        comm = await _connect_and_send_the_started_event(token, host.name, attempt_id, entered)
        before, _util = await read()
        await comm.send_to(text_data=_heartbeat(3, [attempt_id], util=91.0))
        for _ in range(100):
            if (await read())[0] != before:
                break
            await asyncio.sleep(0.05)
        alive_at, util = await read()
        assert alive_at is not None and alive_at != before  # the host is alive while the event waits
        assert util != 91.0  # the heartbeat's samples wait for its turn
        release.set()
        ack = await _receive(comm, wait=10)
        assert isinstance(ack, protocol.Ack) and ack.ack == 2
        for _ in range(100):
            if (await read())[1] == 91.0:
                break
            await asyncio.sleep(0.05)
        assert await read() == (alive_at, 91.0)  # then written whole, at its own receipt
        await comm.disconnect()

    try:
        _run(run())
    finally:
        release.set()


def test_a_heartbeat_is_handled_in_receive_only_when_nothing_of_its_connection_is_pending() -> None:
    """No hop to the handler task for a heartbeat of an idle connection; behind a message being
    handled (or a delivery: the connection's lock) it waits its turn in the inbox."""
    from scheduler.consumers import AgentConsumer

    def frame(running: list[int], seq: int) -> str:
        return protocol.encode(protocol.Heartbeat(gpus=[], running=running, id=seq))

    async def run() -> None:
        c = AgentConsumer()
        c.host, c.seq, c.hello_done, c.reported_running = Host(pk=987, name="idle"), 0, True, set()
        c.sent_starts, c.sent_stops, c.log_requests, c.heard_running = {5, 7}, set(), {}, {}
        c.lock, c.inbox, c.handler = asyncio.Lock(), asyncio.Queue(maxsize=8), None
        c.live, c.closing, c.generation = True, False, 1
        hub = gateway.hub()
        try:
            await c.receive(text_data=frame([5], 1))
            assert c.reported_running == {5} and c.sent_starts == {5}  # handled before receive returned
            assert c.handler is None and 987 in hub.buffer
            async with c.lock:  # e.g. a delivery in progress
                await c.receive(text_data=frame([6], 2))
                assert c.reported_running == {5} and c.inbox.qsize() == 1
            await asyncio.wait_for(c.inbox.join(), 5)
            assert c.reported_running == {6}
        finally:
            hub.buffer.clear()
            for task in (hub.flusher, c.handler):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    asyncio.run(run())


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop", ["hub", "1012"])
def test_when_the_process_stops_a_disconnect_handles_only_the_event_in_hand(monkeypatch: Any, stop: str) -> None:
    """web30: a SIGTERM'd web process waited for every ended connection to handle the attempt
    events it had read (hundreds behind the agent-database threads under load): past a process
    manager's stop timeout. Once the process stops (``AgentHub.stop``: its SIGTERM, or uvicorn's
    1012 close) the event being handled finishes; the one queued behind it is left (not acked: a
    real agent reports it again in its next hello)."""
    cluster = Cluster.objects.create(name="stop-drain")
    [(host, token)] = _register(cluster, 1, prefix="d")
    first, second = _place(host, "first", gpu=0), _place(host, "second", gpu=1)
    entered, release = threading.Event(), threading.Event()
    started = lifecycle.attempt_started

    def slow_started(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)
        return started(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "attempt_started", slow_started)

    async def run() -> None:
        comm = _communicator(token)
        assert (await comm.connect(timeout=5))[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        for seq, aid in ((2, first), (3, second)):
            await comm.send_to(
                text_data=protocol.encode(protocol.AttemptEvent(id=seq, attempt_id=aid, state="started"))
            )
        for _ in range(100):
            if entered.is_set():
                break
            await asyncio.sleep(0.02)
        assert entered.is_set()
        if stop == "hub":  # as the chained SIGTERM handler does; the agent leaves meanwhile
            gateway.hub().stop()
        closing = asyncio.ensure_future(comm.disconnect(code=1012 if stop == "1012" else 1000, timeout=20))
        await asyncio.sleep(0.3)
        release.set()
        await closing

    try:
        _run(run())
    finally:
        release.set()
    gateway.drain_agent_db_threads()  # the call in hand ends on its thread (the process's exit waits for it)
    assert Attempt.objects.get(wire_id=first).started_at is not None  # the event in hand: recorded
    assert Attempt.objects.get(wire_id=second).started_at is None  # queued: left for the next hello


def test_sigterm_and_sigint_stop_every_hub_then_call_the_handler_before() -> None:
    import signal

    called: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in before:
            signal.signal(sig, lambda signum, _frame: called.append(signum))  # uvicorn's, say

        async def run(sig: int) -> bool:
            hub = gateway.hub()  # made on this loop: chains the handlers (once)
            signal.raise_signal(sig)
            await asyncio.sleep(0.05)
            return hub.stopping.is_set()

        assert asyncio.run(run(signal.SIGTERM)) is True
        assert asyncio.run(run(signal.SIGINT)) is True
        assert called == [signal.SIGTERM, signal.SIGINT]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_push_is_sent_while_its_connection_handles_an_attempt_event() -> None:
    """tick35: a delivery (push or flush) waited for the connection's lock, held while the message
    in hand is handled: an attempt event's write (0.3-1 s behind the agent-database threads after a
    tick's burst of starts) held back the next tick's starts for that host. Now it sends at once;
    two deliveries of one start at the same time still send it once."""
    from scheduler.consumers import AgentConsumer

    def start(aid: int) -> protocol.Start:
        return protocol.Start(
            attempt_id=aid,
            workload_id=aid,
            image="",
            command=["true"],
            env={},
            gpu_uuids=["GPU-0"],
            gpu_indices=[0],
            grace_s=30,
        )

    async def run() -> None:
        c = AgentConsumer()
        c.host, c.seq, c.hello_done, c.reported_running = Host(pk=988, name="busy"), 0, True, set()
        c.sent_starts, c.sent_stops, c.log_requests, c.heard_running = set(), set(), {}, {}
        c.lock, c.inbox, c.handler = asyncio.Lock(), asyncio.Queue(maxsize=8), None
        c.live, c.closing, c.generation = True, False, 1
        sent: list[int] = []

        async def send_msg(msg: protocol.Message) -> None:
            await asyncio.sleep(0)  # a send yields to the loop, as the socket's does
            sent.append(msg.attempt_id)  # type: ignore[attr-defined]

        c.send_msg = send_msg  # type: ignore[method-assign]
        async with c.lock:  # an attempt event of this connection being written
            await asyncio.wait_for(c.deliver([start(41)]), 2)
            assert sent == [41]
            await asyncio.wait_for(asyncio.gather(c.deliver([start(42)]), c.deliver([start(42), start(41)])), 2)
        assert sent == [41, 42] and c.sent_starts == {41, 42}

    asyncio.run(run())
