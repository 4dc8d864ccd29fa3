"""A tick writes only what changed (issue 15): a pending workload whose reason code and detail are
the same as stored is not rewritten, and a tick with nothing to do costs a fixed number of queries."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import Workload
from scheduler.tick import run_tick

TICK_QUERIES = 21  # the quiet tick: lock, snapshot (8), policy, nothing to write, bounded (+1: maint55's due drains)


def _tick(tw) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as ctx:
        result = run_tick(tw.cluster.pk, now=tw.now)
    return result.status, [q["sql"] for q in ctx.captured_queries]


def _workload_writes(queries: list[str]) -> list[str]:
    table = Workload._meta.db_table
    return [q for q in queries if q.lstrip().upper().startswith("UPDATE") and table in q]


def test_a_second_tick_with_nothing_changed_rewrites_no_pending_reason(tw, pushed):
    tw.host("h1", 2)
    for i in range(12):
        tw.workload(budget=tw.alpha if i % 2 else tw.beta, gpus=2, min_runtime=600)
    status, first = _tick(tw)
    assert status == "ran"
    assert _workload_writes(first)  # the first tick started one and stored the others' reasons
    stored = dict(Workload.objects.filter(state="pending").values_list("pk", "pending_reason"))
    assert len(stored) == 11 and all(stored.values())

    status, second = _tick(tw)

    assert status == "ran"
    assert _workload_writes(second) == []
    assert len(second) <= TICK_QUERIES
    assert dict(Workload.objects.filter(state="pending").values_list("pk", "pending_reason")) == stored


def test_only_the_reasons_that_changed_are_written(tw, pushed):
    tw.host("h1", 2)
    for _ in range(6):
        tw.workload(gpus=2, min_runtime=600)
    assert _tick(tw)[0] == "ran"
    pending = list(Workload.objects.filter(state="pending").order_by("pk"))
    stale = pending[-1]
    Workload.objects.filter(pk=stale.pk).update(pending_reason="stale", pending_detail={"old": 1})

    status, queries = _tick(tw)

    assert status == "ran"
    writes = _workload_writes(queries)
    assert len(writes) == 1
    stale.refresh_from_db()
    assert stale.pending_reason == pending[-1].pending_reason and stale.pending_detail == pending[-1].pending_detail


def test_started_attempts_rows_are_those_a_model_object_would_write(tw, pushed):
    """PostgreSQL inserts the starts with raw ``INSERT … SELECT FROM unnest``: every column as
    ``Attempt``/``AttemptGPU`` defaults give it, and a gang's links ranked per host."""
    from scheduler.models import WIRE_ID_MAX, Attempt, AttemptGPU, WorkloadEvent

    tw.host("h1", 2)
    tw.host("h2", 2)
    gang = tw.workload(gpus=4, min_runtime=600)
    result = run_tick(tw.cluster.pk, now=tw.now)
    assert result.status == "ran"
    (attempt,) = Attempt.objects.filter(workload=gang)
    assert result.starts == [attempt.pk]
    assert attempt.number == 1 and attempt.placed_at == tw.now and attempt.host.name in {"h1", "h2"}
    assert 1 <= attempt.wire_id <= WIRE_ID_MAX
    assert (attempt.started_at, attempt.protected_until, attempt.stop_requested_at, attempt.ended_at) == (None,) * 4
    assert (attempt.stop_reason, attempt.end_reason, attempt.exit_code) == ("", "", None)
    assert attempt.charged_gpu_seconds == 0
    links = list(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu__host__name", "rank", "open"))
    first = attempt.host.name
    assert sorted(links) == sorted([(h, 0 if h == first else 1, True) for h in ("h1", "h1", "h2", "h2")])
    event = WorkloadEvent.objects.get(workload=gang, kind="placed")
    assert event.data == {
        "attempt": attempt.pk,
        "number": 1,
        "gpus": event.data["gpus"],
        "allocated": attempt.allocated,
        "unfunded": False,
    }
    assert sorted(map(tuple, event.data["gpus"])) == [("h1", 0), ("h1", 1), ("h2", 0), ("h2", 1)]
    assert event.at == tw.now and event.actor_id is None and event.message.startswith("attempt 1 placed on ")


def test_the_snapshot_s_epoch_seconds_from_sql_are_those_of_python(tw):
    """``snapshot._epoch_col`` (the database's ``FLOOR``/``CEIL`` of the epoch) agrees with
    ``epoch``/``epoch_up`` on whole seconds, microseconds and the instant before a second."""
    from datetime import UTC, datetime

    from scheduler.snapshot import _epoch_col, epoch, epoch_up

    times = [
        datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 0, 0, 500000, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 0, 59, 999999, tzinfo=UTC),
    ]
    for at in times:
        w = tw.workload(gpus=1, min_runtime=600)
        Workload.objects.filter(pk=w.pk).update(submitted_at=at)
    rows = Workload.objects.annotate(
        down=_epoch_col(Workload, "submitted_at"), up=_epoch_col(Workload, "submitted_at", up=True)
    ).values_list("submitted_at", "down", "up")
    got = sorted((at, down, up) for at, down, up in rows)
    assert got == [(at, epoch(at), epoch_up(at)) for at in times]


