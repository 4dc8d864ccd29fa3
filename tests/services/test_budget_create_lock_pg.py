"""Creating a child budget share-locks its parent (docs/locking.md, "Budgets"): on PostgreSQL two
creations under one parent do not wait for each other; one of the same name as a creation in
flight waits for it and is refused (``duplicate_name``, not a database error); a creation and an
archive of the parent wait for each other, and an archive never leaves a child made meanwhile
live under an archived parent. Real threads, each with its own connection (the ``Held`` of
test_budget_share_lock_pg.py); skipped on SQLite.

Before: the creation took ``SELECT … FOR UPDATE`` of the parent, so creations under one parent
waited for each other's commit (the first test failed); the archive read the subtree before
locking it, so a child committed while it waited stayed live (the last test failed).
"""

from __future__ import annotations

import pytest
from django.db import connection

from budgets.models import Budget
from budgets.services import BudgetError, do_archive_budget, do_create_budget
from tests.pg_locks import BOUND_S, Held, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
]


def _create(name: str, parent_key: str, org_tree: dict[str, Budget], refused: list[str]) -> Held:
    def job() -> None:
        try:
            do_create_budget(name=name, parent=Budget.objects.get(pk=org_tree[parent_key].pk))
        except BudgetError as exc:
            refused.append(exc.code)

    return Held(job)


def test_two_creations_under_one_parent_do_not_wait_for_each_other(org_tree) -> None:
    refused: list[str] = []
    first = _create("first", "nlp", org_tree, refused)
    assert first.done.wait(BOUND_S), first.error
    # While the first creation's transaction is open (its lock on nlp held), a second child of
    # nlp is created and committed: it does not wait for the first.
    second = _create("second", "nlp", org_tree, refused)
    try:
        assert second.done.wait(BOUND_S), "the second creation waited for the first one's parent lock"
        assert not first.ended.is_set()
    finally:
        second.release()
        first.release()
    assert (first.error, second.error, refused) == (None, None, [])
    names = Budget.objects.filter(parent=org_tree["nlp"]).values_list("name", flat=True)
    assert {"first", "second"} <= set(names)


def test_a_creation_of_the_same_name_waits_and_is_refused_as_a_duplicate(org_tree) -> None:
    refused: list[str] = []
    first = _create("twin", "nlp", org_tree, refused)
    assert first.done.wait(BOUND_S), first.error
    second = _create("twin", "nlp", org_tree, refused)
    try:
        # It waits on the live-name unique index for the first one's outcome.
        assert until(lambda: waits_on_a_lock(second.backend_pid) or second.ended.is_set())
        assert not second.done.is_set(), "the second creation did not wait for the first one's insert"
    finally:
        first.release()
    assert second.done.wait(BOUND_S), second.error
    second.release()
    assert (first.error, second.error, refused) == (None, None, ["duplicate_name"])
    assert Budget.objects.filter(parent=org_tree["nlp"], name="twin").count() == 1


def test_a_creation_waits_for_an_archive_of_its_parent_and_is_refused(org_tree) -> None:
    archive = Held(lambda: do_archive_budget(Budget.objects.get(pk=org_tree["nlp"].pk)))
    assert archive.done.wait(BOUND_S), archive.error
    refused: list[str] = []
    creation = _create("late", "nlp/olmo", org_tree, refused)
    try:
        assert until(lambda: waits_on_a_lock(creation.backend_pid) or creation.ended.is_set())
        assert not creation.done.is_set(), "the creation did not wait for the archive in flight"
    finally:
        archive.release()
    assert creation.done.wait(BOUND_S), creation.error
    creation.release()
    assert (archive.error, creation.error, refused) == (None, None, ["budget_archived"])
    assert not Budget.objects.filter(name="late").exists()


def test_an_archive_waits_for_a_creation_in_flight_and_archives_the_new_child(org_tree) -> None:
    refused: list[str] = []
    creation = _create("fresh", "nlp/olmo", org_tree, refused)
    assert creation.done.wait(BOUND_S), creation.error
    archive = Held(lambda: do_archive_budget(Budget.objects.get(pk=org_tree["nlp"].pk)))
    try:
        assert until(lambda: waits_on_a_lock(archive.backend_pid) or archive.ended.is_set())
        assert not archive.done.is_set(), "the archive did not wait for the creation in flight"
    finally:
        creation.release()
    assert archive.done.wait(BOUND_S), archive.error
    archive.release()
    assert (creation.error, archive.error, refused) == (None, None, [])
    fresh = Budget.objects.get(name="fresh")
    assert fresh.archived_at is not None, "a child created while the archive waited stayed live"


@pytest.mark.parametrize("second_name", ["org", "other-org"])
def test_a_second_root_created_concurrently_waits_and_is_refused(second_name) -> None:
    """Two creations of a root in flight at once: the one-root index (``budget_one_root``) makes
    the second insert wait for the first one's outcome, then it is answered ``second_root``.
    Before: a root's creation locked nothing and no index covered roots (NULL parents are
    distinct), so both committed and the tree had two roots (every tick failed on it)."""
    refused: list[str] = []

    def root(name: str) -> Held:
        def job() -> None:
            try:
                do_create_budget(name=name, parent=None)
            except BudgetError as exc:
                refused.append(exc.code)

        return Held(job)

    first = root("org")
    assert first.done.wait(BOUND_S), first.error
    second = root(second_name)
    try:
        assert until(lambda: waits_on_a_lock(second.backend_pid) or second.ended.is_set())
        assert not second.done.is_set(), "the second root's creation did not wait for the first one's insert"
    finally:
        first.release()
    assert second.done.wait(BOUND_S), second.error
    second.release()
    assert (first.error, second.error, refused) == (None, None, ["second_root"])
    assert list(Budget.objects.filter(parent__isnull=True).values_list("name", flat=True)) == ["org"]
