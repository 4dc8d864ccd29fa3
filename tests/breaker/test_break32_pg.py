"""break32: races on PostgreSQL (brk32). Real threads, each with its own connection; skipped on
SQLite (one writer at a time: the races cannot happen there)."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler.models import GPU, Host, JoinToken
from scheduler.services import HostError, do_create_cluster, do_create_join_token, do_join_host
from tests.conftest import gpu_specs
from tests.pg_locks import BOUND_S, Held, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


@pytest.mark.parametrize("same", ["name", "gpu"])
def test_two_joins_of_one_host_at_once_refuse_the_second_clearly_and_keep_its_token(cluster, same) -> None:
    """Two ``POST /agent/join`` at once of one host name (an install script run twice, with tokens
    of two clusters; two machines named alike) or of one GPU UUID: each read "no such host" before
    the other's insert committed; the second insert then failed on the unique index, an
    IntegrityError (a 500 from the join endpoint) instead of ``host_exists`` / ``duplicate_gpu``.
    (Joins into one cluster wait for each other: the token's ``FOR UPDATE`` locks its cluster row.)"""
    _row1, first = do_create_join_token(None, cluster)
    row2, second = do_create_join_token(None, do_create_cluster("other"))
    gpus1 = gpu_specs("new-1", "A100", 2)
    gpus2 = gpus1 if same == "gpu" else gpu_specs("new-2", "A100", 2)
    name2 = "new-1" if same == "name" else "new-2"
    held = Held(lambda: do_join_host(first, "new-1", gpus1))
    assert held.done.wait(BOUND_S), held.error
    try:
        other = Waiting(lambda: do_join_host(second, name2, gpus2))
        assert until(lambda: (other.pid is not None and waits_on_a_lock(other.pid)) or other.ended.is_set())
    finally:
        held.release()
    assert other.ended.wait(BOUND_S)
    assert held.error is None, held.error
    assert isinstance(other.error, HostError), repr(other.error)
    assert other.error.code == ("host_exists" if same == "name" else "duplicate_gpu")
    assert list(Host.objects.filter(name__startswith="new-").values_list("name", flat=True)) == ["new-1"]
    assert GPU.objects.filter(host__name="new-1").count() == 2
    assert JoinToken.objects.get(pk=row2.pk).used_at is None  # the refused join spent nothing


def test_two_imports_of_one_sacct_export_at_once_write_it_once(cluster, researcher, org_tree, tmp_path) -> None:
    """``import_history sacct`` refuses a job already imported (brk30), read before its write:
    two imports of one export at once (two operators, a retried cron job) each found nothing
    imported and both wrote it: the lab's usage doubled. The import now reads and writes under
    its cluster's row lock: the second waits, then refuses every job."""
    from datetime import timedelta
    from io import StringIO

    from django.core.management import CommandError, call_command
    from django.utils import timezone

    from budgets.models import UsageEntry
    from tests.services.test_import_history import SACCT, _stamp

    now = timezone.now()
    export = tmp_path / "sacct.txt"
    export.write_text(SACCT.format(s=_stamp(now - timedelta(hours=3)), e=_stamp(now - timedelta(hours=1))))

    def run() -> None:
        call_command("import_history", "sacct", str(export), "--cluster", "default", stdout=StringIO())

    held = Held(run)
    assert held.done.wait(BOUND_S), held.error
    try:
        other = Waiting(run)
        assert until(lambda: (other.pid is not None and waits_on_a_lock(other.pid)) or other.ended.is_set())
    finally:
        held.release()
    assert other.ended.wait(BOUND_S)
    assert held.error is None, held.error
    assert isinstance(other.error, CommandError) and "already imported" in str(other.error), repr(other.error)
    assert UsageEntry.objects.count() == 3  # its two finished jobs and the one running at the export (import48b)
