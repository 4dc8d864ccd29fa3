"""lim42: on PostgreSQL the per-user limit (``FAIRWAY_MAX_SUBMITTED_PER_USER``) is exact under
concurrency: a user's submissions take one advisory lock each (``SUBMIT_LOCK_CLASS``, the user
id), and the count is a statement after it, so a second submission counts the first one once it
has committed. Without the lock both counted 0 and both passed a limit of 1. Real threads, each
with its own connection; skipped on SQLite (one writer at a time: nothing to race)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from scheduler.models import Workload
from scheduler.services import SUBMIT_LIMIT_CODE, SubmissionError, do_submit_workload
from tests.pg_locks import BOUND_S, Held, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def _limit(settings: Any, n: int) -> None:
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": n}


def test_a_second_submission_waits_for_the_first_and_is_refused_at_the_limit(settings, researcher, submit_kwargs):
    _limit(settings, 1)
    first = Held(lambda: do_submit_workload(researcher, **submit_kwargs(name="first")))
    assert first.done.wait(BOUND_S), first.error
    refused: list[str] = []

    def submit() -> None:
        try:
            do_submit_workload(researcher, **submit_kwargs(name="second"))
        except SubmissionError as exc:
            refused.append(exc.code)

    second = Held(submit)
    try:
        assert until(lambda: waits_on_a_lock(second.backend_pid) or second.ended.is_set())
        assert not second.done.is_set(), "the second submission counted before the first committed"
    finally:
        first.release()
    assert second.done.wait(BOUND_S), second.error
    second.release()
    assert refused == [SUBMIT_LIMIT_CODE]
    assert list(Workload.objects.values_list("name", flat=True)) == ["first"]


def test_other_users_and_no_limit_do_not_wait(settings, researcher, teammate, submit_kwargs):
    _limit(settings, 1)
    first = Held(lambda: do_submit_workload(researcher, **submit_kwargs(name="first")))
    assert first.done.wait(BOUND_S), first.error
    other = Held(lambda: do_submit_workload(teammate, **submit_kwargs(name="other")))
    try:
        assert other.done.wait(BOUND_S), "another user's submission waited for the first one's lock"
    finally:
        other.release()
        first.release()
    _limit(settings, 0)
    one = Held(lambda: do_submit_workload(researcher, **submit_kwargs(name="one")))
    assert one.done.wait(BOUND_S), one.error
    two = Held(lambda: do_submit_workload(researcher, **submit_kwargs(name="two")))
    try:
        assert two.done.wait(BOUND_S), "with no limit a user's submissions waited for each other"
    finally:
        two.release()
        one.release()
    assert sorted(Workload.objects.values_list("name", flat=True)) == ["first", "one", "other", "two"]
