"""brk52: the tick took workload rows in more than one statement: ``settle_dependencies`` (and
``stop_timed_out``) locked theirs, then ``_lock_workloads`` the rest (starts, stops, pending
reasons) in the same transaction. A row of the first set with a higher id than one of the second
is a lock taken out of id order (docs/locking.md): an ordered locker of both (the estimate run's
chunk, a batched exit report) that held the lower id and waited for the higher deadlocked with
the tick. The interleaving is made to happen for sure, as in test_workload_lock_order_pg.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from scheduler import lifecycle, tick
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.tick.test_workload_lock_order_pg import _in_thread, _no_side_effects, _ordered_locker, _wait_until_blocked

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
]

__all__ = ["_no_side_effects"]  # its autouse fixture, used here too


def test_a_tick_canceling_a_dependent_does_not_deadlock_with_an_ordered_locker(
    researcher, submit_kwargs, cluster, monkeypatch
):
    # Given a held workload (lower id: the tick writes its reason) and one whose ok-dependency failed
    lo = do_submit_workload(researcher, **submit_kwargs(name="held", hold=True))
    Workload.objects.filter(pk=lo.pk).update(pending_reason="")  # as a tick finds a new one
    failed = do_submit_workload(researcher, **submit_kwargs(name="failed", hold=True))
    hi = do_submit_workload(researcher, **submit_kwargs(name="dependent", after=[f"{failed.pk}:ok"]))
    Workload.objects.filter(pk=failed.pk).update(state=Workload.State.FAILED, hold="")
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    settle = lifecycle.settle_dependencies

    def settle_then_wait(*args: Any, **kwargs: Any) -> Any:
        canceled = settle(*args, **kwargs)
        # ... when another transaction asks for both rows in id order right after the cancel
        threads.append(_in_thread(lambda: _ordered_locker(lo.pk, hi.pk), errors))
        assert _wait_until_blocked(), "the ordered locker never waited"
        return canceled

    monkeypatch.setattr(lifecycle, "settle_dependencies", settle_then_wait)

    # When the tick goes on to write the held one's reason
    try:
        tick.run_tick(cluster.pk)
    except BaseException as exc:  # noqa: BLE001
        errors.append(exc)
    for t in threads:
        t.join(30)

    # Then neither side was chosen as a deadlock victim, and the tick did its work
    assert errors == []
    lo.refresh_from_db()
    hi.refresh_from_db()
    assert (lo.pending_reason, hi.state) == ("held", Workload.State.CANCELED)