def _fresh_reasons(tw) -> dict[int, tuple[str, object]]:
    """The oracle: every pending workload's reason and detail as the policy computes them from a
    snapshot read now, by pk, as JSON stores them (tuples become lists)."""
    import json

    from scheduler.policy import schedule
    from scheduler.snapshot import load_snapshot

    snapshot, index = load_snapshot(tw.cluster.pk, tw.now, with_cap_records=False)
    pk_of = index.pk_of()
    return {
        pk_of(wid): (str(info.reason), json.loads(json.dumps(dict(info.detail))))
        for wid, info in schedule(snapshot).pending.items()
    }


def _stored_reasons() -> dict[int, tuple[str, object]]:
    rows = Workload.objects.filter(state="pending").values_list("pk", "pending_reason", "pending_detail")
    return {pk: (reason, detail) for pk, reason, detail in rows}


def test_the_stored_reasons_are_those_a_fresh_computation_gives(tw, pushed):
    """After each tick every pending workload's stored reason and detail are those computed afresh
    for the state it read (all of them compared, not only those it wrote): whatever was stored
    before — nothing, a stale reason, a detail with quotes and non-ASCII text, the right one — and
    while thousands of rows would take one statement here a few do (the same statement)."""
    h1 = tw.host("h1", 2)
    tw.host("h2", 4)
    runner = tw.workload(budget=tw.beta, gpus=2, min_runtime=3600)
    tw.attempt(runner, list(h1.gpus.order_by("index")))
    for i in range(14):
        tw.workload(budget=tw.alpha if i % 3 else tw.beta, gpus=(1, 2, 4, 8)[i % 4], min_runtime=600 * (i % 3))
    nowhere = tw.workload()
    Workload.objects.filter(pk=nowhere.pk).update(gpu_model="A100")  # no such hardware: stays pending
    tw.workload(hold="user")
    tw.workload(pending_reason="fair_share", pending_detail={"budget": 'qu"ote \\ é ✓', "blocking": ["1", "2"]})

    for round_ in range(3):
        expected = _fresh_reasons(tw)
        result = run_tick(tw.cluster.pk, now=tw.now)
        assert result.status == "ran"
        started = set(Workload.objects.filter(attempts__pk__in=result.starts).values_list("pk", flat=True))
        stored = _stored_reasons()
        assert stored == {pk: reason for pk, reason in expected.items() if pk not in started}
        assert all(reason for reason, _detail in stored.values())
        # the next round: a stale reason, a stale detail, a newcomer
        assert stored[nowhere.pk][1]  # a detail to make stale
        first = min(stored)
        Workload.objects.filter(pk=first).update(pending_reason="stale", pending_detail={"é": ['"']})
        Workload.objects.filter(pk=nowhere.pk).update(pending_detail={"stale": True})
        tw.workload(gpus=1 + round_)
