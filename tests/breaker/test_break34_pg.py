"""break34: races on PostgreSQL (brk34). Real threads, each with its own connection; skipped on
SQLite (one writer at a time: the races cannot happen there)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from budgets.admin import EDITABLE_FIELDS, BudgetAdminForm
from budgets.models import Budget
from budgets.services import do_archive_budget, load_tree
from tests.pg_locks import BOUND_S, Held, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def _held_then_waiting(first: Any, second: Any) -> tuple[Held, Waiting]:
    """Run ``first`` in a transaction held open (its locks kept), then ``second``, which must wait
    on a lock of it (or end at once); release ``first`` and return both once ``second`` ended."""
    held = Held(first)
    assert held.done.wait(BOUND_S), held.error
    waiting = Waiting(second)
    try:
        assert until(lambda: (waiting.pid is not None and waits_on_a_lock(waiting.pid)) or waiting.ended.is_set())
    finally:
        held.release()
    assert waiting.ended.wait(BOUND_S)
    return held, waiting


def _move(pk: int, parent_pk: int) -> list[str]:
    """What the admin's change page does with a new parent (its form, in its transaction): the
    form's errors, or [] once saved."""
    with transaction.atomic():  # the admin's change view is one transaction
        return _move_in_transaction(pk, parent_pk)


def _move_in_transaction(pk: int, parent_pk: int) -> list[str]:
    budget = Budget.objects.get(pk=pk)
    data: dict[str, Any] = {f: getattr(budget, f) for f in EDITABLE_FIELDS if f != "parent"}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    data["parent"] = parent_pk
    form = BudgetAdminForm(data, instance=budget)
    if not form.is_valid():
        return [str(m) for messages in form.errors.values() for m in messages]
    form.save()
    return []


def _has_cycle() -> bool:
    tree = load_tree()
    for start in tree:
        seen, at = set(), tree[start]
        while at.parent_id is not None:
            if at.pk in seen:
                return True
            seen.add(at.pk)
            at = tree[at.parent_id]
    return False


def test_two_moves_at_once_that_together_make_a_cycle_refuse_the_second(org_tree) -> None:
    """The admin moved nlp under vision/sam while another admin moved vision under nlp/olmo: each
    change page checked "not under its own sub-budgets" against the tree before the other committed,
    both saved, and the tree had a cycle (nlp → sam → vision → olmo → nlp): every tick of every
    cluster then failed ("the share tree has a cycle")."""
    first, second = _held_then_waiting(
        lambda: _move(org_tree["nlp"].pk, org_tree["vision/sam"].pk),
        lambda: _move(org_tree["vision"].pk, org_tree["nlp/olmo"].pk),
    )
    assert (first.error, second.error) == (None, None)
    assert second.result == ["A budget cannot be under itself or one of its sub-budgets."]
    assert not _has_cycle()
    assert Budget.objects.get(pk=org_tree["vision"].pk).parent_id == org_tree["org"].pk


def test_a_move_under_a_budget_being_archived_waits_and_is_refused(org_tree) -> None:
    """The admin moved nlp/olmo under vision while vision was being archived: the change page read
    vision live, its save did not wait for the archive's locks (they are vision's subtree's rows),
    and olmo stayed live under an archived parent (creating a child there is refused)."""
    archive, move = _held_then_waiting(
        lambda: do_archive_budget(Budget.objects.get(pk=org_tree["vision"].pk)),
        lambda: _move(org_tree["nlp/olmo"].pk, org_tree["vision"].pk),
    )
    assert (archive.error, move.error) == (None, None)
    assert move.result == ["Budget vision is archived."]
    olmo = Budget.objects.get(pk=org_tree["nlp/olmo"].pk)
    assert (olmo.parent_id, olmo.archived_at) == (org_tree["nlp"].pk, None)


def _edit(pk: int, **changes: Any) -> list[str]:
    """The admin's change page saving ``changes`` of budget ``pk`` (its form, ``save_model``, one transaction)."""
    from django.contrib import admin
    from django.test import RequestFactory

    from accounts.models import User
    from budgets.admin import BudgetAdmin

    with transaction.atomic():
        budget = Budget.objects.get(pk=pk)
        data: dict[str, Any] = {f: getattr(budget, f) for f in EDITABLE_FIELDS}
        data = {k: ("" if v is None else v) for k, v in data.items()}
        data["parent"] = budget.parent_id
        data.update(changes)
        form = BudgetAdminForm(data, instance=budget)
        if not form.is_valid():
            return [str(m) for messages in form.errors.values() for m in messages]
        request = RequestFactory().post("/")
        request.user = User.objects.get(username="admin")
        BudgetAdmin(Budget, admin.site).save_model(request, form.save(commit=False), form, change=True)
        return []


def test_an_edit_saved_while_its_budget_is_archived_keeps_the_archive(org_tree, admin) -> None:
    """The admin saved vision/sam's description while another admin archived sam: the change page
    had read sam live, waited for the archive's lock, then wrote every column back, archived_at
    (NULL) included: sam was live again, submissions to it accepted, its history saying archived."""
    sam = org_tree["vision/sam"]
    archive, edit = _held_then_waiting(
        lambda: do_archive_budget(Budget.objects.get(pk=sam.pk)),
        lambda: _edit(sam.pk, description="GPU time of the SAM project"),
    )
    assert (archive.error, edit.error, edit.result) == (None, None, [])
    sam.refresh_from_db()
    assert sam.archived_at is not None
    assert sam.description == "GPU time of the SAM project"


def _edit_host_labels(pk: int, labels: str) -> list[str]:
    """The host admin's change page saving new ``labels`` (its form, ``save_model``, one transaction)."""
    from django.contrib import admin
    from django.test import RequestFactory

    from accounts.models import User
    from scheduler.admin import HostAdmin
    from scheduler.models import Host

    with transaction.atomic():
        host = Host.objects.get(pk=pk)
        request = RequestFactory().post("/")
        request.user = User.objects.get(username="admin")
        model_admin = HostAdmin(Host, admin.site)
        form = model_admin.get_form(request, host, change=True)({"labels": labels}, instance=host)
        if not form.is_valid():
            return [str(m) for messages in form.errors.values() for m in messages]
        model_admin.save_model(request, form.save(commit=False), form, change=True)
        return []


def test_a_host_edit_saved_while_its_token_is_revoked_keeps_the_revocation(hosts, admin) -> None:
    """The admin saved a host's labels while another admin revoked its token: the change page had
    read the row before, waited for the revocation's lock, then wrote every column back, the old
    ``token_hash`` included: the revoked token connected again."""
    from scheduler.models import Host
    from scheduler.services import do_revoke_host_token

    host = hosts["h100-1"]
    revoke, edit = _held_then_waiting(
        lambda: do_revoke_host_token(None, Host.objects.get(pk=host.pk)),
        lambda: _edit_host_labels(host.pk, '{"rack": "r9", "fabric": "r9"}'),
    )
    assert (revoke.error, edit.error, edit.result) == (None, None, [])
    host.refresh_from_db()
    assert host.token_hash.startswith("revoked:")
    assert host.labels == {"rack": "r9", "fabric": "r9"}
