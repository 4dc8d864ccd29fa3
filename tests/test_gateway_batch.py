"""Coalesced heartbeats (scheduler.gateway.AgentHub): one flush writes every buffered heartbeat in a
fixed number of queries, the flush keeps the level-triggered resend, a bad heartbeat changes nothing,
and the rare cases (health change, fatal XID, offline host) still go through ``record_heartbeat``."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import timedelta
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent import protocol
from config.asgi import application
from scheduler import gateway, lifecycle
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, GpuMinuteSample, Host, HostEvent, Workload
from tests.conftest import connected

# 10 + the SELECT … FOR UPDATE of the hosts in id order (docs/locking.md) + the read of the attempts to
# start (the desired state reads open attempts narrowly first: a flush with nothing to start has one less)
MAX_FLUSH_QUERIES = 12


def _register(cluster: Cluster, n: int, prefix: str = "b") -> list[tuple[Host, str]]:
    from scheduler.services import do_register_host

    registered = [
        do_register_host(
            cluster, f"{prefix}{i:03d}", [(g, f"GPU-{prefix}{i:03d}-{g}", "H100", 80000) for g in range(2)]
        )
        for i in range(n)
    ]
    connected(*(host for host, _token in registered))  # their agents said hello
    return registered


def _samples(util: float = 50.0, health: str = "healthy", xids: tuple[int, ...] = ()) -> list[lifecycle.GpuSample]:
    return [
        lifecycle.GpuSample(
            index=g,
            health=health if g == 1 else "healthy",
            xids=xids if g == 1 else (),
            sample={"utilization_pct": util, "memory_used_mb": 1000, "temperature_c": 50.0, "power_w": 300.0},
        )
        for g in range(2)
    ]


def _place(host: Host, name: str, gpu: int = 0) -> int:
    from accounts.models import User
    from budgets.models import Budget

    user, _ = User.objects.get_or_create(username="batch-user")
    budget, _ = Budget.objects.get_or_create(name="batch-budget")
    w = Workload.objects.create(
        name=name,
        owner=user,
        budget=budget,
        cluster=host.cluster,
        gpu_model="H100",
        gpu_count=1,
        command=["sleep", "1"],
        min_runtime_s=60,
        submitted_at=timezone.now(),
        seq=Workload.objects.count() + 1,
        state=Workload.State.STARTING,
    )
    a = Attempt.objects.create(workload=w, number=1, host=host, allocated=True, placed_at=timezone.now())
    AttemptGPU.objects.create(attempt=a, gpu=host.gpus.get(index=gpu))
    return a.wire_id  # what the agent link names it by


def _flush(hosts: list[Host], now: Any) -> tuple[int, dict[int, list[protocol.Message]]]:
    reports = [lifecycle.HeartbeatReport(h.pk, now, _samples()) for h in hosts]
    views = [gateway.AgentView(h.pk, set()) for h in hosts]
    with CaptureQueriesContext(connection) as ctx:
        commands = gateway.flush_heartbeats(reports, views)
    return len(ctx.captured_queries), commands


@pytest.mark.django_db
def test_one_flush_writes_5_or_50_hosts_in_the_same_number_of_queries():
    cluster = Cluster.objects.create(name="batch")
    hosts = [h for h, _ in _register(cluster, 55)]
    few, many = hosts[:5], hosts[5:]
    first, second = _place(few[0], "a"), _place(many[-1], "b")
    now = timezone.now().replace(second=10, microsecond=0)

    n_few, cmds_few = _flush(few, now)
    n_many, cmds_many = _flush(many, now + timedelta(seconds=1))

    assert n_few == n_many <= MAX_FLUSH_QUERIES
    assert [c.attempt_id for c in cmds_few[few[0].pk] if isinstance(c, protocol.Start)] == [first]
    assert [c.attempt_id for c in cmds_many[many[-1].pk] if isinstance(c, protocol.Start)] == [second]
    assert sum(len(v) for v in cmds_many.values()) == 1
    assert Host.objects.filter(pk__in=[h.pk for h in many], last_heartbeat=now + timedelta(seconds=1)).count() == 50
    assert GPU.objects.filter(host__in=hosts, last_sample__utilization_pct=50.0).count() == 110
    rows = GpuMinuteSample.objects.filter(gpu__host__in=hosts, minute=now.replace(second=0))
    assert rows.count() == 110 and {r.samples for r in rows} == {1}

    # the next flush in the same minute accumulates into the same roll-up rows
    n_again, _ = _flush(many, now + timedelta(seconds=6))
    assert n_again <= MAX_FLUSH_QUERIES + 1  # SQLite: the roll-up's read-merge-write adds its UPDATE
    row = GpuMinuteSample.objects.get(gpu__host=many[0], gpu__index=0, minute=now.replace(second=0))
    assert (row.samples, row.utilization_sum, row.temperature_max_c) == (2, 100.0, 50.0)


@pytest.mark.django_db
def test_the_flush_locks_its_hosts_in_id_order_first():
    """docs/locking.md: hosts in id order before their GPUs (the UPDATE … FROM picks its own order)."""
    cluster = Cluster.objects.create(name="batch")
    hosts = [h for h, _ in _register(cluster, 3)]
    now = timezone.now()
    with CaptureQueriesContext(connection) as ctx:
        lifecycle.record_heartbeats([lifecycle.HeartbeatReport(h.pk, now, _samples()) for h in reversed(hosts)])
    sql = [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE", "BEGIN"))]
    first = sql[0]
    assert first.startswith(("SELECT", "WITH")) and f'FROM "{Host._meta.db_table}"' in first, sql[:2]
    # 1: the selected id; the raw statement on PostgreSQL (lifecycle._lock_hosts) says id
    assert re.search(rf'ORDER BY (1 ASC|"{Host._meta.db_table}"\."id" ASC|id FOR UPDATE)', first), first
    if connection.vendor == "postgresql":
        assert "FOR UPDATE" in first


@pytest.mark.django_db
def test_health_changes_xids_and_offline_hosts_take_the_per_host_path():
    cluster = Cluster.objects.create(name="batch")
    plain, sick, faulty, away = (h for h, _ in _register(cluster, 4))
    Host.objects.filter(pk=away.pk).update(state=Host.State.OFFLINE, state_before_offline=Host.State.CORDONED)
    now = timezone.now()
    lifecycle.record_heartbeats(
        [
            lifecycle.HeartbeatReport(plain.pk, now, _samples()),
            lifecycle.HeartbeatReport(sick.pk, now, _samples(health="unhealthy")),
            lifecycle.HeartbeatReport(faulty.pk, now, _samples(xids=(79,))),
            lifecycle.HeartbeatReport(away.pk, now, _samples()),
        ]
    )
    assert GPU.objects.get(host=sick, index=1).health == GPU.Health.UNHEALTHY
    assert HostEvent.objects.filter(host=sick, kind="gpu_health").exists()
    assert Host.objects.get(pk=faulty.pk).state == Host.State.DRAINING
    assert Host.objects.get(pk=away.pk).state == Host.State.CORDONED
    assert set(Host.objects.filter(last_heartbeat=now).values_list("name", flat=True)) == {
        plain.name,
        sick.name,
        faulty.name,
        away.name,
    }


# --- through the consumer ------------------------------------------------------------------------


def _communicator(token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])


def _hello(host: str) -> str:
    return json.dumps(
        {
            "v": 1,
            "type": "hello",
            "id": 1,
            "host": host,
            "agent_version": "test",
            "gpus": [
                {"index": g, "uuid": f"GPU-{host}-{g}", "model": "H100", "memory_mb": 80000, "health": "healthy"}
                for g in range(2)
            ],
            "attempts": [],
        }
    )


def _heartbeat(seq: int, running: list[int], util: float = 40.0) -> str:
    gpu = {
        "utilization_pct": util,
        "memory_used_mb": 100,
        "temperature_c": 40.0,
        "power_w": 100.0,
        "ecc_uncorrected": 0,
        "health": "healthy",
        "xids": [],
    }
    return json.dumps(
        {"v": 1, "type": "heartbeat", "id": seq, "gpus": [{"index": g, **gpu} for g in range(2)], "running": running}
    )


async def _receive(comm: WebsocketCommunicator, wait: float = 5) -> protocol.Message:
    return protocol.decode(await comm.receive_from(timeout=wait), allowed=protocol.SERVER_MESSAGE_TYPES)


async def _connect_all(registered: list[tuple[Host, str]]) -> list[WebsocketCommunicator]:
    """Connect an agent for each registered host and complete its hello (welcomed)."""
    comms = []
    for host, token in registered:
        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        comms.append(comm)
    return comms


def _run(coro: Any) -> None:
    """``asyncio.run`` that gives back the connection the async ORM calls borrowed (pool: to the pool)."""
    from channels.db import aclose_old_connections

    async def main() -> None:
        try:
            await coro
        finally:
            await aclose_old_connections()

    asyncio.run(main())


@pytest.fixture
def fast_flush(settings: Any) -> None:
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 0.05}


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_burst_of_50_heartbeats_is_written_by_a_bounded_number_of_queries(fast_flush, monkeypatch):
    cluster = Cluster.objects.create(name="burst")
    registered = _register(cluster, 50, prefix="w")
    flushes: list[tuple[int, int]] = []  # (hosts, queries)
    original = gateway.flush_heartbeats

    def counted(reports: Any, views: Any, *alive: Any) -> Any:
        with CaptureQueriesContext(connection) as ctx:
            out = original(reports, views, *alive)
        flushes.append((len(reports), len(ctx.captured_queries)))
        return out

    monkeypatch.setattr(gateway, "flush_heartbeats", counted)

    async def run() -> None:
        comms = await _connect_all(registered)
        await asyncio.gather(*(c.send_to(text_data=_heartbeat(2, [], util=77.0)) for c in comms))
        for _ in range(100):
            if sum(n for n, _q in flushes) >= 50:
                break
            await asyncio.sleep(0.05)
        for comm in comms:
            assert await comm.receive_nothing(0.01)
            await comm.disconnect()

    _run(run())
    assert sum(n for n, _q in flushes) == 50
    assert max(q for _n, q in flushes) <= MAX_FLUSH_QUERIES
    assert GPU.objects.filter(host__cluster=cluster, last_sample__utilization_pct=77.0).count() == 100
    assert GpuMinuteSample.objects.filter(gpu__host__cluster=cluster).count() == 100


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_start_not_reported_running_is_sent_again_on_the_next_flush(fast_flush):
    cluster = Cluster.objects.create(name="resend")
    [(host, token)] = _register(cluster, 1, prefix="r")
    attempt_id = _place(host, "resend")

    async def run() -> None:
        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        first = await _receive(comm)
        assert isinstance(first, protocol.Start) and first.attempt_id == attempt_id

        await comm.send_to(text_data=_heartbeat(2, []))  # the agent does not run it (yet)
        again = await _receive(comm)
        assert isinstance(again, protocol.Start) and again.attempt_id == attempt_id

        await comm.send_to(text_data=_heartbeat(3, [attempt_id]))  # now it does: nothing more
        assert await comm.receive_nothing(0.5)
        await comm.disconnect()

    _run(run())


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_push_is_delivered_without_waiting_for_a_flush(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_S": 60.0, "HEARTBEAT_FLUSH_S": 30.0}
    cluster = Cluster.objects.create(name="push")
    [(host, token)] = _register(cluster, 1, prefix="p")

    async def run() -> None:
        from asgiref.sync import sync_to_async

        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        attempt_id = await sync_to_async(_place)(host, "pushed")
        await get_channel_layer().group_send(gateway.host_group(host.pk), {"type": "desired.state"})
        start = await _receive(comm, wait=2)
        assert isinstance(start, protocol.Start) and start.attempt_id == attempt_id
        await comm.disconnect()

    _run(run())


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_push_of_many_hosts_is_one_channel_message_and_reaches_each_connection(settings, monkeypatch):
    """web29: ``push_desired_state`` sends one message to the hubs' group, not one per host; each
    connection still gets its start without a flush, also after the hub's delegate left."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_S": 60.0, "HEARTBEAT_FLUSH_S": 30.0}
    cluster = Cluster.objects.create(name="push")
    registered = _register(cluster, gateway.PUSH_PER_HOST_MAX + 1, prefix="m")
    # counted on the layer's class: on Redis a push from a thread is sent by the process's own
    # layer instance (gateway._log_tail_runner), not the consumers'
    layer_class = type(get_channel_layer())
    sent: list[str] = []
    group_send = layer_class.group_send

    async def counted_group_send(self: Any, group: str, message: dict[str, Any]) -> None:
        if message.get("type") == "desired.state":
            sent.append(group)
        await group_send(self, group, message)

    monkeypatch.setattr(layer_class, "group_send", counted_group_send)

    async def run() -> None:
        from asgiref.sync import sync_to_async

        comms = await _connect_all(registered)
        await asyncio.sleep(0.1)  # the delegate's group_add
        wires = [await sync_to_async(_place)(host, f"pushed-{i}") for i, (host, _) in enumerate(registered)]
        sent.clear()  # the hellos' own pushes
        await sync_to_async(gateway.push_desired_state)([h.pk for h, _ in registered])  # as the tick's commit
        for comm, wire in zip(comms, wires, strict=True):
            start = await _receive(comm, wait=2)
            assert isinstance(start, protocol.Start) and start.attempt_id == wire
        assert sent == [gateway.HUBS_GROUP]

        # the delegate (the first connection) leaves: another connection of the hub takes its place
        await comms[0].disconnect()
        await asyncio.sleep(0.1)
        more = [await sync_to_async(_place)(host, f"again-{i}", gpu=1) for i, (host, _) in enumerate(registered[1:])]
        await sync_to_async(gateway.push_desired_state)([h.pk for h, _ in registered])
        for comm, wire in zip(comms[1:], more, strict=True):
            start = await _receive(comm, wait=2)
            assert isinstance(start, protocol.Start) and start.attempt_id == wire
        # and a push of a host or few goes to each host's own group (one read, in its process only)
        # (its delivery: test_a_push_is_delivered_without_waiting_for_a_flush)
        sent.clear()
        await sync_to_async(gateway.push_desired_state)([registered[-1][0].pk])
        assert sent == [gateway.host_group(registered[-1][0].pk)]
        for comm in comms[1:]:
            await comm.disconnect()

    _run(run())


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_bad_heartbeat_gets_an_error_and_changes_nothing(fast_flush):
    cluster = Cluster.objects.create(name="bad")
    [(host, token)] = _register(cluster, 1, prefix="x")

    async def run() -> None:
        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        before = (await Host.objects.aget(pk=host.pk)).last_heartbeat
        await comm.send_to(text_data=_heartbeat(2, [], util=500.0))  # utilization out of range
        err = await _receive(comm)
        assert isinstance(err, protocol.Error) and err.ref == 2
        await asyncio.sleep(0.3)  # several flush intervals
        assert not gateway.hub().buffer
        assert (await Host.objects.aget(pk=host.pk)).last_heartbeat == before
        assert not await GpuMinuteSample.objects.filter(gpu__host_id=host.pk).aexists()
        assert [g.last_sample async for g in GPU.objects.filter(host_id=host.pk)] == [{}, {}]
        await comm.disconnect()

    _run(run())


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(40))
def test_the_narrow_desired_state_equals_the_plain_one_on_random_states(seed):
    """Oracle: ``desired_commands_many`` (one narrow query, then only the attempts to start read
    whole) gives every host the same messages as ``desired_commands_many_plain`` (every open
    attempt read whole), on random hosts, gangs, stops, ended attempts, closed GPU rows and views."""
    import random

    from accounts.models import User
    from budgets.models import Budget
    from scheduler.services import do_register_host

    rng = random.Random(seed)
    cluster = Cluster.objects.create(name=f"oracle{seed}", allow_root_workloads=rng.random() < 0.5)
    hosts = [
        do_register_host(
            cluster, f"o{seed}-{i}", [(g, f"GPU-o{seed}-{i}-{g}", "H100", 80000) for g in range(rng.randint(1, 4))]
        )[0]
        for i in range(rng.randint(1, 5))
    ]
    connected(*hosts)
    for h in hosts:
        if rng.random() < 0.5:
            Host.objects.filter(pk=h.pk).update(cpus=rng.choice([None, 64]), memory_bytes=rng.choice([None, 2**38]))
        if rng.random() < 0.5:
            Host.objects.filter(pk=h.pk).update(labels={"address": f"10.0.0.{h.pk % 250}"})
    user, _ = User.objects.get_or_create(username=f"oracle-user-{rng.randint(0, 2)}")
    if rng.random() < 0.5:
        User.objects.filter(pk=user.pk).update(posix_uid=1000 + seed, posix_gid=1000, posix_groups=[2000, 2001])
    budget, _ = Budget.objects.get_or_create(name="oracle-budget")
    free = [g for h in hosts for g in h.gpus.order_by("index")]
    rng.shuffle(free)
    wire_ids: list[int] = []
    for n in range(rng.randint(0, 8)):
        if not free:
            break
        taken = [free.pop() for _ in range(rng.randint(1, min(3, len(free))))]
        w = Workload.objects.create(
            name=f"o{n}",
            owner=user,
            budget=budget,
            cluster=cluster,
            gpu_model="H100",
            gpu_count=len(taken),
            command=rng.choice([["sleep", "1"], [], ["python", "-c", "print(1)"]]),
            env=rng.choice([{}, {"A": {"value": "1", "secret": False}}, {"B": "x", "C": None}]),
            mounts=rng.choice(
                [[], [{"name": "data", "host_path": "/d", "container_path": "/data", "read_only": True}]]
            ),
            cpus=rng.choice([None, 4]),
            memory_bytes=rng.choice([None, 2**30]),
            shared_memory_bytes=rng.choice([None, 2**28]),
            image=rng.choice(["", "img:1"]),
            min_runtime_s=60,
            submitted_at=timezone.now(),
            seq=Workload.objects.count() + 1,
            state=Workload.State.STARTING,
        )
        stopping = rng.random() < 0.3
        a = Attempt.objects.create(
            workload=w,
            number=1,
            host=taken[0].host,
            allocated=True,
            placed_at=timezone.now(),
            ended_at=timezone.now() if rng.random() < 0.15 else None,
            stop_requested_at=timezone.now() if stopping else None,
            stop_reason=rng.choice(["", "preempted"]) if stopping else "",
        )
        ranks = {hid: r for r, hid in enumerate(dict.fromkeys(g.host_id for g in taken))}
        AttemptGPU.objects.bulk_create(
            [AttemptGPU(attempt=a, gpu=g, rank=ranks[g.host_id], open=rng.random() < 0.9) for g in taken]
        )
        wire_ids.append(a.wire_id)
    for g in free:  # GPUs an approved inventory took out: not in their host's count (left37)
        if rng.random() < 0.3:
            GPU.objects.filter(pk=g.pk).update(removed_at=timezone.now())

    def some() -> set[int]:
        return {x for x in [*wire_ids, 999_999] if rng.random() < 0.4}

    views = [
        gateway.AgentView(h.pk, None if rng.random() < 0.2 else some(), some(), some())
        for h in rng.sample(hosts, rng.randint(1, len(hosts)))
    ]
    with CaptureQueriesContext(connection) as ctx:
        fast = gateway.desired_commands_many(views)
    assert fast == gateway.desired_commands_many_plain(views)
    # the attempts to start read whole with their gangs' layout in one query, the GPU counts of
    # their hosts in another (not a correlated count: lat32): three in all
    starts = any(isinstance(m, protocol.Start) for ms in fast.values() for m in ms or ())
    assert len(ctx.captured_queries) == (3 if starts else 1)
    # and nothing to start: one query (the heartbeat flush of busy hosts)
    quiet = [gateway.AgentView(v.host_id, set(wire_ids), set(wire_ids), set(wire_ids)) for v in views]
    with CaptureQueriesContext(connection) as ctx:
        narrow = gateway.desired_commands_many(quiet)
    assert len(ctx.captured_queries) == 1 and narrow == gateway.desired_commands_many_plain(quiet)


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_connection_older_than_the_group_expiry_still_hears_its_host_group(fast_flush, settings, monkeypatch):
    """channels-redis drops a group member after its ``group_expiry`` (a day) unless re-added: an
    agent connected for longer missed its host's pushes, the close of a revoked token and the notice
    of a newer connection. The hub renews every connection's membership with its push group's."""
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"group_expiry": 1}}
    }
    monkeypatch.setattr(gateway, "HUBS_REJOIN_S", 0.2)
    cluster = Cluster.objects.create(name="expiry")
    [(host, token)] = _register(cluster, 1, prefix="x")

    async def run() -> None:
        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=_hello(host.name))
        assert isinstance(await _receive(comm), protocol.Welcome)
        joined = time.time()  # after the connection joined its host's group
        await comm.send_to(text_data=_heartbeat(2, []))  # the hub's loop runs from the first heartbeat
        layer = get_channel_layer()
        # past the expiry, by the layer's own rule (whole seconds: a member joined at t is dropped
        # once int(now) - group_expiry > t, from int(t) + group_expiry + 1 on), not a fixed 3 s
        await asyncio.sleep(int(joined) + layer.group_expiry + 1 - time.time())
        await layer.group_send(gateway.host_group(host.pk), {"type": "agent.superseded", "generation": 10**6})
        closed = await comm.receive_output(timeout=5)
        assert closed["type"] == "websocket.close"

    _run(run())


