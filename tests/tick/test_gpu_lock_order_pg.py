"""gpu53: GPU rows are the last level of the lock order (docs/locking.md), and a transaction that
writes several takes them in id order, in one statement, before it writes them.

Before, the tick wrote its nominations in two UPDATEs (the GPUs it clears, then those it sets) and
the heartbeat flush wrote ``last_sample`` with one ``UPDATE … FROM`` whose row order PostgreSQL
picks (the heap's, the JSON's): each took GPU rows out of id order, and deadlocked with a
transaction that took the same two rows in id order, or with each other (the tick cleared the
higher id, the flush updated the lower and waited for the higher, the tick then set the lower).
A per-host heartbeat's ``bulk_update`` and a cancel's clearing of nominations did the same. Each of
the five tests below deadlocked before the change (``deadlock detected``); the last one is the
breaker's case itself, the tick against the flush.
Each test makes the interleaving happen for sure, as test_workload_lock_order_pg.py does: the
ordered locker holds the lower id and waits until the writer is blocked, then asks for the higher.
Skipped on SQLite (one writer, no row locks).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduler import lifecycle, tick
from scheduler.models import GPU, Host
from scheduler.services import do_cancel_workload, do_submit_workload
from tests.pg_locks import in_thread, wait_until_blocked

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def _two_gpus_heap_reversed(host: Host) -> tuple[GPU, GPU]:
    """The host's GPUs 0 and 1, the lower id's row version moved after the higher's in the heap."""
    lo, hi = GPU.objects.filter(host=host, index__in=[0, 1]).order_by("pk")
    GPU.objects.filter(pk=lo.pk).update(memory_mb=F("memory_mb"))  # a new version, at the heap's end
    return lo, hi


def _ordered_writer(
    lo: int, hi: int, errors: list[BaseException], holding: threading.Event, go_on: threading.Event
) -> threading.Thread:
    """A transaction that takes the lower GPU row, then (told to) the higher one, as an ordered
    writer of both does (the lock an UPDATE of a GPU takes: ``FOR NO KEY UPDATE``)."""

    def job() -> None:
        with transaction.atomic():
            list(GPU.objects.select_for_update(no_key=True).filter(pk=lo).order_by().values_list("pk"))
            holding.set()
            go_on.wait(10)
            list(GPU.objects.select_for_update(no_key=True).filter(pk=hi).order_by().values_list("pk"))

    return in_thread(job, errors)


def _race(lo: GPU, hi: GPU, write: Any) -> list[BaseException]:
    errors: list[BaseException] = []
    holding, go_on = threading.Event(), threading.Event()
    holder = _ordered_writer(lo.pk, hi.pk, errors, holding, go_on)
    assert holding.wait(10)
    writer = in_thread(write, errors)
    assert wait_until_blocked(), "the writer never waited"
    go_on.set()
    holder.join(30)
    writer.join(30)
    return errors


def test_the_heartbeat_flush_does_not_deadlock_with_an_ordered_gpu_writer(hosts):
    # Given a host's two GPUs whose rows lie in the heap in the other order than their ids
    host = hosts["h100-1"]
    lo, hi = _two_gpus_heap_reversed(host)
    samples = [  # the flush's own order: the higher id first
        lifecycle.GpuSample(index=i, health=GPU.Health.HEALTHY, sample={"utilization_pct": 50.0}) for i in (1, 0)
    ]
    report = lifecycle.HeartbeatReport(host.pk, timezone.now(), samples)

    # When the flush writes both samples while an ordered writer holds the lower one
    errors = _race(lo, hi, lambda: lifecycle.record_heartbeats([report]))

    # Then neither was chosen as a deadlock victim, and the samples are stored
    assert errors == []
    assert GPU.objects.filter(pk__in=[lo.pk, hi.pk], last_sample__utilization_pct=50.0).count() == 2


def test_a_per_host_heartbeat_does_not_deadlock_with_an_ordered_gpu_writer(hosts):
    host = hosts["h100-1"]
    lo, hi = _two_gpus_heap_reversed(host)
    samples = [
        lifecycle.GpuSample(index=i, health=GPU.Health.DEGRADED, sample={"utilization_pct": 50.0}) for i in (1, 0)
    ]

    errors = _race(lo, hi, lambda: lifecycle.record_heartbeat(host, samples, now=timezone.now()))

    assert errors == []
    assert GPU.objects.filter(pk__in=[lo.pk, hi.pk], health=GPU.Health.DEGRADED).count() == 2


