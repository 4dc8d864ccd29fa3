"""cap61 on PostgreSQL with a real concurrent commit: the exit report of a capped budget's last
open attempt commits, in another connection, after each statement of the tick's snapshot in turn
(READ COMMITTED: the later statements see it). The budget's next workload must still start
unfunded: its 2 GPU-hours are counted once whichever statement the end follows (before, an end
committed between the caps' sum and the open attempts' read was in neither: it started funded).
Skipped on SQLite, where the tick's ``BEGIN IMMEDIATE`` keeps every writer out of its snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from budgets.models import Budget
from scheduler import lifecycle, tick
from scheduler.models import GPU, Attempt
from tests.pg_locks import BOUND_S, in_thread

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]

HOUR = 3600


@contextmanager
def _commit_after_query(k: int, end: Callable[[], None]) -> Iterator[list[int]]:
    """After the ``k``-th statement (from 0) of this connection, run ``end`` in another thread
    (its own connection, committed) and wait for it; yields the count of statements seen."""
    seen = [0]

    def hook(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        out = execute(sql, params, many, context)
        if seen[0] == k:
            errors: list[BaseException] = []
            thread = in_thread(end, errors)
            thread.join(BOUND_S)
            assert not thread.is_alive() and not errors, errors
        seen[0] += 1
        return out

    with connection.execute_wrapper(hook):
        yield seen


def test_an_exit_committed_during_the_ticks_snapshot_still_caps_the_budget(tw, pushed, monkeypatch):
    host = tw.host("h1", 2)
    gpu0 = list(GPU.objects.filter(host=host).order_by("index")[:1])
    real = tick.load_snapshot
    seen = [0]
    k = 0
    while True:
        budget = Budget.objects.create(
            name=f"vision{k}",
            parent=tw.org,
            shares=1,
            cap_gpu_hours=Decimal("1"),
            cap_period_days=1,
            on_cap=Budget.OnCap.DOWNGRADE,
        )
        last = tw.attempt(tw.workload(budget=budget, gpus=1, min_runtime=HOUR), gpu0, started_ago=2 * HOUR)
        nxt = tw.workload(budget=budget, gpus=1, min_runtime=HOUR)

        def end(_last: Attempt = last) -> None:
            assert lifecycle.attempt_exited(host, _last.pk, 0, 0.0, now=tw.now)

        def hooked(*args: Any, _k: int = k, _end: Callable[[], None] = end, **kwargs: Any) -> Any:
            with _commit_after_query(_k, _end) as counted:
                out = real(*args, **kwargs)
            seen[0] = counted[0]
            return out

        monkeypatch.setattr(tick, "load_snapshot", hooked)
        assert tick.run_tick(tw.cluster.pk, now=tw.now + timedelta(seconds=1)).status == "ran"
        if seen[0] <= k:  # every position was tried
            break
        assert Attempt.objects.get(pk=last.pk).ended_at == tw.now
        started = nxt.attempts.get()
        assert started.unfunded and not started.allocated, f"started funded, the exit after statement {k}"
        # free the GPUs for the next position (unfunded: the next budget's cap never counts it)
        assert lifecycle.attempt_exited(started.host, started.pk, 0, 0.0, now=tw.now + timedelta(seconds=2))
        k += 1
    assert k >= 5