@pytest.mark.django_db(transaction=True)
def test_the_flushs_raw_host_lock_locks_and_returns_what_the_orm_query_does() -> None:
    """web30: the heartbeat flush locks its hosts with one raw statement on PostgreSQL
    (``lifecycle._lock_hosts``); the ORM query it replaced is its oracle: the same ids, in id order,
    for random sets of hosts (some removed, some unknown), and the rows are locked."""
    import random

    import psycopg
    from django.db import transaction

    if connection.vendor != "postgresql":
        pytest.skip("the raw lock is PostgreSQL's; other engines use the ORM query itself")
    cluster = Cluster.objects.create(name="lock-oracle")
    ids = [h.pk for h, _ in _register(cluster, 12, prefix="k")]
    Host.objects.filter(pk__in=ids[:2]).update(removed_at=timezone.now())  # still rows: locked too
    rng = random.Random(30)
    for _ in range(40):
        chosen = sorted(rng.sample([*ids, max(ids) + 1, max(ids) + 7], rng.randint(1, 14)))
        with transaction.atomic():
            fast = lifecycle._lock_hosts(chosen)
        with transaction.atomic():
            plain = lifecycle._lock_hosts_plain(chosen)
        assert fast == plain == [i for i in chosen if i in ids]
    settings = connection.settings_dict
    dsn = f"dbname={settings['NAME']} user={settings['USER']} host={settings['HOST']} port={settings['PORT']}"
    with transaction.atomic():
        lifecycle._lock_hosts([ids[3], ids[5]])
        with psycopg.connect(dsn, password=settings["PASSWORD"] or None, autocommit=True) as other:
            for hid, locked in ((ids[3], True), (ids[4], False), (ids[5], True)):
                try:
                    other.execute("select id from scheduler_host where id = %s for update nowait", (hid,))
                    assert not locked, hid
                except psycopg.errors.LockNotAvailable:
                    assert locked, hid


