"""left40: a budget moved (re-parented in the admin) while a submission into it is in flight.

Membership is inherited down the tree (DESIGN.md §3.7): a member of ``nlp`` may submit into
``nlp/olmo``. The submission checked the owner's membership against the budget's ancestors as the
process's budget tree had them; an admin's move of the budget (or of an ancestor) committed since
then let a member of the old parent submit into a budget they no longer may. The submission's lock
statement now locks the budget's chain of ancestors and refuses when the chain it checked moved
(``scheduler.services._share_lock_budget``, docs/locking.md "Budgets").

The move committed before the submission's transaction runs on both backends (a stale tree passed
in, as the process's shared tree is between its refreshes); the move in flight, holding its row
lock while the submission waits for it, needs PostgreSQL's row locks (real threads, each with its
own connection)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from accounts.models import Membership
from accounts.services import do_add_membership
from budgets.models import Budget
from budgets.services import load_tree
from scheduler.models import Workload
from scheduler.services import SubmissionError, do_submit_workload
from tests.conftest import _user
from tests.services.test_share_audit import _change_form, _client

pytestmark = pytest.mark.django_db(transaction=True)


def _move(admin: Any, budget: Budget, parent: Budget) -> Any:
    """The admin's move of ``budget`` under ``parent`` (its change form, the only move there is)."""
    url = reverse("admin:budgets_budget_change", args=[budget.pk])
    return _client(admin).post(url, _change_form(budget, parent=parent.pk))


def _setup(org_tree: dict[str, Budget], admin: Any, case: str) -> tuple[Any, Budget, Budget]:
    """(owner, moved budget, its new parent) for ``case``: ``leaf`` (olmo, whose owner is a member of
    nlp, moved under vision) or ``ancestor`` (nlp, under vision since before, moved back under org:
    the owner, a member of vision, submits into nlp/olmo)."""
    owner = _user("mover")
    if case == "leaf":
        do_add_membership(owner, org_tree["nlp"])
        return owner, org_tree["nlp/olmo"], org_tree["vision"]
    assert _move(admin, org_tree["nlp"], org_tree["vision"]).status_code == 302
    do_add_membership(owner, org_tree["vision"])
    return owner, Budget.objects.get(pk=org_tree["nlp"].pk), org_tree["org"]


@pytest.mark.parametrize("case", ["leaf", "ancestor"])
def test_a_move_committed_since_the_tree_was_read_refuses_a_member_of_the_old_parent(
    admin, org_tree, submit_kwargs, case
) -> None:
    owner, moved, new_parent = _setup(org_tree, admin, case)
    tree = load_tree()  # the tree the request read (the process's shared one), before the move
    assert _move(admin, moved, new_parent).status_code == 302
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(owner, tree=tree, **submit_kwargs(gpu_count=1))
    assert refused.value.problems[0].code == "not_a_member"
    assert not Workload.objects.exists()


def test_a_move_that_keeps_the_membership_still_submits(admin, researcher, org_tree, submit_kwargs) -> None:
    """The researcher is a member of olmo itself: the move re-reads the chain and lets it in."""
    tree = load_tree()
    assert _move(admin, org_tree["nlp/olmo"], org_tree["vision"]).status_code == 302
    workload = do_submit_workload(researcher, tree=tree, **submit_kwargs(gpu_count=1))
    assert workload.budget_id == org_tree["nlp/olmo"].pk
    assert Workload.objects.count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL's row locks")
@pytest.mark.parametrize("case", ["leaf", "ancestor"])
def test_a_submission_waits_for_a_move_in_flight_and_is_refused(admin, org_tree, submit_kwargs, case) -> None:
    """The move's transaction open (the budget's row updated, not committed) when the submission
    takes its locks: the submission waits for it, then sees the budget's new place and refuses a
    member of the old parent. Before, it waited for the leaf's row and then admitted the workload by
    the ancestors it had read before the move."""
    from tests.pg_locks import BOUND_S, Held, Waiting, until, waits_on_a_lock

    owner, moved, new_parent = _setup(org_tree, admin, case)
    tree = load_tree()
    move = Held(lambda: _move(admin, moved, new_parent))
    assert move.done.wait(BOUND_S), move.error
    submission = Waiting(lambda: do_submit_workload(owner, tree=tree, **submit_kwargs(gpu_count=1)))
    try:
        waiting = lambda: submission.pid is not None and waits_on_a_lock(submission.pid)  # noqa: E731
        assert until(lambda: waiting() or submission.ended.is_set())
        assert not submission.ended.is_set(), f"it did not wait for the move in flight: {submission.error!r}"
    finally:
        move.release()
    assert submission.ended.wait(BOUND_S)
    assert move.error is None, move.error
    assert Budget.objects.get(pk=moved.pk).parent_id == new_parent.pk
    assert isinstance(submission.error, SubmissionError), submission.error
    assert submission.error.problems[0].code == "not_a_member"
    assert not Workload.objects.exists()
    assert Membership.objects.filter(user=owner).exists()  # refused by the tree, not by a removal


def test_a_budget_moved_again_at_every_try_is_refused_clearly(monkeypatch, researcher, org_tree, submit_kwargs) -> None:
    """Each retry needs another move committed between reading the chain and locking it; should moves
    keep coming (``MOVE_RETRIES``), the submission is refused ``budget_moved``, naming the budget,
    and nothing is written."""
    from scheduler import services

    real = services._lock_chain
    calls: list[list[int]] = []

    def always_moved(pk: int, chain: list[int], user_id: int | None, serialize: bool = False) -> Any:
        calls.append(chain)
        parents, *rest = real(pk, chain, user_id, serialize)
        return {**parents, pk: -1}, *rest  # a parent the chain was not read with

    monkeypatch.setattr(services, "_lock_chain", always_moved)
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    problem = refused.value.problems[0]
    assert problem.code == "budget_moved" and "nlp/olmo" in problem.message and "submit again" in problem.message
    assert len(calls) == services.MOVE_RETRIES
    assert not Workload.objects.exists()
