"""brk56 on PostgreSQL: the admin's delete of a temporary share the clock starts meanwhile. Real
threads, each with its own connection; skipped on SQLite (one writer, no row locks)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.sites import site
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import RequestFactory
from django.utils import timezone

from budgets.models import Budget, ShareBoost
from budgets.services import apply_due_boosts, do_schedule_boost
from tests.pg_locks import BOUND_S, Held, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_a_boost_the_clock_starts_while_its_delete_waits_is_not_deleted(admin, org_tree):
    """The delete page checked the boost not started; the clock's start held the budget's and the
    boost's locks; the delete (a plain DELETE) waited, then removed the started boost: the budget
    kept share 3 for good. The delete reads it again under the locks and refuses."""
    olmo = org_tree["nlp/olmo"]
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + timedelta(days=1))
    stale = ShareBoost.objects.get(pk=boost.pk)  # as the delete page read it: not started
    request = RequestFactory().post("/")
    request.user = admin
    model_admin = site._registry[ShareBoost]
    clock = Held(apply_due_boosts)
    assert clock.done.wait(BOUND_S), clock.error
    delete = Waiting(lambda: model_admin.delete_model(request, stale))
    assert until(lambda: waits_on_a_lock(delete.pid)), "the delete never waited for the clock's locks"
    clock.release()
    assert delete.ended.wait(BOUND_S)
    assert isinstance(delete.error, PermissionDenied), delete.error
    assert ShareBoost.objects.get(pk=boost.pk).state == "active"
    apply_due_boosts(timezone.now() + timedelta(days=1, minutes=1))
    assert Budget.objects.get(pk=olmo.pk).shares == 1  # returned at its end
