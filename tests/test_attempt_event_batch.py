"""Attempt events written in batches (issue 15, point 5): a tick's burst of ``started`` events queued
one transaction each on the agent-database threads, and every heartbeat of those connections waited
behind its own event (docs/benchmarks/api_load.md, "Attempt events in batches").

``consumers.record_attempt_events`` (the batch) against ``consumers._attempt_event_plain`` (one event
at a time, in order: the readable path) on random mixes of events, from the same database state;
its statements counted; and the consumer's burst written by one batch, each event acknowledged
once written."""

from __future__ import annotations

import asyncio
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent import protocol
from scheduler import consumers, gateway, lifecycle
from scheduler.models import (
    GPU,
    Attempt,
    AttemptGPU,
    Cluster,
    Host,
    HostEvent,
    Notification,
    NotificationSettings,
    Workload,
    WorkloadEvent,
)
from tests.test_attempt_event_queries import _statements
from tests.test_gateway_batch import _communicator, _hello, _place, _receive, _register, _run

STATES = ("started", "started", "started", "running", "exited", "failed_to_start", "stopped")


def _world(rng: random.Random, hosts: list[Host]) -> dict[int, list[Host]]:
    """Attempts of every kind on ``hosts`` (two GPUs each): placed, started, ended, stopping,
    unallocated, requeued (a second attempt), a gang over two hosts. Wire id → its hosts."""
    from accounts.models import User
    from budgets.models import Budget

    owner, _ = User.objects.get_or_create(username="mix-user")
    NotificationSettings.objects.get_or_create(user=owner, defaults={"email_kinds": ["started", "failed"]})
    budget, _ = Budget.objects.get_or_create(name="mix-budget")
    now = timezone.now()
    wires: dict[int, list[Host]] = {}
    by_pk = {h.pk: h for h in hosts}
    gpus = [g for h in hosts for g in h.gpus.order_by("index")]
    rng.shuffle(gpus)
    while gpus:
        kind = rng.choice(["placed", "placed", "started", "ended", "stopping", "requeued", "gang"])
        take = 2 if kind == "gang" and len(gpus) >= 2 and gpus[0].host_id != gpus[1].host_id else 1
        mine, gpus = gpus[:take], gpus[take:]
        w = Workload.objects.create(
            name=f"mix-{len(wires)}",
            owner=owner,
            budget=budget,
            cluster=hosts[0].cluster,
            gpu_model="H100",
            gpu_count=take,
            command=["true"],
            min_runtime_s=rng.choice([0, 60, 600]),
            retries=rng.choice([0, 1]),
            submitted_at=now - timedelta(seconds=rng.randint(10, 500)),
            seq=Workload.objects.count() + 1,
            state=Workload.State.RUNNING if kind == "started" else Workload.State.STARTING,
        )
        number = 1
        if kind == "requeued":
            Attempt.objects.create(
                workload=w,
                number=1,
                host=mine[0].host,
                allocated=True,
                placed_at=now - timedelta(seconds=9),
                ended_at=now - timedelta(seconds=5),
                end_reason=Attempt.EndReason.PREEMPTED,
            )
            number = 2
        a = Attempt.objects.create(
            workload=w,
            number=number,
            host=mine[0].host,
            allocated=rng.random() < 0.8,
            placed_at=now - timedelta(seconds=rng.randint(1, 5)),
            started_at=now - timedelta(seconds=1) if kind == "started" else None,
            stop_requested_at=now - timedelta(seconds=2) if kind == "stopping" else None,
            stop_reason=Attempt.EndReason.PREEMPTED if kind == "stopping" else "",
            ended_at=now - timedelta(seconds=1) if kind == "ended" else None,
            end_reason=Attempt.EndReason.SUCCEEDED if kind == "ended" else "",
        )
        for g in mine:
            AttemptGPU.objects.create(attempt=a, gpu=g, open=kind != "ended")
        wires[a.wire_id] = [by_pk[g.host_id] for g in mine]
    return wires


