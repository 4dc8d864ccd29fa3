"""brk43 on PostgreSQL: a page read in one snapshot (num42's ``one_read``, REPEATABLE READ) must not
leave the process's memos (``config.memo.VersionedMemo``) holding rows older than their version."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.utils import timezone

from budgets.models import Budget
from config.one_read import one_read
from scheduler.models import Host
from scheduler.snapshot import load_snapshot

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="REPEATABLE READ snapshots need PostgreSQL"),
]


def _in_another_connection(job: object) -> None:
    def run() -> None:
        try:
            job()  # type: ignore[operator]
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(20)


def test_a_snapshot_page_does_not_keep_hardware_older_than_its_version(cluster, hosts):
    """The budgets page (and the dashboard) read the database in one REPEATABLE READ transaction
    whose snapshot is its first query's, and load each cluster's snapshot in it; the snapshot's
    hardware is kept per process under the hardware version it reads *then*. A host removed between
    the page's first query and that read: the page took the version the removal left (new) and the
    hosts of its older snapshot (the removed one included), and the process kept them under it, so
    every later snapshot of that process (quotes, pages) still had the removed host's GPUs, until the
    next hardware change."""
    gone = hosts["a100-2"]
    load_snapshot(cluster, timezone.now())  # the process keeps the hardware (a page, a quote before)
    with one_read():
        Budget.objects.count()  # the page's first query: its snapshot
        _in_another_connection(lambda: Host.objects.filter(pk=gone.pk).update(removed_at=timezone.now()))
        _snap, index = load_snapshot(cluster, timezone.now())
        assert gone.name in index.host_id_by_name  # one read: the page's instant, before the removal
    _snap, index = load_snapshot(cluster, timezone.now())
    assert gone.name not in index.host_id_by_name, "the removed host was kept by the process"


def test_concurrent_arrays_of_one_user_never_pass_the_limit_together(settings, researcher, org_tree, submit_kwargs):
    """lim42's limit under a burst: eight threads of one user, each an array of 3 into one of two
    budgets, against a limit of 10: exactly three arrays land (9), every other is refused 429."""
    from django.db import connections as conns

    from accounts.services import do_add_membership
    from scheduler import notify
    from scheduler.models import Workload
    from scheduler.services import SUBMIT_LIMIT_CODE, SubmissionError, do_submit_workload

    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": 10}
    do_add_membership(researcher, org_tree["nlp/tulu"])
    budgets = [org_tree["nlp/olmo"], org_tree["nlp/tulu"]]
    outcomes: list[str] = []
    barrier = threading.Barrier(8)
    original = notify.request_tick_on_commit
    notify.request_tick_on_commit = lambda cluster_id: None  # type: ignore[assignment]

    def submit(i: int) -> None:
        try:
            barrier.wait(20)
            do_submit_workload(researcher, **submit_kwargs(name=f"a{i}", budget=budgets[i % 2], array="0-2"))
            outcomes.append("ok")
        except SubmissionError as exc:
            outcomes.append(exc.code)
        finally:
            conns.close_all()

    try:
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        notify.request_tick_on_commit = original  # type: ignore[assignment]
    assert sorted(outcomes) == ["ok"] * 3 + [SUBMIT_LIMIT_CODE] * 5
    assert Workload.objects.filter(owner=researcher).count() == 9
