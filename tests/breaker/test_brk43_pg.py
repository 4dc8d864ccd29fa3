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
