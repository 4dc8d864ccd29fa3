"""ext50: a change of a running workload's wall-time limit racing the tick's ``stop_timed_out`` on
PostgreSQL (real threads, each with its own connection; skipped on SQLite, where
``test_running_limit.py`` commits the raise between the tick's read and its lock). Both lock the
workload's row first; neither change is lost."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from scheduler import lifecycle, services
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import UpdateError, do_submit_workload, do_update_workload
from scheduler.tick import run_tick
from tests.pg_locks import BOUND_S, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]

HOUR = 3600


def _past_its_hour(researcher, submit_kwargs) -> tuple[Workload, Attempt]:
    """A workload with a 1 h limit, running for an hour and a minute: the next tick stops it."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=600, max_runtime_s=HOUR))
    at = timezone.now() - timedelta(seconds=HOUR + 60)
    run_tick(w.cluster_id, now=at)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=at)
    return Workload.objects.get(pk=w.pk), attempt


def _stop_timed_out(
    cluster_id: int, gate: threading.Event | None = None, issued: threading.Event | None = None
) -> list[int]:
    with transaction.atomic():
        stopped = lifecycle.stop_timed_out(cluster_id, timezone.now())
        if gate is not None and issued is not None:
            issued.set()
            gate.wait(BOUND_S)  # the tick's transaction stays open (its locks held) until released
    return stopped


def test_a_raise_holding_the_row_is_read_by_the_stop_waiting_behind_it(
    monkeypatch, researcher, admin, submit_kwargs
) -> None:
    """The raise has written and holds the workload's lock; the tick's unlocked read still sees the
    old (passed) limit, waits on the lock, and once the raise commits reads it again: no stop."""
    w, attempt = _past_its_hour(researcher, submit_kwargs)
    inside, gate = threading.Event(), threading.Event()

    def hold_the_lock(cluster_id: int) -> None:  # called in the update's transaction, after its write
        inside.set()
        gate.wait(BOUND_S)

    monkeypatch.setattr(services, "request_estimates_on_commit", hold_the_lock)
    update = Waiting(lambda: do_update_workload(admin, Workload.objects.get(pk=w.pk), {"max_runtime_s": 3 * HOUR}))
    try:
        assert inside.wait(BOUND_S), update.error
        stop = Waiting(lambda: _stop_timed_out(w.cluster_id))
        assert until(lambda: (stop.pid is not None and waits_on_a_lock(stop.pid)) or stop.ended.is_set())
    finally:
        gate.set()
    assert update.ended.wait(BOUND_S) and stop.ended.wait(BOUND_S)

    assert (update.error, stop.error) == (None, None)
    assert stop.result == []
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None
    row = Workload.objects.get(pk=w.pk)
    assert (row.state, row.max_runtime_s) == (Workload.State.RUNNING, 3 * HOUR)
    assert not WorkloadEvent.objects.filter(workload=w, kind="timeout").exists()


def test_an_update_waiting_behind_the_stop_is_refused_not_pending(monkeypatch, researcher, admin, submit_kwargs):
    """The stop locked the row first and issued the timeout: the raise waits for its commit, then
    finds the workload preempting and is refused; the stop stands with the limit it read."""
    w, attempt = _past_its_hour(researcher, submit_kwargs)
    monkeypatch.setattr(services, "request_estimates_on_commit", lambda cluster_id: None)
    gate, issued = threading.Event(), threading.Event()
    stop = Waiting(lambda: _stop_timed_out(w.cluster_id, gate, issued))
    try:
        assert issued.wait(BOUND_S), stop.error
        update = Waiting(lambda: do_update_workload(admin, Workload.objects.get(pk=w.pk), {"max_runtime_s": 3 * HOUR}))
        assert until(lambda: (update.pid is not None and waits_on_a_lock(update.pid)) or update.ended.is_set())
    finally:
        gate.set()
    assert stop.ended.wait(BOUND_S) and update.ended.wait(BOUND_S)

    assert stop.error is None and stop.result == [attempt.pk]
    assert isinstance(update.error, UpdateError) and update.error.code == "not_pending", update.error
    row = Workload.objects.get(pk=w.pk)
    assert (row.state, row.max_runtime_s) == (Workload.State.PREEMPTING, HOUR)
    assert WorkloadEvent.objects.get(workload=w, kind="timeout").data["max_runtime_s"] == HOUR
