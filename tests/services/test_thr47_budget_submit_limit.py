"""thr47: leadership sets a budget's own limit of pending + running workloads per user (the 429
``too_many_submitted`` limit) in the admin: a submission to that budget is judged by it, in the
same words, the number the budget's; empty, ``FAIRWAY_MAX_SUBMITTED_PER_USER``; 0, none. The rule
is ``budgets.rules.submitted_limit``."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from budgets.models import Budget
from budgets.rules import submitted_limit
from scheduler.models import Workload
from scheduler.services import SUBMIT_LIMIT_CODE, SubmissionError, do_submit_workload
from tests.services.test_budget_form_stale import _admin_client, _shown_form


@pytest.fixture
def global_limit(settings: Any) -> Any:
    def set_to(n: int) -> None:
        settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": n}

    return set_to


def _budget_limit(budget: Budget, n: int | None) -> None:
    row = Budget.objects.get(pk=budget.pk)
    row.max_submitted_per_user = n
    row.save(update_fields=["max_submitted_per_user"])  # as the admin saves it: the kept tree forgets


def _refusal(user: Any, **kwargs: Any) -> SubmissionError:
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(user, **kwargs)
    assert refused.value.code == SUBMIT_LIMIT_CODE and refused.value.status == 429
    return refused.value


def test_the_rule_the_budget_s_own_else_the_setting():
    assert submitted_limit(None, 10_000) == 10_000
    assert submitted_limit(3, 10_000) == 3
    assert submitted_limit(50_000, 10_000) == 50_000
    assert submitted_limit(0, 10_000) == 0  # none for this budget
    assert submitted_limit(None, 0) == 0


def test_a_budget_s_lower_limit_refuses_in_the_same_words_with_its_number(
    researcher, submit_kwargs, global_limit, org_tree
):
    global_limit(2)
    for _ in range(2):
        do_submit_workload(researcher, **submit_kwargs())
    by_the_setting = _refusal(researcher, **submit_kwargs()).message
    Workload.objects.all().delete()

    global_limit(10_000)
    _budget_limit(org_tree["nlp/olmo"], 2)
    for _ in range(2):
        do_submit_workload(researcher, **submit_kwargs())
    by_the_budget = _refusal(researcher, **submit_kwargs()).message
    # the same sentence, naming where its number comes from (not the setting, which is 10,000)
    assert "at most 2 (FAIRWAY_MAX_SUBMITTED_PER_USER, as Slurm's MaxSubmitJobs)" in by_the_setting
    assert by_the_budget == by_the_setting.replace(
        "FAIRWAY_MAX_SUBMITTED_PER_USER, as Slurm's MaxSubmitJobs", "budget nlp/olmo's submission limit per user"
    )
    assert Workload.objects.count() == 2


def test_a_budget_s_higher_limit_or_zero_lets_more_in_and_empty_is_the_setting(
    researcher, submit_kwargs, global_limit, org_tree
):
    global_limit(1)
    _budget_limit(org_tree["nlp/olmo"], 3)
    do_submit_workload(researcher, **submit_kwargs(array="0-2"))  # 3 <= 3
    assert "at most 3 " in _refusal(researcher, **submit_kwargs()).message

    _budget_limit(org_tree["nlp/olmo"], 0)  # no limit in this budget
    do_submit_workload(researcher, **submit_kwargs(array="0-4"))
    assert Workload.objects.count() == 8

    _budget_limit(org_tree["nlp/olmo"], None)  # the setting again
    assert "at most 1 " in _refusal(researcher, **submit_kwargs()).message


def test_leadership_sets_it_in_the_admin(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    client = _admin_client(admin)
    page = client.get(reverse("admin:budgets_budget_change", args=[olmo.pk])).content.decode()
    assert 'name="max_submitted_per_user"' in page and "FAIRWAY_MAX_SUBMITTED_PER_USER" in page
    form = _shown_form(client, olmo)
    form["max_submitted_per_user"] = "250"
    assert client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form).status_code == 302
    assert Budget.objects.get(pk=olmo.pk).max_submitted_per_user == 250
    form = _shown_form(client, Budget.objects.get(pk=olmo.pk))
    assert form["initial-max_submitted_per_user"] == "250"
    form["max_submitted_per_user"] = ""
    assert client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form).status_code == 302
    assert Budget.objects.get(pk=olmo.pk).max_submitted_per_user is None
