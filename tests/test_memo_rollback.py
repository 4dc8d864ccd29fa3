"""fin43: a memo value the writing thread loaded inside a transaction that then rolled back is
never served afterwards (``config.memo.VersionedMemo._own_write``), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import transaction

from config.memo import VersionedMemo
from config.one_read import one_read
from scheduler.models import Cluster

pytestmark = pytest.mark.django_db(transaction=True)


class _Undo(Exception):
    pass


def _name(pk: int) -> str:
    return Cluster.objects.get(pk=pk).description


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("reader", ["atomic", "one_read"])
def test_a_rolled_back_write_is_never_served(nested, reader):
    memo = VersionedMemo("fairway:test:fin43-rollback")
    cluster = Cluster.objects.create(name="fin43", description="committed")
    with pytest.raises(_Undo), transaction.atomic():
        if nested:
            with transaction.atomic():  # written in a savepoint that is released
                Cluster.objects.filter(pk=cluster.pk).update(description="rolled back")
                memo.forget()
        else:
            Cluster.objects.filter(pk=cluster.pk).update(description="rolled back")
            memo.forget()
        assert memo.get("d", lambda: _name(cluster.pk)) == "rolled back"  # its own write
        raise _Undo
    with one_read() if reader == "one_read" else transaction.atomic():
        assert memo.get("d", lambda: _name(cluster.pk)) == "committed"
    assert memo.get("d", lambda: _name(cluster.pk)) == "committed"


def test_a_committed_write_is_served_after_its_commit():
    memo = VersionedMemo("fairway:test:fin43-commit")
    cluster = Cluster.objects.create(name="fin43c", description="old")
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(description="new")
        memo.forget()
        assert memo.get("d", lambda: _name(cluster.pk)) == "new"
    with transaction.atomic():
        assert memo.get("d", lambda: _name(cluster.pk)) == "new"