def _events(rng: random.Random, hosts: list[Host], wires: dict[int, list[Host]]) -> list[consumers.EventItem]:
    """Events of most attempts of ``wires`` once (a burst), some twice or more, some of unknown
    attempts, some from a host that does not hold the attempt, some on a stale link."""
    base = timezone.now()
    named = rng.sample(list(wires), k=rng.randint(1, len(wires)))
    named += rng.choices(list(wires), k=rng.randint(0, 4)) + [rng.randint(1, 2**40) for _ in range(rng.randint(0, 2))]
    rng.shuffle(named)
    items = []
    for i, wire in enumerate(named):
        host = rng.choice(wires[wire]) if wire in wires and rng.random() < 0.85 else rng.choice(hosts)
        state = rng.choice([rng.choice(STATES), "started", "exited"])
        msg = protocol.AttemptEvent(
            id=i + 2,
            attempt_id=wire,
            state=state,
            exit_code=rng.choice([0, 1, None]) if state == "exited" else None,
            age_s=rng.choice([None, 0.0, 0.5, 3.0, 50.0]),
            message=rng.choice(["", "boom"]),
        )
        generation = host.link_generation + (1 if rng.random() < 0.08 else 0)  # a stale link now and then
        received = base + timedelta(milliseconds=10 * i)
        alive_at = rng.choice([None, received - timedelta(seconds=1)])
        items.append(consumers.EventItem(host, generation, msg, received, alive_at))
    return items


def _state() -> dict[str, Any]:
    """What the events write (no ids: the two runs number their rows apart; no ``now`` stamps)."""
    return {
        "attempts": sorted(
            Attempt.objects.values_list(
                "wire_id", "started_at", "protected_until", "ended_at", "end_reason", "exit_code", "charged_gpu_seconds"
            )
        ),
        "workloads": sorted(
            Workload.objects.values_list("name", "state", "finished_at", "start_failures", "retries_used")
        ),
        "started_updated": sorted(Workload.objects.filter(state="running").values_list("name", "updated_at")),
        "events": sorted(
            (w, kind, message, str(sorted(data.items())), at if kind == "started" else None)
            for w, kind, message, data, at in WorkloadEvent.objects.values_list(
                "workload__name", "kind", "message", "data", "at"
            )
        ),
        "links": sorted(AttemptGPU.objects.values_list("attempt__wire_id", "gpu_id", "open")),
        "hosts": sorted(Host.objects.values_list("name", "state")),
        "host_events": sorted(HostEvent.objects.values_list("host__name", "kind")),
        "nominated": sorted(GPU.objects.values_list("pk", "nominated_for__name")),
        "notifications": sorted(
            Notification.objects.values_list("event__workload__name", "event__kind", "user_id", "channel")
        ),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(16))
def test_the_batch_writes_what_the_events_one_by_one_write_on_random_mixes(seed: int, monkeypatch: Any) -> None:
    rng = random.Random(seed)
    batches: list[tuple[str, list[bool]]] = []
    for name in ("attempts_started", "attempts_exited"):
        many = getattr(lifecycle, name)
        monkeypatch.setattr(
            lifecycle,
            name,
            lambda reports, many=many, name=name: batches.append((name, many(reports))) or batches[-1][1],
        )
    cluster = Cluster.objects.create(name=f"mix{seed}")
    hosts = [h for h, _t in _register(cluster, 8, prefix=f"m{seed}-")]
    for h in hosts:
        h.refresh_from_db()
    wires = _world(rng, hosts)
    items = _events(rng, hosts, wires)
    start = _state()
    with transaction.atomic():
        before = transaction.savepoint()
        plain = [
            consumers._attempt_event_plain(it.host, it.generation, it.msg, it.received, it.alive_at) for it in items
        ]
        one_by_one = _state()
        transaction.savepoint_rollback(before)
        assert _state() == start  # rolled back: the batch starts where they did
        batched = consumers.record_attempt_events(items)
        together = _state()
    assert batched == plain
    assert together == one_by_one
    # the mix went through a batched path wherever it held two reports of one kind, of distinct attempts
    pks = [
        pk
        for _live, pk in consumers.live_links_and_attempts([(i.host.pk, i.generation, i.msg.attempt_id) for i in items])
    ]
    kinds = [
        ("exited" if i.msg.state == "exited" else "start" if i.msg.state in ("started", "running") else None)
        for i in items
    ]
    once = [(k, pk) for k, pk in zip(kinds, pks, strict=True) if k and pk and pks.count(pk) == 1]
    assert bool(batches) == any([k for k, _pk in once].count(k) >= 2 for k in ("exited", "start"))


