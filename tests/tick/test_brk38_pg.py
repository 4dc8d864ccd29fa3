"""brk38: an operator's host change racing a tick on PostgreSQL (real threads, each with its own
connection; skipped on SQLite, where the tick's ``BEGIN IMMEDIATE`` holds the one write lock from
its snapshot to its commit, so the race cannot happen there)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from scheduler import services, tick
from scheduler.models import Attempt, Host, Workload
from scheduler.services import HostError, do_submit_workload
from tests.pg_locks import BOUND_S, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def _tick_racing(
    monkeypatch: pytest.MonkeyPatch, cluster_id: int, change: Any
) -> tuple[tick.TickResult, Waiting, str, bool]:
    """Run a tick whose policy, once it decided a start, lets ``change(host)`` of the start's host
    run in another thread (it ends, or waits on a lock of the tick) before the tick applies; also
    return whether the change committed before the tick applied its decisions."""
    real = tick.schedule
    seen: dict[str, Any] = {}

    def schedule_then_change(snapshot: Any) -> Any:
        decisions = real(snapshot)
        name = decisions.starts[0].gpus[0][0]
        host = Host.objects.get(name=name)
        other = Waiting(lambda: change(host))
        assert until(lambda: (other.pid is not None and waits_on_a_lock(other.pid)) or other.ended.is_set())
        seen.update(other=other, name=name, committed_first=other.ended.is_set() and other.error is None)
        return decisions

    monkeypatch.setattr(tick, "schedule", schedule_then_change)
    result = tick.run_tick(cluster_id)
    other = seen["other"]
    assert other.ended.wait(BOUND_S)
    return result, other, seen["name"], seen["committed_first"]


def test_a_host_removed_while_the_tick_ran_gets_no_attempt(monkeypatch, hosts, researcher, submit_kwargs) -> None:
    """``do_remove_host`` of an empty host committed between the tick's snapshot and its apply: the
    tick then placed an attempt on the removed host (its agent refused, its links closed), which sat
    in ``starting`` until the start timeout. A removal now waits for the cluster's tick and is
    then refused ``host_busy``, or the tick waits for it (and is skipped)."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))

    result, other, name, _first = _tick_racing(
        monkeypatch, workload.cluster_id, lambda host: services.do_remove_host(None, host, "decommissioned")
    )

    host = Host.objects.get(name=name)
    opened = Attempt.objects.filter(host=host, ended_at__isnull=True).exists()
    assert not (host.removed_at is not None and opened)
    assert isinstance(other.error, HostError) and other.error.code == "host_busy", other.error
    assert len(result.starts) == 1 and Workload.objects.get(pk=workload.pk).state == Workload.State.STARTING


def test_a_host_cordoned_while_the_tick_ran_gets_no_new_attempt_after_the_cordon(
    monkeypatch, hosts, researcher, submit_kwargs
) -> None:
    """A cordon committed between the tick's snapshot and its apply: the tick placed new work on the
    host after the operator's "no new work" was recorded. The cordon now waits for the tick."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))

    _result, other, name, committed_first = _tick_racing(
        monkeypatch, workload.cluster_id, lambda host: services.do_set_host_state(None, host, "cordoned", "bios")
    )

    assert other.error is None, other.error
    assert not committed_first
    assert Attempt.objects.filter(workload=workload, host__name=name).exists()
    assert Host.objects.get(name=name).state == Host.State.CORDONED


def test_a_hold_put_while_the_tick_ran_applies_after_its_starts(monkeypatch, hosts, researcher, submit_kwargs) -> None:
    """A budget's hold committed between the tick's snapshot and its apply: the tick started the
    held budget's work after "no new attempts" was recorded (DESIGN.md §3.7). A hold now waits
    for the ticks in flight, so it applies after their decisions, as a later hold would."""
    from budgets.services import do_set_hold

    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    budget = workload.budget

    _result, other, _name, committed_first = _tick_racing(
        monkeypatch, workload.cluster_id, lambda host: do_set_hold(budget, True, note="audit")
    )

    assert other.error is None, other.error
    assert not committed_first
    budget.refresh_from_db()
    assert budget.hold and Attempt.objects.filter(workload=workload).exists()
