"""An attempt ending while a snapshot is read is counted once in its budget's usage (cap61).

Under READ COMMITTED every statement of the tick's snapshot sees the commits made before it: the
caps' usage was summed first (closed attempts), the open attempts read after. An exit committed
between the two was in neither, so its GPU-time went uncounted and a capped budget (a tryout's
``vision``, 0.244 of its 0.2 GPU-hours) started its next workload funded. The hook below ends the
attempt, in the snapshot's own connection as a concurrent commit would appear, after each of the
snapshot's statements in turn: the caps' usage and the fair-share usage must count its 2 GPU-hours
exactly once whichever statement it follows (docs/locking.md, "The snapshot's usage").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction

from budgets.models import Budget
from scheduler import lifecycle, tick
from scheduler.models import GPU, Attempt, Workload
from scheduler.policy.usage import windowed_usage
from scheduler.snapshot import load_snapshot

HOUR = 3600


@contextmanager
def _end_after_query(k: int, end: Callable[[], None]) -> Iterator[list[int]]:
    """Run ``end`` right after the ``k``-th statement (from 0) of the block; yields the count seen."""
    seen = [0]
    busy = [False]

    def hook(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        out = execute(sql, params, many, context)
        if busy[0]:
            return out
        n = seen[0]
        seen[0] += 1
        if n == k:
            busy[0] = True
            try:
                end()
            finally:
                busy[0] = False
        return out

    with connection.execute_wrapper(hook):
        yield seen


def _setup(tw: Any) -> Attempt:
    """Budget alpha capped at 1 GPU-hour a day; one open 1-GPU attempt of it started 2 h ago."""
    Budget.objects.filter(pk=tw.alpha.pk).update(
        cap_gpu_hours=Decimal("1"), cap_period_days=1, on_cap=Budget.OnCap.DOWNGRADE
    )
    workload = tw.workload(budget=tw.alpha, gpus=1, min_runtime=HOUR)
    return tw.attempt(workload, list(GPU.objects.filter(host__name="h1").order_by("index")[:1]), started_ago=2 * HOUR)


def _ender(tw: Any, attempt: Attempt) -> Callable[[], None]:
    def end() -> None:
        assert lifecycle.attempt_exited(attempt.host, attempt.pk, 0, 0.0, now=tw.now)

    return end


@pytest.mark.parametrize("with_cap_records", [False, True], ids=["tick", "estimates"])
def test_an_attempt_ending_between_the_snapshots_reads_counts_once(tw, pushed, with_cap_records):
    tw.host("h1", 2)
    k = 0
    while True:
        with transaction.atomic():
            attempt = _setup(tw)
            with _end_after_query(k, _ender(tw, attempt)) as seen:
                snap, index = load_snapshot(tw.cluster.pk, tw.now, with_cap_records=with_cap_records)
            if seen[0] <= k:  # the hook ran after no statement: every position was tried
                transaction.set_rollback(True)
                break
            assert Attempt.objects.get(pk=attempt.pk).ended_at == tw.now, k
            assert index.cap_used[tw.alpha.pk] == 2 * HOUR, f"ended after statement {k}"
            alpha = next(b for b in snap.budgets if b.key == str(tw.alpha.pk))
            assert alpha.capped, k
            fair = windowed_usage(snap.usage, snap.attempts, snap.now, snap.window)
            assert fair.get(str(tw.alpha.pk), 0) == 2 * HOUR, f"fair share, ended after statement {k}"
            transaction.set_rollback(True)
        k += 1
    assert k >= 5  # hosts/GPUs, budgets, caps, open attempts, their GPUs, usage...


def test_the_tick_starts_unfunded_when_the_budgets_last_attempt_ends_during_its_snapshot(tw, pushed, monkeypatch):
    tw.host("h1", 2)
    real = tick.load_snapshot
    seen: list[int] = [0]
    k = 0
    while True:
        with transaction.atomic():
            attempt = _setup(tw)
            nxt = tw.workload(budget=tw.alpha, gpus=1, min_runtime=HOUR)

            def hooked(*args: Any, _k: int = k, _attempt: Attempt = attempt, **kwargs: Any) -> Any:
                with _end_after_query(_k, _ender(tw, _attempt)) as counted:
                    out = real(*args, **kwargs)
                seen[0] = counted[0]
                return out

            monkeypatch.setattr(tick, "load_snapshot", hooked)
            assert tick.run_tick(tw.cluster.pk, now=tw.now + timedelta(seconds=1)).status == "ran"
            if seen[0] <= k:
                transaction.set_rollback(True)
                break
            started = nxt.attempts.get()
            assert started.unfunded and not started.allocated, f"funded, the end after statement {k}"
            assert Workload.objects.get(pk=nxt.pk).state == Workload.State.STARTING
            transaction.set_rollback(True)
        k += 1
    assert k >= 5