@pytest.mark.django_db
def test_a_burst_of_started_events_is_a_fixed_number_of_statements_whatever_its_size(
    django_capture_on_commit_callbacks: Any,
) -> None:
    from scheduler import histograms

    cluster = Cluster.objects.create(name="burst")
    registered = _register(cluster, 61, prefix="bu")
    counts = []
    for hosts in ([h for h, _t in registered[:3]], [h for h, _t in registered[3:61]]):
        items = []
        for h in hosts:
            h.refresh_from_db()
            wire = _place(h, f"burst-{h.name}")
            msg = protocol.AttemptEvent(id=2, attempt_id=wire, state="started")
            items.append(consumers.EventItem(h, h.link_generation, msg, timezone.now()))
        owner = Attempt.objects.get(wire_id=items[0].msg.attempt_id).workload.owner
        NotificationSettings.objects.get_or_create(user=owner, defaults={"email_kinds": ["started"]})
        histograms.reset()
        with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as ctx:
            assert consumers.record_attempt_events(items) == [True] * len(items)
        counts.append(len(_statements(ctx)))
        assert histograms._raw(histograms.START_LATENCY)[f"{cluster.pk}{histograms.SEP}count"] == len(items)
        wl = Workload.objects.filter(attempts__wire_id__in=[it.msg.attempt_id for it in items])
        assert set(wl.values_list("state", flat=True)) == {Workload.State.RUNNING}
        assert Notification.objects.filter(event__workload__in=wl, channel="email").count() == len(items)
    # the links and wire ids; the workloads' lock; the attempts' lock; their hosts' GPU rows; the
    # attempts' update; the workloads' update; the events; the owners' settings; the notifications
    assert counts == [9, 9], counts


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_burst_of_started_events_from_many_connections_is_written_by_one_batch_and_acked_after(
    monkeypatch: Any,
) -> None:
    """Failed before (each connection's event was its own transaction: 12 calls of the one-event
    service). The first event holds the one agent-database thread; the eleven sent meanwhile are
    written together once it is done, and each connection's ack comes after its write committed."""
    monkeypatch.setattr(gateway, "agent_db_threads", lambda: 1)
    cluster = Cluster.objects.create(name="burst-link")
    registered = _register(cluster, 12, prefix="bl")
    wires = [_place(h, f"bl-{h.name}") for h, _t in registered]
    entered, release = threading.Event(), threading.Event()
    one, many = lifecycle.attempt_started, lifecycle.attempts_started
    calls: list[int] = []

    def slow_one(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        entered.set()
        release.wait(30)
        return one(*args, **kwargs)

    def counted_many(reports: Any) -> Any:
        calls.append(len(reports))
        return many(reports)

    monkeypatch.setattr(lifecycle, "attempt_started", slow_one)
    monkeypatch.setattr(lifecycle, "attempts_started", counted_many)
    started_at = database_sync_to_async(
        lambda wire: Attempt.objects.get(wire_id=wire).started_at, thread_sensitive=False
    )

    async def run() -> None:
        comms = []
        for (host, token), _wire in zip(registered, wires, strict=True):
            comm = _communicator(token)
            assert (await comm.connect(timeout=5))[0]
            await comm.send_to(text_data=_hello(host.name))
            assert isinstance(await _receive(comm), protocol.Welcome)
            assert isinstance(await _receive(comm), protocol.Start)
            comms.append(comm)
        event = protocol.AttemptEvent(id=2, attempt_id=wires[0], state="started")
        await comms[0].send_to(text_data=protocol.encode(event))
        for _ in range(100):
            if entered.is_set():
                break
            await asyncio.sleep(0.02)
        assert entered.is_set()
        for comm, wire in zip(comms[1:], wires[1:], strict=True):
            await comm.send_to(text_data=protocol.encode(protocol.AttemptEvent(id=2, attempt_id=wire, state="started")))
        await asyncio.sleep(0.3)
        assert all(comm.output_queue.empty() for comm in comms)  # nothing acked before its write
        release.set()
        for comm, wire in zip(comms, wires, strict=True):
            ack = await _receive(comm, wait=10)
            assert isinstance(ack, protocol.Ack) and ack.ack == 2
            assert await started_at(wire) is not None  # written before its ack
        for comm in comms:
            await comm.disconnect()

    try:
        _run(run())
    finally:
        release.set()
    assert calls == [1, 11]


@pytest.mark.django_db
def test_the_links_one_statement_for_many_equals_the_one_statement_for_each() -> None:
    rng = random.Random(7)
    cluster = Cluster.objects.create(name="links-many")
    hosts = [h for h, _ in _register(cluster, 4, prefix="lm")]
    wires = [_place(h, f"lm-{h.name}") for h in hosts]
    Host.objects.filter(pk=hosts[3].pk).update(removed_at=timezone.now())
    for h in hosts:
        h.refresh_from_db()
    triples = [
        (rng.choice(hosts).pk, rng.choice(hosts).link_generation + rng.choice([0, 0, 1]), rng.choice([*wires, 99]))
        for _ in range(80)
    ]
    assert consumers.live_links_and_attempts(triples) == [consumers.live_link_and_attempt(*t) for t in triples]


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["exited", "failed_to_start", "stopped"])
def test_an_exit_reads_its_workload_once(state: str) -> None:
    """The exit paths locked and read the workload a second time (``_end_attempt``'s
    ``select_for_update().get()``, the whole row) after the attempt's lock had read its fields."""
    cluster = Cluster.objects.create(name=f"exit-{state}")
    [(host, _token)] = _register(cluster, 1, prefix=f"x{state[:2]}")
    wire = _place(host, f"exit-{state}")
    attempt = Attempt.objects.get(wire_id=wire)
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=timezone.now(), stop_requested_at=timezone.now(), stop_reason=Attempt.EndReason.CANCELED
    )
    host.refresh_from_db()
    msg = protocol.AttemptEvent(id=2, attempt_id=wire, state=state, exit_code=0)
    with CaptureQueriesContext(connection) as ctx:
        assert consumers._attempt_event_plain(host, host.link_generation, msg, timezone.now()) is True
    workload_reads = [q for q in _statements(ctx) if q.startswith("SELECT") and 'FROM "scheduler_workload"' in q]
    assert len(workload_reads) == 1, workload_reads
    attempt.refresh_from_db()
    assert attempt.end_reason == Attempt.EndReason.CANCELED and attempt.ended_at is not None
    w = Workload.objects.get(pk=attempt.workload_id)
    assert w.state == Workload.State.CANCELED and w.finished_at == attempt.ended_at
    assert w.events.filter(kind="canceled").count() == 1


