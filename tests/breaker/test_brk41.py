"""brk41: leftovers of the previous breaker round (the agent link's frame size at the server, the
token out of the process list, an array's dependencies written in bulk) and this round's finds."""

from __future__ import annotations

import math

from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import Workload, WorkloadDependency
from scheduler.services import do_submit_workload

DEPENDENCY_TABLE = WorkloadDependency._meta.db_table


def _dependency_inserts(ctx: CaptureQueriesContext) -> int:
    return sum(1 for q in ctx.captured_queries if q["sql"].startswith("INSERT") and DEPENDENCY_TABLE in q["sql"])


def test_an_arrays_dependencies_are_written_in_bulk_not_per_member(researcher, submit_kwargs):
    """brk40 leftover: a 1000-member array with 64 ``after`` dependencies cost one INSERT of its
    dependencies per member (with the workload's and its event's: ~3,000 statements). The rows of
    every member are one bulk_create: as many statements as the database's batch needs for all of
    them (PostgreSQL: one), and the array's statements grow by no more than that with its
    dependencies."""
    members, deps = 40, 64
    done = [do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name=f"d{i}")) for i in range(deps)]
    after = [f"{w.pk}:any" for w in done]
    with CaptureQueriesContext(connection) as without:
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="plain", array=f"0-{members - 1}"))
    with CaptureQueriesContext(connection) as with_deps:
        first = do_submit_workload(
            researcher, **submit_kwargs(gpu_count=1, name="arr", array=f"0-{members - 1}", after=after)
        )
    rows = list(WorkloadDependency.objects.filter(workload__group=first.group))
    assert len(rows) == members * deps
    assert {(r.after_id, r.condition) for r in rows} == {(w.pk, "any") for w in done}
    assert Workload.objects.filter(group=first.group).count() == members
    fields = [f for f in WorkloadDependency._meta.concrete_fields if not f.primary_key]
    per_statement = connection.ops.bulk_batch_size(fields, rows) or len(rows)
    statements = math.ceil(members * deps / per_statement)
    assert _dependency_inserts(with_deps) <= statements, _dependency_inserts(with_deps)
    # the after list's checks: a fixed number of reads, whatever the number of members
    assert len(with_deps.captured_queries) <= len(without.captured_queries) + statements + 4
