"""A temporary share is started at most once however many workers run the clock's sweep at once
(docs/standing.md, "Temporary shares"): each start or end reads the boost again under the budget's
row lock. Real threads, each with its own connection; skipped on SQLite (one writer, no row locks)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from budgets.models import Budget, ShareBoost, ShareChange
from budgets.services import apply_due_boosts, do_schedule_boost
from tests.pg_locks import BOUND_S, Held
from tests.pg_locks import waits_on_a_lock as _waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def _wait_for(condition, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_two_sweeps_at_once_start_a_boost_once(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + timedelta(days=1))
    counts: list[int] = []
    # The first sweep holds the budget's lock (its transaction open) once it applied the boost ...
    first = Held(lambda: counts.append(apply_due_boosts()))
    assert first.done.wait(BOUND_S), first.error
    # ... the second, which listed the boost as due before, waits for that lock, then reads it applied.
    second = Held(lambda: counts.append(apply_due_boosts()))
    _wait_for(lambda: _waits_on_a_lock(second.backend_pid), "the second sweep never waited for the lock")
    assert not second.done.is_set()
    first.release()
    assert second.done.wait(BOUND_S), second.error
    second.release()
    assert first.error is None and second.error is None
    assert sorted(counts) == [0, 1]
    assert Budget.objects.get(pk=olmo.pk).shares == 3
    assert ShareChange.objects.filter(budget=olmo, kind="shares").count() == 1
    assert ShareBoost.objects.get(pk=boost.pk).state == "active"


def test_end_now_racing_the_clocks_end_ends_it_once(admin, org_tree):
    """left57: the admin's End now and the sweep at its until, at once: the one that waited for the
    budget's lock reads it ended; one record back to the "then" shares."""
    from budgets.services import do_end_boost

    olmo = org_tree["nlp/olmo"]
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + timedelta(days=1))
    apply_due_boosts()
    results: list[object] = []
    first = Held(lambda: results.append(do_end_boost(admin, boost)))
    assert first.done.wait(BOUND_S), first.error
    second = Held(lambda: results.append(apply_due_boosts(timezone.now() + timedelta(days=2))))
    _wait_for(lambda: _waits_on_a_lock(second.backend_pid), "the sweep never waited for the lock")
    first.release()
    assert second.done.wait(BOUND_S), second.error
    second.release()
    assert first.error is None and second.error is None
    assert results == [True, 0]
    assert Budget.objects.get(pk=olmo.pk).shares == 1
    back = ShareChange.objects.filter(budget=olmo, kind="shares", new_shares=1)
    assert [c.note for c in back] == ["temporary share 3 ended early by admin"]
