"""left50: the tick and the estimate run take several workload rows in one order (docs/locking.md:
id order, one statement), so neither deadlocks with the other nor with any ordered locker.

Before, the tick locked the workloads it starts (one statement), then wrote pending reasons
with an ``UPDATE … FROM`` whose row order PostgreSQL chooses, and the estimate run wrote its
estimates with ``UPDATE … WHERE id IN (…)`` in the heap's order: a transaction that locked the
lower id first and then waited for the higher one (the documented order) deadlocked with either.
Each test makes that interleaving happen for sure: the ordered locker runs in a thread, and each
side waits until the other is blocked on a row lock. Skipped on SQLite (one writer, no row locks).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduler import tick
from scheduler.estimates import _write_estimates
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.pg_locks import in_thread, wait_until_blocked, with_an_ordered_locker_after

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_a_tick_writing_reasons_after_its_starts_does_not_deadlock_with_an_ordered_locker(
    researcher, submit_kwargs, cluster, monkeypatch
):
    # Given a held workload (lower id: the tick writes its reason) and one the tick starts (higher id)
    lo = do_submit_workload(researcher, **submit_kwargs(name="held", hold=True))
    Workload.objects.filter(pk=lo.pk).update(pending_reason="")  # as a tick finds a new one
    hi = do_submit_workload(researcher, **submit_kwargs(name="starts"))
    # When the tick, right after its starts, meets another transaction asking for both rows in id
    # order, and goes on to write the held one's reason
    result, errors = with_an_ordered_locker_after(
        monkeypatch, tick, "_apply_starts", lo.pk, hi.pk, lambda: tick.run_tick(cluster.pk)
    )

    # Then neither side was chosen as a deadlock victim, and the tick did its work
    assert errors == []
    assert result is not None and len(result.starts) == 1
    lo.refresh_from_db()
    assert lo.pending_reason == "held"


def test_the_estimate_write_does_not_deadlock_with_an_ordered_locker(researcher, submit_kwargs, cluster):
    # Given two pending workloads whose rows lie in the heap in the other order than their ids
    lo = do_submit_workload(researcher, **submit_kwargs(name="first"))
    hi = do_submit_workload(researcher, **submit_kwargs(name="second"))
    # a change of an indexed column: lo's new version (and its index entries) lie after hi's
    Workload.objects.filter(pk=lo.pk).update(submitted_at=F("submitted_at") + timedelta(microseconds=1))
    at = timezone.now().replace(microsecond=0) + timedelta(hours=1)
    for w in (hi, lo):  # the run's order: whatever it found them in
        w.estimated_start, w.no_start_found, w.estimate_told = at, False, at
    errors: list[BaseException] = []
    holding, go_on = threading.Event(), threading.Event()

    def locker() -> None:
        # an ordered locker has taken the lower id and takes the higher one next
        with transaction.atomic():
            list(Workload.objects.select_for_update().filter(pk=lo.pk).values_list("pk"))
            holding.set()
            go_on.wait(10)
            list(Workload.objects.select_for_update().filter(pk=hi.pk).values_list("pk"))

    holder = in_thread(locker, errors)
    assert holding.wait(10)
    # When the estimate run writes both while the locker holds the lower one
    writer = in_thread(lambda: _write_estimates([hi, lo]), errors)
    assert wait_until_blocked(), "the estimate write never waited"
    go_on.set()
    holder.join(30)
    writer.join(30)

    # Then neither side was chosen as a deadlock victim, and the estimates are written
    assert errors == []
    assert set(Workload.objects.filter(pk__in=[lo.pk, hi.pk]).values_list("estimated_start", flat=True)) == {at}
