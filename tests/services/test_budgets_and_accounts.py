"""Budget tree services and membership rules."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from accounts.services import accessible_budget_ids, create_api_token, is_manager, is_member
from budgets.services import (
    BudgetError,
    budget_paths,
    do_archive_budget,
    do_create_budget,
    normalized_shares,
    resolve_budget,
)


def test_paths_resolve_with_or_without_the_root_name(org_tree):
    assert resolve_budget("nlp/olmo") == org_tree["nlp/olmo"]
    assert resolve_budget("org/nlp/olmo") == org_tree["nlp/olmo"]
    assert resolve_budget("/nlp/olmo/") == org_tree["nlp/olmo"]
    assert resolve_budget("org") == org_tree["org"]
    assert resolve_budget(str(org_tree["vision"].pk)) == org_tree["vision"]
    assert resolve_budget("nlp/nothing") is None
    assert budget_paths()[org_tree["vision/sam"].pk] == "vision/sam"


def test_live_budget_wins_over_archived_one_of_the_same_name(org_tree):
    do_archive_budget(org_tree["nlp/olmo"])
    fresh = do_create_budget(name="olmo", parent=org_tree["nlp"])
    assert resolve_budget("nlp/olmo") == fresh


def test_normalized_shares_follow_the_tree(org_tree):
    shares = normalized_shares()
    assert shares[org_tree["org"].pk] == 1
    assert shares[org_tree["nlp"].pk] == Fraction(2, 3)
    assert shares[org_tree["nlp/olmo"].pk] == Fraction(1, 3)
    assert shares[org_tree["vision/sam"].pk] == Fraction(1, 3)


def test_archived_budget_without_work_drops_out_of_normalization(org_tree):
    do_archive_budget(org_tree["nlp/tulu"])
    shares = normalized_shares()
    assert shares[org_tree["nlp/olmo"].pk] == Fraction(2, 3)
    # Its own share is the policy's: 0, entitled to nothing (left40: it was computed as if it were
    # still counted, 1/3, beside olmo's 2/3: more than nlp's whole share).
    assert shares[org_tree["nlp/tulu"].pk] == 0


def test_archiving_archives_the_subtree(org_tree):
    do_archive_budget(org_tree["nlp"])
    org_tree["nlp/olmo"].refresh_from_db()
    assert org_tree["nlp/olmo"].archived


@pytest.mark.parametrize(
    ("name", "shares", "code"),
    [("", 1, "invalid_name"), ("a/b", 1, "invalid_name"), ("x", 0, "invalid_shares"), ("olmo", 1, "duplicate_name")],
)
def test_invalid_budget_is_refused(org_tree, name, shares, code):
    with pytest.raises(BudgetError) as info:
        do_create_budget(name=name, parent=org_tree["nlp"], shares=shares)
    assert info.value.code == code


def test_membership_reaches_every_budget_below(manager, researcher, org_tree):
    assert is_member(manager, org_tree["nlp/tulu"])
    assert is_manager(manager, org_tree["nlp/olmo"])
    assert not is_member(manager, org_tree["vision/sam"])
    assert not is_manager(researcher, org_tree["nlp/olmo"])
    assert accessible_budget_ids(researcher) == {org_tree["nlp/olmo"].pk}


def test_api_tokens_are_stored_hashed(researcher):
    from knox.models import AuthToken

    row, token = create_api_token(researcher)
    stored = list(AuthToken.objects.values_list("digest", "token_key"))
    assert all(token not in (digest, key) for digest, key in stored)
    assert len(row.digest) == 128  # SHA-512 hex


def test_a_second_root_is_refused_as_the_admin_refuses_it(org_tree):
    """tryout: the admin refused a second root (every tick failed on "the share tree has 2 roots")
    but ``do_create_budget`` made one. One rule (``placement_problem``), called by both."""
    from budgets.models import Budget

    before = Budget.objects.count()
    with pytest.raises(BudgetError) as info:
        do_create_budget(name="other-org", parent=None)
    assert (info.value.code, info.value.field) == ("second_root", "parent")
    assert info.value.message.startswith("The organisation has one root budget, org: choose a parent under it")
    assert Budget.objects.count() == before


def test_a_budget_with_unfinished_work_takes_no_sub_budget(researcher, submit_kwargs, org_tree):
    """Workloads are submitted to leaves (DESIGN.md §3.7). Before, a child could be created under a
    leaf holding pending work: the leaf became a parent whose own queue the dispatch served ahead of
    its children's (``Dispatcher.next`` stops at the first budget with a queue). Now the creation,
    and the admin's move of a budget under it, are refused until that work ends; finished work
    does not count, and a sub-budget already there is edited as before."""
    from django.core.exceptions import ValidationError

    from budgets.models import Budget
    from scheduler.models import Workload
    from scheduler.services import do_submit_workload

    leaf = org_tree["nlp/olmo"]
    workload = do_submit_workload(researcher, **submit_kwargs())
    assert workload.budget_id == leaf.pk
    with pytest.raises(BudgetError) as refused:
        do_create_budget(name="x", parent=leaf)
    assert (refused.value.code, refused.value.field) == ("parent_has_work", "parent")
    assert "nlp/olmo has 1 unfinished workload:" in refused.value.message
    assert not Budget.objects.filter(parent=leaf).exists()

    moved = org_tree["vision/sam"]
    moved.parent = leaf
    with pytest.raises(ValidationError) as invalid:
        moved.full_clean()
    assert "parent" in invalid.value.message_dict

    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.CANCELED)
    child = do_create_budget(name="x", parent=leaf)
    assert child.parent_id == leaf.pk
    moved.full_clean()  # no unfinished work there now
    # A tree made before the rule (a parent with work of its own): its sub-budgets are still edited.
    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.PENDING)
    child.shares = 3
    child.full_clean()


@pytest.mark.parametrize("backend_name", ["memory", "db"])
def test_a_scenario_adding_a_budget_under_busy_work_is_refused_by_both_backends(tmp_path, backend_name, request):
    """The scenario's ``create_budget`` under a leaf with unfinished work: the db backend's
    ``do_create_budget`` refuses it (``parent_has_work``), the memory backend the same way; both a
    scenario error naming the step, never a traceback or two different runs."""
    from scheduler.scenarios.runner import MemoryBackend, run_scenario
    from scheduler.scenarios.spec import ScenarioError

    path = tmp_path / "busy.yaml"
    path.write_text(
        "name: x\nhosts: [{name: h1, gpus: 2}]\nbudgets: [{path: A}]\n"
        "pending: [{id: P, budget: A, gpus: 1, min_runtime: 1h}]\n"
        "steps: [{tick: {}}, {create_budget: {path: A/a1}}]\n"
    )
    if backend_name == "db":
        request.getfixturevalue("transactional_db")
        from scheduler.scenarios.db_backend import DbBackend

        backend = DbBackend(scratch_db=False)
    else:
        backend = MemoryBackend()
    try:
        with pytest.raises(ScenarioError) as info:
            run_scenario(str(path), backend)
    finally:
        if backend_name == "db":
            backend.close()
    assert "steps[1].create_budget" in str(info.value) and "unfinished workload" in str(info.value)


def _run_on(backend_name: str, path: Any) -> str:
    """Run scenario ``path`` on the memory or the db backend: its ScenarioError's text, its failed
    expectations, or "" when it passes."""
    from scheduler.scenarios.runner import MemoryBackend, run_scenario
    from scheduler.scenarios.spec import ScenarioError

    if backend_name == "db":
        from scheduler.scenarios.db_backend import DbBackend

        backend: Any = DbBackend(scratch_db=False)
    else:
        backend = MemoryBackend()
    try:
        return "; ".join(str(f) for f in run_scenario(str(path), backend).failures)
    except ScenarioError as exc:
        return str(exc)
    finally:
        if backend_name == "db":
            backend.close()


BOTH_BACKENDS = ["memory", pytest.param("db", marks=pytest.mark.django_db(transaction=True))]


@pytest.mark.parametrize("backend_name", BOTH_BACKENDS)
def test_a_scenario_adding_a_budget_under_an_archived_one_is_refused_by_both_backends(tmp_path, backend_name):
    """left35: the memory backend restated the budget refusals and left one out: it created a
    budget under an archived parent, which ``do_create_budget`` (the db backend) refuses. Both now
    call ``budgets.rules.parent_problem``: one refusal, in the same words."""
    path = tmp_path / "archived.yaml"
    path.write_text(
        "name: x\nhosts: [{name: h1, gpus: 2}]\nbudgets: [{path: A}, {path: B}]\n"
        "steps: [{archive_budget: A}, {create_budget: {path: A/a1}}]\n"
    )
    error = _run_on(backend_name, path)
    assert "steps[1].create_budget" in error and "Budget A is archived." in error


@pytest.mark.parametrize("backend_name", BOTH_BACKENDS)
def test_a_scenario_submits_to_a_budget_whose_children_are_all_archived_on_both_backends(tmp_path, backend_name):
    """left35: archived sub-budgets do not make a budget a parent (``budgets.services.is_leaf``);
    the memory backend's own copy of ``not_a_leaf`` counted them and refused what the db backend
    accepts. Both now ask ``budgets.rules.submission_problem``."""
    path = tmp_path / "leaf_again.yaml"
    path.write_text(
        "name: x\nhosts: [{name: h1, gpus: 2}]\nbudgets: [{path: A}, {path: A/a1}, {path: B}]\n"
        "steps:\n"
        "- {archive_budget: A/a1}\n"
        "- {submit: [{id: w, budget: A, gpus: 1, min_runtime: 1h}]}\n"
        "- {tick: {}}\n"
        "- {expect: {running: [w]}}\n"
    )
    assert _run_on(backend_name, path) == ""
