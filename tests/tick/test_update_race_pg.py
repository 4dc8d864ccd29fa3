"""upd44: an update of a pending workload racing a tick on PostgreSQL (real threads, each with its
own connection; skipped on SQLite, where ``test_update_race.py`` runs the update inside the tick's
policy call). The update commits while the tick's policy runs, between its snapshot and its
apply: the tick must not start the workload with the request its snapshot read."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from scheduler import tick
from scheduler.models import Attempt, AttemptGPU, Workload
from scheduler.services import UpdateError, do_submit_workload, do_update_workload
from tests.pg_locks import BOUND_S, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def _tick_racing(monkeypatch: pytest.MonkeyPatch, workload: Workload, changes: dict[str, Any]) -> tuple[Any, Waiting]:
    """A tick whose policy, once it decided, lets the update run in another thread (it commits, or
    waits on a lock of the tick) before the tick applies."""
    real = tick.schedule
    seen: dict[str, Any] = {}

    def schedule_then_update(snapshot: Any) -> Any:
        decisions = real(snapshot)
        assert [s.workload for s in decisions.starts] == [str(workload.pk)]
        other = Waiting(lambda: do_update_workload(workload.owner, Workload.objects.get(pk=workload.pk), changes))
        assert until(lambda: (other.pid is not None and waits_on_a_lock(other.pid)) or other.ended.is_set())
        seen["other"] = other
        return decisions

    monkeypatch.setattr(tick, "schedule", schedule_then_update)
    result = tick.run_tick(workload.cluster_id)
    monkeypatch.setattr(tick, "schedule", real)
    other = seen["other"]
    assert other.ended.wait(BOUND_S)
    return result, other


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [({"gpu_count": 8}, "gpu_count", 8), ({"min_runtime_s": 0}, "min_runtime_s", 0)],
)
def test_an_update_committed_while_the_policy_ran_starts_nothing_old(
    monkeypatch, hosts, researcher, submit_kwargs, changes, field, value
) -> None:
    """The update commits before the tick locks the row (the tick's snapshot is unlocked): the
    tick's start of the old request (4 GPUs, protected an hour) is dropped; the next tick starts
    the new one."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=3600))

    result, other = _tick_racing(monkeypatch, workload, changes)

    assert other.error is None, other.error
    assert result.starts == [] and result.dropped == 1
    row = Workload.objects.get(pk=workload.pk)
    assert row.state == Workload.State.PENDING and getattr(row, field) == value
    assert not Attempt.objects.filter(workload=workload).exists()

    again = tick.run_tick(workload.cluster_id)

    assert len(again.starts) == 1
    attempt = Attempt.objects.get(workload=workload)
    assert AttemptGPU.objects.filter(attempt=attempt).count() == row.gpu_count
    assert attempt.allocated == (row.min_runtime_s > 0)


def test_an_update_waiting_for_the_tick_is_refused_not_pending(monkeypatch, hosts, researcher, submit_kwargs) -> None:
    """An update whose lock comes after the tick's (the tick locked the row first) waits for the
    tick's commit and is then refused ``not_pending``: the workload started as the tick placed it,
    with the request it still had."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    real_lock = tick._lock_workloads
    seen: dict[str, Any] = {}

    def lock_then_update(decisions: Any, index: Any, reasons: Any = ()) -> Any:
        gone = real_lock(decisions, index, reasons)
        other = Waiting(lambda: do_update_workload(researcher, Workload.objects.get(pk=workload.pk), {"gpu_count": 8}))
        assert until(lambda: (other.pid is not None and waits_on_a_lock(other.pid)) or other.ended.is_set())
        seen["other"] = other
        return gone

    monkeypatch.setattr(tick, "_lock_workloads", lock_then_update)
    result = tick.run_tick(workload.cluster_id)
    other = seen["other"]
    assert other.ended.wait(BOUND_S)

    assert isinstance(other.error, UpdateError) and other.error.code == "not_pending", other.error
    assert len(result.starts) == 1
    row = Workload.objects.get(pk=workload.pk)
    assert (row.state, row.gpu_count) == (Workload.State.STARTING, 4)
    assert AttemptGPU.objects.filter(attempt__workload=workload).count() == 4
