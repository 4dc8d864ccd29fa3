"""A bulk cancel and a bulk hold racing ticks, exit reports and heartbeats on PostgreSQL
(docs/jobs.md "Bulk actions", docs/locking.md): no deadlock, no error, each workload ends as its
single action would leave it, and another user's work is never touched. Real threads, each with
its own connection; skipped on SQLite (one writer, no row locks)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from scheduler import lifecycle
from scheduler.bulk import do_bulk_action
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.services.test_lock_order_pg import _race, _running

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_a_bulk_cancel_and_a_bulk_hold_race_the_tick_without_deadlock(
    researcher, teammate, submit_kwargs, hosts, cluster
):
    running = _running(researcher, submit_kwargs, hosts, 6)
    pending = [do_submit_workload(researcher, **submit_kwargs(name=f"p{i}", gpu_count=1)) for i in range(20)]
    theirs = [do_submit_workload(teammate, **submit_kwargs(name=f"t{i}", gpu_count=1)) for i in range(10)]
    mine = [a.workload_id for a in running] + [w.pk for w in pending]
    outcomes: dict[str, Any] = {}

    def cancel() -> None:
        outcomes["cancel"] = do_bulk_action(researcher, "cancel", Workload.objects.filter(pk__in=mine))

    def hold() -> None:
        outcomes["hold"] = do_bulk_action(teammate, "hold", Workload.objects.filter(state="pending"))

    samples = [lifecycle.GpuSample(i, "healthy", sample={"utilization_pct": 50.0}) for i in range(8)]
    errors = _race(
        [
            ("bulk-cancel", cancel),
            ("bulk-hold", hold),
            ("tick", lambda: [run_tick(cluster.pk) for _ in range(3)]),
            ("exit", lambda: lifecycle.attempt_exited(running[0].host, running[0].pk, 0, 1.0)),
            ("heartbeat", lambda: lifecycle.record_heartbeat(hosts["a100-2"], samples)),
        ]
    )
    assert errors == []

    done = outcomes["cancel"]
    assert done.matched == len(mine)
    assert {pk for pk, _ in done.skipped} | set(done.changed) == set(mine)
    exited = running[0].workload_id  # exited on its own 1 s before its report: it keeps its end (DESIGN.md §4)
    assert Workload.objects.get(pk=exited).state in ("succeeded", "canceled")
    for w in Workload.objects.filter(pk__in=done.changed).exclude(pk=exited):
        open_attempt = Attempt.objects.filter(workload=w, ended_at__isnull=True).first()
        # canceled at once, or asked to stop (running, or a tick started it first)
        assert w.state == "canceled" or (open_attempt is not None and open_attempt.stop_reason == "canceled"), w.pk
    assert done.skipped in ([], [(exited, "already_final")])
    # the teammate's hold touched only the teammate's work; the researcher's cancel none of it
    held = outcomes["hold"]
    assert set(held.changed) <= {w.pk for w in theirs}
    assert not WorkloadEvent.objects.filter(workload__in=theirs, actor=researcher).exists()
    assert not WorkloadEvent.objects.filter(workload_id__in=mine, actor=teammate).exists()
    assert {w.hold for w in Workload.objects.filter(pk__in=held.changed)} == {"user"}
