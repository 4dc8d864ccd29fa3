"""maint55: on PostgreSQL a scheduled drain is applied at most once: ``apply_due_drains`` reads
the schedule again under the host's row lock and clears it in the transaction that applies it, so
a second run that read the host as due before the first committed (a second clock, a tick run
by hand) waits and finds nothing, and a cancel that committed first leaves nothing to apply.
Real threads, each with its own connection; skipped on SQLite (one writer at a time)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduler.models import Host, HostEvent
from scheduler.services import apply_due_drains, do_cancel_scheduled_drain, do_schedule_drain
from tests.pg_locks import BOUND_S, Held
from tests.pg_locks import until as _until
from tests.pg_locks import waits_on_a_lock as _waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_two_runs_at_once_apply_a_drain_once(admin, hosts):
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at, "PSU")
    results: dict[str, list[int]] = {}
    first = Held(lambda: results.__setitem__("first", apply_due_drains(host.cluster_id, at)))
    assert first.done.wait(BOUND_S), first.error
    second = Held(lambda: results.__setitem__("second", apply_due_drains(host.cluster_id, at)))
    try:
        assert _until(lambda: _waits_on_a_lock(second.backend_pid) or second.ended.is_set())
        assert not second.done.is_set(), "the second run did not wait for the host's row lock"
    finally:
        first.release()
    assert second.done.wait(BOUND_S), second.error
    second.release()
    assert (first.error, second.error) == (None, None)
    assert results == {"first": [host.pk], "second": []}
    assert HostEvent.objects.filter(host=host, kind="draining").count() == 1
    host.refresh_from_db()
    assert (host.state, host.drain_at) == (Host.State.DRAINING, None)


def test_a_cancel_committed_first_leaves_nothing_to_apply(admin, hosts):
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at)
    cancel = Held(lambda: do_cancel_scheduled_drain(admin, host, "not today"))
    assert cancel.done.wait(BOUND_S), cancel.error
    applied: list[list[int]] = []
    tick = Held(lambda: applied.append(apply_due_drains(host.cluster_id, at)))
    try:
        assert _until(lambda: _waits_on_a_lock(tick.backend_pid) or tick.ended.is_set())
    finally:
        cancel.release()
    assert tick.done.wait(BOUND_S), tick.error
    tick.release()
    assert applied == [[]]
    host.refresh_from_db()
    assert (host.state, host.drain_at) == (Host.State.ACTIVE, None)
    assert not HostEvent.objects.filter(host=host, kind="draining").exists()
