"""Submissions share-lock their budget (docs/locking.md, "Budgets"): on PostgreSQL two submissions
into one budget do not wait for each other; an archive waits for a submission, a submission for an
archive. Real threads, each with its own connection; skipped on SQLite (one writer, no row locks).

Before: the submission took ``SELECT … FOR UPDATE`` on the budget row, so every submission into a
budget waited for the one before it to commit (the first test failed: the second submission stayed
blocked while the first transaction was open).
"""

from __future__ import annotations

import pytest
from django.db import connection

from budgets.models import Budget
from budgets.services import do_archive_budget
from scheduler.models import Workload
from scheduler.services import SubmissionError, do_submit_workload
from tests.pg_locks import BOUND_S, Held, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_two_submissions_into_one_budget_do_not_wait_for_each_other(researcher, teammate, submit_kwargs) -> None:
    first = Held(lambda: do_submit_workload(researcher, **submit_kwargs(name="first")))
    assert first.done.wait(BOUND_S), first.error
    # While the first submission's transaction is open (its budget lock held), a second one into
    # the same budget commits: it does not wait for the first. Another user's: one user's
    # submissions wait for each other while a per-user limit is set (lim42, test_submit_limit_pg).
    second = Held(lambda: do_submit_workload(teammate, **submit_kwargs(name="second")))
    try:
        assert second.done.wait(BOUND_S), "the second submission waited for the first one's budget lock"
        assert not first.ended.is_set()
    finally:
        second.release()
        first.release()
    assert first.error is None and second.error is None, (first.error, second.error)
    assert sorted(Workload.objects.values_list("name", flat=True)) == ["first", "second"]


def test_an_archive_waits_for_a_submission_in_flight(researcher, submit_kwargs, org_tree) -> None:
    olmo = org_tree["nlp/olmo"]
    submission = Held(lambda: do_submit_workload(researcher, **submit_kwargs(name="in-flight")))
    assert submission.done.wait(BOUND_S), submission.error
    archive = Held(lambda: do_archive_budget(Budget.objects.get(pk=org_tree["nlp"].pk)))
    try:
        # The archive of an ancestor (its subtree, olmo included) waits for the submission's lock.
        assert until(lambda: waits_on_a_lock(archive.backend_pid) or archive.ended.is_set())
        assert not archive.done.is_set(), "the archive did not wait for the submission in flight"
    finally:
        submission.release()
    assert archive.done.wait(BOUND_S), archive.error
    archive.release()
    assert submission.error is None and archive.error is None, (submission.error, archive.error)
    olmo.refresh_from_db()
    assert olmo.archived_at is not None
    assert list(Workload.objects.values_list("name", flat=True)) == ["in-flight"]


def test_a_submission_waits_for_an_archive_in_flight_and_is_refused(researcher, submit_kwargs, org_tree) -> None:
    archive = Held(lambda: do_archive_budget(Budget.objects.get(pk=org_tree["nlp/olmo"].pk)))
    assert archive.done.wait(BOUND_S), archive.error
    refused: list[str] = []

    def submit() -> None:
        try:
            do_submit_workload(researcher, **submit_kwargs(name="late"))
        except SubmissionError as exc:
            refused.append(exc.code)

    submission = Held(submit)
    try:
        assert until(lambda: waits_on_a_lock(submission.backend_pid) or submission.ended.is_set())
        assert not submission.done.is_set(), "the submission did not wait for the archive in flight"
    finally:
        archive.release()
    assert submission.done.wait(BOUND_S), submission.error
    submission.release()
    assert refused == ["budget_archived"]
    assert not Workload.objects.exists()
