"""A workload's hold racing the tick on PostgreSQL (real threads, each with its own connection;
skipped on SQLite, where the tick's ``BEGIN IMMEDIATE`` holds the one write lock from its snapshot
to its commit). As a cancel: the hold locks the workload's row, which the tick locks only to apply,
so a hold committed after the snapshot stands and the tick drops the start (docs/jobs.md)."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler.models import Attempt
from scheduler.services import do_hold_workload, do_submit_workload
from tests.tick.test_brk38_pg import _tick_racing

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_a_workload_held_while_the_tick_ran_does_not_start(monkeypatch, hosts, researcher, submit_kwargs) -> None:
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))

    result, other, _name, committed_first = _tick_racing(
        monkeypatch, workload.cluster_id, lambda _host: do_hold_workload(researcher, workload)
    )

    assert other.error is None, other.error
    assert committed_first
    assert result.starts == [] and result.dropped == 1
    assert not Attempt.objects.filter(workload=workload).exists()
    workload.refresh_from_db()
    assert (workload.state, workload.hold, workload.pending_reason) == ("pending", "user", "held")