@pytest.mark.django_db(transaction=True)
def test_the_flushs_one_statement_lock_and_gpu_read_is_the_lock_then_the_read() -> None:
    """req30: on PostgreSQL the flush locks its hosts and reads their GPUs in one statement
    (``lifecycle._lock_hosts_and_read_gpus``); its oracle is the two it replaced (``_lock_hosts_plain``
    then ``_gpus_of``): the same GPU rows for random sets of hosts (some removed, some unknown, some
    without GPUs), and every host found is locked, one without GPUs included."""
    import random

    import psycopg
    from django.db import transaction

    if connection.vendor != "postgresql":
        pytest.skip("one statement on PostgreSQL; other engines run the oracle itself")
    cluster = Cluster.objects.create(name="lock-read-oracle")
    ids = [h.pk for h, _ in _register(cluster, 10, prefix="r")]
    Host.objects.filter(pk__in=ids[:2]).update(removed_at=timezone.now())
    GPU.objects.filter(host_id__in=ids[2:4]).delete()  # hosts without GPUs
    rng = random.Random(30)
    for _ in range(40):
        chosen = sorted(rng.sample([*ids, max(ids) + 1, max(ids) + 7], rng.randint(1, 12)))
        with transaction.atomic():
            fast = lifecycle._lock_hosts_and_read_gpus(chosen)
        with transaction.atomic():
            lifecycle._lock_hosts_plain(chosen)
            plain = list(lifecycle._gpus_of(chosen))
        assert sorted(fast) == sorted(plain)
    settings = connection.settings_dict
    dsn = f"dbname={settings['NAME']} user={settings['USER']} host={settings['HOST']} port={settings['PORT']}"
    with transaction.atomic():
        lifecycle._lock_hosts_and_read_gpus([ids[2], ids[5]])  # ids[2]: no GPUs
        with psycopg.connect(dsn, password=settings["PASSWORD"] or None, autocommit=True) as other:
            for hid, locked in ((ids[2], True), (ids[4], False), (ids[5], True)):
                try:
                    other.execute("select id from scheduler_host where id = %s for update nowait", (hid,))
                    assert not locked, hid
                except psycopg.errors.LockNotAvailable:
                    assert locked, hid


