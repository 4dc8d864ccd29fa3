"""A database restore does not let new work "succeed" without running (issue 14, finding 3).

The whole stack with a real agent (tests/e2e/conftest.py). The database is "dumped" (its
workload and attempt rows and id sequences noted), a workload runs, then the dump is "restored"
as ``pg_restore --clean`` would (rows made after it are gone, the sequences are back at the
dump's values) while the agent keeps its records. The next workload then gets the same attempt
primary key as the one the agent remembers; it must really run (its own exit, its own log).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.db import connection

from scheduler.models import Attempt, AttemptGPU, Workload, WorkloadEvent

pytestmark = [pytest.mark.timeout(90)]

_TABLES = [Workload, Attempt, AttemptGPU, WorkloadEvent]


def _sequence(model: Any) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [model._meta.db_table])
        return cursor.fetchone()[0]


def _dump() -> dict[str, Any]:
    """What a restore brings back: each table's highest id and its id sequence's position."""
    state: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for model in _TABLES:
            table = model._meta.db_table
            top = model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
            if connection.vendor == "postgresql":
                cursor.execute(f"SELECT last_value, is_called FROM {_sequence(model)}")  # noqa: S608 -- our table
                state[table] = (top, cursor.fetchone())
            else:
                cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
                row = cursor.fetchone()
                state[table] = (top, row[0] if row else 0)
    return state


def _restore(state: dict[str, Any]) -> None:
    """The database as the dump had it: later rows deleted, id sequences set back."""
    Workload.objects.filter(pk__gt=state[Workload._meta.db_table][0]).delete()  # cascades to the rest
    with connection.cursor() as cursor:
        for model in _TABLES:
            table = model._meta.db_table
            top, seq = state[table]
            model.objects.filter(pk__gt=top).delete()
            if connection.vendor == "postgresql":
                cursor.execute("SELECT setval(%s, %s, %s)", [_sequence(model), seq[0], seq[1]])
            else:
                cursor.execute("UPDATE sqlite_sequence SET seq = %s WHERE name = %s", [seq, table])


def test_after_a_restore_new_work_really_runs_though_attempt_ids_repeat(stack):
    dump = _dump()
    # Given a workload that ran to success after the dump: the agent keeps its record
    first_id = stack.submit("org/alpha", gpus=1, min_runtime=60, duration=0.5, name="before-restore")
    stack.wait_until(
        lambda: Workload.objects.get(pk=first_id).state == Workload.State.SUCCEEDED, 30, "the first workload"
    )
    first = Attempt.objects.get(workload_id=first_id)
    assert "standin: done" in stack.attempt_log(first.pk)

    # When the database is restored from the dump and a new workload is submitted
    _restore(dump)
    assert not Attempt.objects.filter(pk=first.pk).exists()
    command = [sys.executable, "-m", "agent.standin", "--duration", "1.5", "--fail"]
    second_id = stack.submit("org/beta", gpus=1, min_runtime=60, duration=1.5, name="after-restore", command=command)
    stack.wait_until(
        lambda: Workload.objects.get(pk=second_id).state in Workload.FINAL_STATES, 40, "the new workload to end"
    )

    # Then it got the old attempt's primary key (the restore's effect) but really ran: its own
    # exit (1, after its 1.5 s), its own log, not the previous attempt's "succeeded (exit 0)"
    second = Attempt.objects.get(workload_id=second_id)
    assert second.pk == first.pk
    assert (second.end_reason, second.exit_code) == ("failed", 1)
    assert (second.ended_at - second.started_at).total_seconds() >= 1.0
    log = stack.attempt_log(second.pk)
    assert "failing on purpose" in log
    assert Workload.objects.get(pk=second_id).state == Workload.State.FAILED
