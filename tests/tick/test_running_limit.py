"""ext50: the tick stops a running workload at its wall-time limit as changed while it runs
(docs/jobs.md "The wall-time limit of a running workload"), and a change committed between the
tick's unlocked read of the limits and its lock of the workload is not lost."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.utils import timezone

from scheduler import lifecycle
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload, do_update_workload
from scheduler.tick import run_tick

HOUR = 3600


def _start(w: Workload, at) -> Attempt:
    run_tick(w.cluster_id, now=at)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=at)
    return attempt


def test_the_tick_stops_it_at_the_lowered_limit_not_the_submitted_one(researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=600, max_runtime_s=4 * HOUR))
    t0 = timezone.now()
    attempt = _start(w, t0)

    do_update_workload(researcher, w, {"max_runtime_s": HOUR})

    run_tick(w.cluster_id, now=t0 + timedelta(seconds=HOUR - 1))
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None
    run_tick(w.cluster_id, now=t0 + timedelta(seconds=HOUR))
    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("timeout", t0 + timedelta(seconds=HOUR))
    assert WorkloadEvent.objects.get(workload=w, kind="timeout").message == (
        "attempt 1 stopping: wall-time limit of 1h reached"
    )


def test_the_tick_does_not_stop_it_at_the_old_limit_once_an_admin_raised_it(researcher, admin, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=600, max_runtime_s=HOUR))
    t0 = timezone.now()
    attempt = _start(w, t0)

    do_update_workload(admin, w, {"max_runtime_s": 2 * HOUR})

    run_tick(w.cluster_id, now=t0 + timedelta(seconds=HOUR))
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None
    run_tick(w.cluster_id, now=t0 + timedelta(seconds=2 * HOUR))
    attempt.refresh_from_db()
    assert attempt.stop_reason == "timeout"


def test_a_raise_committed_between_the_ticks_read_and_its_lock_is_not_lost(researcher, admin, submit_kwargs):
    """The raise lands after ``stop_timed_out`` read the old (passed) limit and before it locks the
    workload (the order an update holding the row's lock makes on PostgreSQL): the stop reads the
    limit again under the lock and issues nothing."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=600, max_runtime_s=HOUR))
    t0 = timezone.now() - timedelta(seconds=HOUR + 60)
    attempt = _start(w, t0)
    fired: list[str] = []

    def raise_after_the_attempts_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not fired and 'FROM "scheduler_attempt"' in sql and "JOIN" not in sql.upper():
            fired.append(sql)
            do_update_workload(admin, w, {"max_runtime_s": 3 * HOUR})
        return result

    with connection.execute_wrapper(raise_after_the_attempts_read):
        stopped = lifecycle.stop_timed_out(w.cluster_id, timezone.now())

    assert fired
    assert stopped == []
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None
    assert Workload.objects.get(pk=w.pk).state == Workload.State.RUNNING
    assert not WorkloadEvent.objects.filter(workload=w, kind="timeout").exists()