@pytest.mark.django_db
def test_the_flushs_one_statement_touch_and_sample_writes_equal_the_two_steps() -> None:
    """req30: on PostgreSQL the flush's ``last_heartbeat`` update and its samples' writes are one
    statement (``lifecycle._touch_hosts_and_store_samples``); the two steps it replaced
    (``_touch_and_store_plain``) are its oracle: on random flushes (offline hosts, empty and missing
    samples, samples of hosts not flushed, two minutes, roll-ups already there) the same touched
    hosts and the same hosts, GPUs and roll-up rows afterwards."""
    import random

    from django.db import transaction

    if connection.vendor != "postgresql":
        pytest.skip("one statement on PostgreSQL; other engines run the oracle itself")
    cluster = Cluster.objects.create(name="touch-oracle")
    hosts = [h for h, _ in _register(cluster, 8, prefix="t")]
    gpus = {h.pk: list(GPU.objects.filter(host=h).values_list("pk", flat=True)) for h in hosts}
    base = timezone.now().replace(second=30, microsecond=0)

    def state() -> Any:
        return (
            sorted(Host.objects.filter(cluster=cluster).values_list("pk", "last_heartbeat", "state")),
            sorted(GPU.objects.filter(host__cluster=cluster).values_list("pk", "last_sample")),
            sorted(
                GpuMinuteSample.objects.filter(gpu__host__cluster=cluster).values_list(
                    "gpu_id",
                    "minute",
                    "samples",
                    "utilization_sum",
                    "memory_used_max_mb",
                    "temperature_max_c",
                    "power_sum_w",
                    "health_worst",
                )
            ),
        )

    rng = random.Random(30)
    for _ in range(30):
        Host.objects.filter(cluster=cluster).update(state=Host.State.ACTIVE)
        Host.objects.filter(pk__in=[h.pk for h in rng.sample(hosts, rng.randint(0, 3))]).update(
            state=Host.State.OFFLINE
        )
        flushed = rng.sample(hosts, rng.randint(1, 8))
        times = {h.pk: base + timedelta(seconds=rng.choice([0, 20, 45])) for h in flushed}
        rows = {}
        for h in rng.sample(hosts, rng.randint(0, 8)):
            for gid in gpus[h.pk]:
                if rng.random() < 0.8:
                    sample = rng.choice(
                        [
                            {},
                            {
                                "utilization_pct": rng.uniform(0, 100),
                                "memory_used_mb": rng.randint(0, 9),
                                "power_w": 5.0,
                            },
                            {"utilization_pct": 1.0, "temperature_c": rng.uniform(20, 90), "power_w": None},
                        ]
                    )
                    health = rng.choice(["healthy", "degraded", "unhealthy"])
                    rows[gid] = (h.pk, health, sample, times.get(h.pk, base))
        outcomes = []
        for write in (lifecycle._touch_hosts_and_store_samples, lifecycle._touch_and_store_plain):
            try:
                with transaction.atomic():
                    outcomes.append((write(times, rows), state()))
                    raise _Undo
            except _Undo:
                pass
        assert outcomes[0] == outcomes[1]
        lifecycle._touch_and_store_plain(times, rows)  # roll-ups already there for the next draws