@pytest.mark.django_db
def test_a_burst_of_exits_is_a_fixed_number_of_statements_whatever_its_size(
    django_capture_on_commit_callbacks: Any,
) -> None:
    cluster = Cluster.objects.create(name="exits")
    registered = _register(cluster, 43, prefix="ex")
    counts = []
    for hosts in ([h for h, _t in registered[:3]], [h for h, _t in registered[3:43]]):
        items = []
        for h in hosts:
            h.refresh_from_db()
            wire = _place(h, f"exit-{h.name}")
            now = timezone.now()
            Attempt.objects.filter(wire_id=wire).update(started_at=now - timedelta(seconds=30))
            msg = protocol.AttemptEvent(id=2, attempt_id=wire, state="exited", exit_code=0)
            items.append(consumers.EventItem(h, h.link_generation, msg, now))
        owner = Attempt.objects.get(wire_id=items[0].msg.attempt_id).workload.owner
        NotificationSettings.objects.get_or_create(user=owner, defaults={"email_kinds": ["succeeded"]})
        with django_capture_on_commit_callbacks(execute=False), CaptureQueriesContext(connection) as ctx:
            assert consumers.record_attempt_events(items) == [True] * len(items)
        counts.append(len(_statements(ctx)))
        wl = Workload.objects.filter(attempts__wire_id__in=[it.msg.attempt_id for it in items])
        assert set(wl.values_list("state", flat=True)) == {Workload.State.SUCCEEDED}
        assert not AttemptGPU.objects.filter(attempt__workload__in=wl, open=True).exists()
        assert set(Attempt.objects.filter(workload__in=wl).values_list("charged_gpu_seconds", flat=True)) == {30}
    # the links and wire ids; the workloads' lock; the attempts' lock; their GPU rows; the attempts',
    # the GPU rows', the workloads' and the nominations' updates; the events; the owners' settings;
    # the notifications
    assert counts == [11, 11], counts
