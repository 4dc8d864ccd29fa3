"""brk52: the tick took workload rows in more than one statement: ``settle_dependencies`` (and
``stop_timed_out``) locked theirs, then ``_lock_workloads`` the rest (starts, stops, pending
reasons) in the same transaction. A row of the first set with a higher id than one of the second
is a lock taken out of id order (docs/locking.md): an ordered locker of both (the estimate run's
chunk, a batched exit report) that held the lower id and waited for the higher deadlocked with
the tick. The interleaving is made to happen for sure, as in test_workload_lock_order_pg.py.
"""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler import lifecycle, tick
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.pg_locks import with_an_ordered_locker_after

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_a_tick_canceling_a_dependent_does_not_deadlock_with_an_ordered_locker(
    researcher, submit_kwargs, cluster, monkeypatch
):
    # Given a held workload (lower id: the tick writes its reason) and one whose ok-dependency failed
    lo = do_submit_workload(researcher, **submit_kwargs(name="held", hold=True))
    Workload.objects.filter(pk=lo.pk).update(pending_reason="")  # as a tick finds a new one
    failed = do_submit_workload(researcher, **submit_kwargs(name="failed", hold=True))
    hi = do_submit_workload(researcher, **submit_kwargs(name="dependent", after=[f"{failed.pk}:ok"]))
    Workload.objects.filter(pk=failed.pk).update(state=Workload.State.FAILED, hold="")
    # When the tick, right after its cancel, meets another transaction asking for both rows in id
    # order, and goes on to write the held one's reason
    _result, errors = with_an_ordered_locker_after(
        monkeypatch, lifecycle, "settle_dependencies", lo.pk, hi.pk, lambda: tick.run_tick(cluster.pk)
    )

    # Then neither side was chosen as a deadlock victim, and the tick did its work
    assert errors == []
    lo.refresh_from_db()
    hi.refresh_from_db()
    assert (lo.pending_reason, hi.state) == ("held", Workload.State.CANCELED)