def test_the_ticks_nominations_do_not_deadlock_with_an_ordered_gpu_writer(hosts, researcher, submit_kwargs):
    # Given GPU hi nominated for a workload, which the tick moves to GPU lo (clear hi, set lo)
    host = hosts["h100-1"]
    lo, hi = _two_gpus_heap_reversed(host)
    w = do_submit_workload(researcher, **submit_kwargs(name="nominated"))
    GPU.objects.filter(pk=hi.pk).update(nominated_for=w)
    index = SimpleNamespace(nominated={hi.pk: w.pk})

    def nominate() -> None:
        with transaction.atomic():
            tick._apply_nominations({lo.pk: w.pk}, set(), index, set())  # type: ignore[arg-type]

    # When the tick writes them while an ordered writer holds the lower one
    errors = _race(lo, hi, nominate)

    # Then neither was chosen as a deadlock victim, and the nomination moved
    assert errors == []
    assert dict(GPU.objects.filter(pk__in=[lo.pk, hi.pk]).values_list("pk", "nominated_for")) == {
        lo.pk: w.pk,
        hi.pk: None,
    }


def test_a_cancel_clearing_nominations_does_not_deadlock_with_an_ordered_gpu_writer(hosts, researcher, submit_kwargs):
    # Given a workload nominated on two GPUs whose rows lie in the heap in the other order than their ids
    host = hosts["h100-1"]
    w = do_submit_workload(researcher, **submit_kwargs(name="nominated"))
    lo, hi = _two_gpus_heap_reversed(host)
    GPU.objects.filter(pk__in=[lo.pk, hi.pk]).update(nominated_for=w)
    GPU.objects.filter(pk=lo.pk).update(memory_mb=F("memory_mb"))  # lo's version after hi's again

    # When the owner cancels it while an ordered writer holds the lower one
    errors = _race(lo, hi, lambda: do_cancel_workload(researcher, w))

    # Then neither was chosen as a deadlock victim, and the nominations are gone
    assert errors == []
    assert not GPU.objects.filter(nominated_for=w).exists()


def test_the_ticks_nominations_and_the_heartbeat_flush_do_not_deadlock(hosts, researcher, submit_kwargs):
    # Given GPU hi nominated for a workload, which the tick moves to GPU lo (clear hi, set lo)
    host = hosts["h100-1"]
    lo, hi = GPU.objects.filter(host=host, index__in=[0, 1]).order_by("pk")
    w = do_submit_workload(researcher, **submit_kwargs(name="nominated"))
    GPU.objects.filter(pk=hi.pk).update(nominated_for=w)
    GPU.objects.filter(pk=lo.pk).update(memory_mb=F("memory_mb"))  # the heap: hi, then lo
    GPU.objects.filter(pk=hi.pk).update(memory_mb=F("memory_mb"))  # ... then lo, then hi
    index = SimpleNamespace(nominated={hi.pk: w.pk})
    samples = [
        lifecycle.GpuSample(index=i, health=GPU.Health.HEALTHY, sample={"utilization_pct": 50.0}) for i in (0, 1)
    ]
    report = lifecycle.HeartbeatReport(host.pk, timezone.now(), samples)
    errors: list[BaseException] = []
    holding, go_on = threading.Event(), threading.Event()

    def pause_after_first_gpu_statement(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if '"scheduler_gpu"' in sql and not holding.is_set():
            holding.set()
            go_on.wait(10)
        return result

    def nominate() -> None:
        with connection.execute_wrapper(pause_after_first_gpu_statement), transaction.atomic():
            tick._apply_nominations({lo.pk: w.pk}, set(), index, set())  # type: ignore[arg-type]

    # When the flush writes both samples after the tick's first GPU statement, before its second
    ticker = in_thread(nominate, errors)
    assert holding.wait(10)
    flusher = in_thread(lambda: lifecycle.record_heartbeats([report]), errors)
    assert wait_until_blocked(), "the flush never waited"
    go_on.set()
    ticker.join(30)
    flusher.join(30)

    # Then neither was chosen as a deadlock victim: the nomination moved, the samples are stored
    assert errors == []
    assert dict(GPU.objects.filter(pk__in=[lo.pk, hi.pk]).values_list("pk", "nominated_for")) == {
        lo.pk: w.pk,
        hi.pk: None,
    }
    assert GPU.objects.filter(pk__in=[lo.pk, hi.pk], last_sample__utilization_pct=50.0).count() == 2