class _Undo(Exception):
    pass


@pytest.mark.django_db
@pytest.mark.parametrize("gpus", [1, 8])
def test_a_start_decodes_its_workloads_json_once_whatever_its_gpus(gpus, monkeypatch):
    """push36: the attempts to start are read once each with their workload's command, environment
    and mounts (and their owner's groups), their GPU rows apart without JSON: read with every GPU row,
    a push of ~70 hosts decoded ~1,300 JSON values for ~75 starts (⅖ of its CPU). The old read
    decoded 5 values per GPU row (40 for an 8-GPU start)."""
    import json as json_module

    from accounts.models import User
    from budgets.models import Budget
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="json-once")
    host, _token = do_register_host(cluster, "j0", [(g, f"GPU-j0-{g}", "H100", 80000) for g in range(8)])
    Host.objects.filter(pk=host.pk).update(labels={"address": "10.0.0.9", "rack": "r1"})
    connected(host)
    user = User.objects.create(username="json-user", posix_uid=1001, posix_gid=1001, posix_groups=[5])
    budget = Budget.objects.create(name="json-budget")
    w = Workload.objects.create(
        name="j",
        owner=user,
        budget=budget,
        cluster=cluster,
        gpu_model="H100",
        gpu_count=gpus,
        command=["python", "-c", "print(1)"],
        env={"A": {"value": "1", "secret": False}},
        mounts=[{"name": "data", "host_path": "/d", "container_path": "/data", "read_only": True}],
        min_runtime_s=60,
        submitted_at=timezone.now(),
        seq=1,
        state=Workload.State.STARTING,
    )
    a = Attempt.objects.create(workload=w, number=1, host=host, allocated=True, placed_at=timezone.now())
    AttemptGPU.objects.bulk_create([AttemptGPU(attempt=a, gpu=g) for g in host.gpus.order_by("index")[:gpus]])
    decoded = []
    decode = json_module.JSONDecoder.decode
    monkeypatch.setattr(json_module.JSONDecoder, "decode", lambda self, s, *a: decoded.append(s) or decode(self, s, *a))
    views = [gateway.AgentView(host.pk, set())]
    fast = gateway.desired_commands_many(views)
    n = len(decoded)
    monkeypatch.undo()
    assert fast == gateway.desired_commands_many_plain(views)
    [start] = fast[host.pk]
    assert isinstance(start, protocol.Start) and start.env["MASTER_ADDR"] == "10.0.0.9" and len(start.gpu_uuids) == gpus
    # command, env, mounts, the owner's groups: once each; the host's address label: per GPU row at most
    assert n <= 4 + gpus
