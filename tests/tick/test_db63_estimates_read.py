"""db63: the estimate run reads what its snapshot holds and writes its estimates in one statement.

A snapshot read ``simulated`` (estimates, quotes) carries the open attempts' workloads and every
wall-time limit, read with its own rows: ``running_workloads`` and ``wall_time_limits`` read them
there, the same as their one query each (their readable form, kept for a snapshot without them).
On PostgreSQL the estimates are written by one ``UPDATE ... FROM unnest(...)`` per chunk, the same
rows as the ``UPDATE`` of ``CASE`` per column (still pending, at the version the run read).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction

from scheduler.estimates import (
    StoredEstimate,
    _update_case,
    _update_pg,
    running_workloads,
    store_estimates,
    wall_time_limits,
)
from scheduler.models import GPU, Workload
from scheduler.snapshot import load_snapshot

HOUR = 3600


def _state(tw):  # noqa: ANN001, ANN202
    """Two workloads running (one with a wall-time limit), three pending (one with a limit)."""
    host = tw.host("h1", gpus=4)
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    limited = tw.workload(gpus=2, max_runtime_s=2 * HOUR, cpus=4, memory_bytes=2**30)
    plain = tw.workload(tw.beta, gpus=1, min_runtime=0)
    tw.attempt(limited, gpus[:2], started_ago=600)
    tw.attempt(plain, gpus[2:3], started_ago=300)
    pending = [
        tw.workload(gpus=2, max_runtime_s=HOUR + 30),
        tw.workload(tw.beta, gpus=1),
        tw.workload(gpus=4, min_runtime=2 * HOUR),
    ]
    return limited, plain, pending


def test_a_simulated_snapshot_carries_the_running_workloads_and_limits_their_queries_read(
    tw, django_assert_num_queries
):
    # Given two running workloads and three pending ones, two of the five with a wall-time limit
    limited, plain, pending = _state(tw)
    # When a snapshot is read for a simulation
    snap, index = load_snapshot(tw.cluster.pk, tw.now, simulated=True)
    # Then the simulation's running workloads and limits come from it, no query
    with django_assert_num_queries(0):
        running, limits = running_workloads(snap, index), wall_time_limits(snap, index)
    # the same as their queries read
    assert running == running_workloads(snap)
    assert limits == wall_time_limits(snap)
    assert set(running) == {str(limited.pk), str(plain.pk)}
    assert limits == {str(limited.pk): 2 * HOUR, str(pending[0].pk): HOUR + 30}
    # and the tick's snapshot reads neither, the same snapshot otherwise
    tick_snap, tick_index = load_snapshot(tw.cluster.pk, tw.now, with_cap_records=False)
    assert (tick_index.running, tick_index.limits) == (None, None)
    assert (tick_snap.attempts, tick_snap.pending) == (snap.attempts, snap.pending)


def test_store_estimates_reads_no_workload_again_by_ids(tw):
    """The run's reads: the snapshot's, the pending rows' stored estimates; no list of ids (the
    limits' ``IN`` list of every pending and running workload, 25,000 ids at the first size)."""
    _limited, _plain, pending = _state(tw)
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        store_estimates(tw.cluster.pk, tw.now)
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]
    # the limits came with the pending rows (the one query of them that names max_runtime_s)
    assert not [sql for sql in reads if '"max_runtime_s" IS NOT NULL' in sql]
    assert len([sql for sql in reads if '"max_runtime_s"' in sql]) == 2  # the open attempts', the pending rows'
    assert Workload.objects.filter(pk__in=[w.pk for w in pending], estimated_start__isnull=False).count() == 3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement write is PostgreSQL's")
def test_the_one_statement_write_writes_what_the_case_form_writes(tw):
    # Given six pending workloads, one updated since the run read it and one started since
    rows = [tw.workload() for _ in range(6)]
    versions = {w.pk: w.spec_version for w in rows}
    Workload.objects.filter(pk=rows[1].pk).update(spec_version=versions[rows[1].pk] + 1)
    Workload.objects.filter(pk=rows[2].pk).update(state=Workload.State.STARTING)
    at = tw.now + timedelta(hours=3)
    chunk = [
        StoredEstimate(rows[0].pk, at, False, at),
        StoredEstimate(rows[1].pk, at, False, None),
        StoredEstimate(rows[2].pk, at, False, at),
        StoredEstimate(rows[3].pk, None, True, None),
        StoredEstimate(rows[4].pk, at + timedelta(seconds=1), False, at - timedelta(hours=2)),
        StoredEstimate(rows[5].pk, None, False, at),  # no version known: no condition on it
    ]
    del versions[rows[5].pk]
    fields = ("pk", "state", "spec_version", "estimated_start", "no_start_found", "estimate_told")

    def written(update):  # noqa: ANN001, ANN202
        with transaction.atomic():
            update(chunk, versions)
            out = list(Workload.objects.filter(pk__in=[w.pk for w in rows]).order_by("pk").values_list(*fields))
            transaction.set_rollback(True)
        return out

    # When each form writes the same chunk
    case, one = written(_update_case), written(_update_pg)
    # Then both write the same rows, the same values
    assert one == case
    assert [(r[3], r[4], r[5]) for r in one] == [
        (at, False, at),
        (None, False, None),  # updated since: kept what the update left
        (None, False, None),  # not pending any more
        (None, True, None),
        (at + timedelta(seconds=1), False, at - timedelta(hours=2)),
        (None, False, at),
    ]
