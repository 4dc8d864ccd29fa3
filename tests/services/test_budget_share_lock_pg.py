"""Submissions share-lock their budget (docs/locking.md, "Budgets"): on PostgreSQL two submissions
into one budget do not wait for each other; an archive waits for a submission, a submission for an
archive. Real threads, each with its own connection; skipped on SQLite (one writer, no row locks).

Before: the submission took ``SELECT … FOR UPDATE`` on the budget row, so every submission into a
budget waited for the one before it to commit (the first test failed: the second submission stayed
blocked while the first transaction was open).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from budgets.models import Budget
from budgets.services import do_archive_budget
from scheduler import notify
from scheduler.models import Workload
from scheduler.services import SubmissionError, do_submit_workload

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
]

BOUND_S = 20.0
"""A bound on waits that end at once when the code is right (never reached then)."""


@pytest.fixture(autouse=True)
def _no_side_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "request_tick_on_commit", lambda cluster_id: None)
    monkeypatch.setattr(notify, "push_hosts_on_commit", lambda host_ids: None)


class Held:
    """``job`` run in a thread of its own (own connection) inside a transaction that stays open
    until :meth:`release`; ``done`` is set once ``job`` returned (its locks still held)."""

    def __init__(self, job: Callable[[], Any]) -> None:
        self.job = job
        self.done = threading.Event()
        self.released = threading.Event()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.backend_pid: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.backend_pid = int(cursor.fetchone()[0])
            with transaction.atomic():
                self.job()
                self.done.set()
                self.released.wait(BOUND_S)
        except BaseException as exc:  # noqa: BLE001 -- reported by the test
            self.error = exc
        finally:
            connections.close_all()
            self.ended.set()

    def release(self) -> None:
        self.released.set()
        self.thread.join(BOUND_S)


def _waits_on_a_lock(pid: int | None) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def _until(predicate: Callable[[], bool]) -> bool:
    done = threading.Event()
    for _ in range(int(BOUND_S / 0.05)):
        if predicate():
            return True
        done.wait(0.05)
    return False


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
        assert _until(lambda: _waits_on_a_lock(archive.backend_pid) or archive.ended.is_set())
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
        assert _until(lambda: _waits_on_a_lock(submission.backend_pid) or submission.ended.is_set())
        assert not submission.done.is_set(), "the submission did not wait for the archive in flight"
    finally:
        archive.release()
    assert submission.done.wait(BOUND_S), submission.error
    submission.release()
    assert refused == ["budget_archived"]
    assert not Workload.objects.exists()
