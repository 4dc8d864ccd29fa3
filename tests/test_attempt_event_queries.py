"""An agent's attempt event (``started``) on the agent-database threads: its queries counted, and the
statements that merged reads compared with the reads they replaced (hb34).

A ``started`` event read the attempt's workload five times (its id, its lock, ``min_runtime_s``, the
histogram's fields, the notification's owner) and checked the link and the attempt's wire id in two
queries, the attempt's host in a third: 12 statements besides the transaction's. It now reads the
workload's fields with its lock (``lifecycle.LockedWorkload``), the attempt's host with the
attempt's lock, and the link and the wire id in one statement."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent import protocol
from scheduler import consumers, histograms, lifecycle
from scheduler.models import Attempt, AttemptGPU, Cluster, Host, Notification, NotificationSettings, Workload
from tests.test_gateway_batch import _place, _register

TRANSACTION = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT", "BEGIN", "COMMIT")


def _statements(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith(TRANSACTION)]


@pytest.mark.django_db
def test_a_started_event_costs_seven_statements_and_records_what_it_did(django_capture_on_commit_callbacks):
    cluster = Cluster.objects.create(name="events")
    (host, _token), (other, _t) = _register(cluster, 2, prefix="ev")
    wire = _place(host, "ev-w")
    attempt = Attempt.objects.get(wire_id=wire)
    owner = attempt.workload.owner
    NotificationSettings.objects.create(user=owner, email_kinds=["started"])
    histograms.reset()
    host.refresh_from_db()
    msg = protocol.AttemptEvent(attempt_id=wire, state="started", id=1)
    received = timezone.now()

    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as ctx:
        assert consumers._attempt_event.func(host, host.link_generation, msg, received) is True

    # the link and the wire id; the workload's lock with its fields; the attempt's lock with its host
    # check; the attempt's and the workload's updates; the event; the owner's settings; the notification
    assert len(_statements(ctx)) == 8, _statements(ctx)
    attempt.refresh_from_db()
    assert attempt.started_at == received
    assert attempt.protected_until == received + timedelta(seconds=60)
    assert Workload.objects.get(pk=attempt.workload_id).state == Workload.State.RUNNING
    assert attempt.workload.events.filter(kind="started").count() == 1
    assert Notification.objects.filter(event__workload=attempt.workload_id, user=owner, channel="email").count() == 1
    assert histograms._raw(histograms.START_LATENCY)[f"{cluster.pk}{histograms.SEP}count"] == 1
    assert (
        histograms._raw(histograms.WAIT_TIME)[
            f"{cluster.pk}{histograms.SEP}{attempt.workload.budget_id}{histograms.SEP}count"
        ]
        == 1
    )

    # a repeated report changes nothing: the link, the two locks
    with CaptureQueriesContext(connection) as ctx:
        assert consumers._attempt_event.func(host, host.link_generation, msg, timezone.now()) is True
    assert len(_statements(ctx)) == 3, _statements(ctx)
    # another host's report of it, and a stale link's, are ignored
    other.refresh_from_db()
    stranger = protocol.AttemptEvent(attempt_id=_place(host, "ev-w2", gpu=1), state="started", id=2)
    assert consumers._attempt_event.func(other, other.link_generation, stranger, timezone.now()) is True
    assert consumers._attempt_event.func(host, host.link_generation + 1, stranger, timezone.now()) is False
    assert Attempt.objects.get(wire_id=stranger.attempt_id).started_at is None


@pytest.mark.django_db
def test_the_links_one_statement_equals_its_two_queries_on_random_reports():
    cluster = Cluster.objects.create(name="links")
    hosts = [h for h, _ in _register(cluster, 4, prefix="lk")]
    wires = [_place(h, f"lk-{i}") for i, h in enumerate(hosts)]
    Host.objects.filter(pk=hosts[1].pk).update(link_generation=7)
    Host.objects.filter(pk=hosts[2].pk).update(removed_at=timezone.now())
    rng = random.Random(34)
    seen = set()
    for _ in range(80):
        host_id = rng.choice([*(h.pk for h in hosts), max(h.pk for h in hosts) + 5])
        generation = rng.choice([0, 1, 7, 8])
        wire = rng.choice([*wires, 12345, 2**63 - 1])
        fast = consumers.live_link_and_attempt(host_id, generation, wire)
        assert fast == consumers.live_link_and_attempt_plain(host_id, generation, wire)
        seen.add((fast[0], fast[1] is not None))
    assert seen == {(False, False), (True, False), (True, True)}


@pytest.mark.django_db(transaction=True)
def test_the_attempts_locking_reads_equal_the_reads_they_replaced_and_lock_both_rows():
    """``_lock_open_attempt_and_workload`` against the plain rule (``_attempts_on_host`` and a fresh
    read of the workload) for random hosts and attempts (open, ended, links closed, on another host);
    on PostgreSQL the workload's and the attempt's rows are locked, and nothing else."""
    cluster = Cluster.objects.create(name="locks")
    hosts = [h for h, _ in _register(cluster, 3, prefix="lo")]
    attempts = [Attempt.objects.get(wire_id=_place(h, f"lo-{i}", gpu=i % 2)).pk for i, h in enumerate(hosts * 2)]
    Attempt.objects.filter(pk=attempts[1]).update(ended_at=timezone.now())
    AttemptGPU.objects.filter(attempt_id=attempts[2]).update(open=False)
    Workload.objects.filter(attempts__pk=attempts[3]).update(state=Workload.State.RUNNING, min_runtime_s=5)
    rng = random.Random(34)
    outcomes = set()
    for _ in range(60):
        host = rng.choice([*hosts, None])
        attempt_id = rng.choice([*attempts, max(attempts) + 3])
        with transaction.atomic():
            found = lifecycle._lock_open_attempt_and_workload(host, attempt_id)
        row = Attempt.objects.filter(pk=attempt_id, ended_at__isnull=True).first()
        expected = row is not None and (
            host is None or attempt_id in lifecycle._attempts_on_host(host.pk, [attempt_id])
        )
        assert (found is not None) == expected, (host, attempt_id)
        outcomes.add(expected)
        if found is not None:
            attempt, workload = found
            assert attempt.pk == attempt_id
            fresh = Workload.objects.values_list(*lifecycle._LOCKED_WORKLOAD_FIELDS).get(pk=attempt.workload_id)
            assert workload == lifecycle.LockedWorkload(*fresh)
    assert outcomes == {True, False}

    if connection.vendor != "postgresql":
        return
    import psycopg

    target = Attempt.objects.get(pk=attempts[0])
    bystander = Attempt.objects.get(pk=attempts[3])
    s = connection.settings_dict
    dsn = f"dbname={s['NAME']} user={s['USER']} host={s['HOST']} port={s['PORT']}"
    with transaction.atomic():
        assert lifecycle._lock_open_attempt_and_workload(hosts[0], target.pk) is not None
        with psycopg.connect(dsn, password=s["PASSWORD"] or None, autocommit=True) as other:
            for table, pk, locked in (
                ("scheduler_workload", target.workload_id, True),
                ("scheduler_attempt", target.pk, True),
                ("scheduler_workload", bystander.workload_id, False),
                ("scheduler_attempt", bystander.pk, False),
                ("scheduler_host", hosts[0].pk, False),
            ):
                try:
                    other.execute(f"select id from {table} where id = %s for update nowait", (pk,))  # noqa: S608
                    assert not locked, (table, pk)
                except psycopg.errors.LockNotAvailable:
                    assert locked, (table, pk)
