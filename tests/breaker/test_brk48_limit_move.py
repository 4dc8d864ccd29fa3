"""brk48: a budget's own submission limit per user (thr47) and ``FAIRWAY_MAX_SUBMITTED_PER_USER``
judged a submission only: a member of two budgets submitted into the one without a limit (or
whose own limit is higher, or 0: none) and then moved the pending work into the limited one with
``PATCH workloads/{id}/`` (``fairway update --budget``), or a whole array at once with ``PATCH
groups/{id}/``, holding there what no submission to it would take. A move is judged as a
submission to its new budget now (the moved workload counted among those held): 429
``too_many_submitted``, in the submission's words, nothing moved. Each test failed before its fix."""

from __future__ import annotations

from typing import Any

import pytest

from budgets.models import Budget
from scheduler.models import Workload
from scheduler.services import SUBMIT_LIMIT_CODE, do_submit_workload


def _budget_limit(budget: Budget, n: int | None) -> None:
    row = Budget.objects.get(pk=budget.pk)
    row.max_submitted_per_user = n
    row.save(update_fields=["max_submitted_per_user"])


@pytest.fixture
def global_limit(settings: Any) -> Any:
    def set_to(n: int) -> None:
        settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": n}

    return set_to


def _refused(response: Any, limit: int, source: str) -> None:
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["code"] == SUBMIT_LIMIT_CODE, body
    assert f"at most {limit} ({source})" in str(body), body


def test_a_move_into_a_budget_with_a_lower_limit_is_refused(manager, manager_client, submit_kwargs, org_tree):
    olmo, tulu = org_tree["nlp/olmo"], org_tree["nlp/tulu"]
    _budget_limit(olmo, 2)
    first = do_submit_workload(manager, **submit_kwargs(budget=tulu))
    for _ in range(2):
        do_submit_workload(manager, **submit_kwargs(budget=tulu))
    response = manager_client.patch(f"/api/v1/workloads/{first.pk}/", {"budget": "nlp/olmo"}, format="json")
    _refused(response, 2, "budget nlp/olmo's submission limit per user")
    assert set(Workload.objects.values_list("budget_id", flat=True)) == {tulu.pk}
    assert not Workload.objects.filter(events__kind="updated").exists()
    # another change naming its own budget (the edit form posts it) is no move: taken past the limit
    _budget_limit(tulu, 1)
    resized = manager_client.patch(
        f"/api/v1/workloads/{first.pk}/", {"budget": "nlp/tulu", "gpu_count": 2}, format="json"
    )
    assert resized.status_code == 200 and resized.json()["gpu_count"] == 2, resized.content
    # within the limit a move is taken, as a submission would be
    Workload.objects.exclude(pk=first.pk).delete()
    moved = manager_client.patch(f"/api/v1/workloads/{first.pk}/", {"budget": "nlp/olmo"}, format="json")
    assert moved.status_code == 200, moved.content
    assert Workload.objects.get(pk=first.pk).budget_id == olmo.pk


def test_a_move_out_of_a_budget_without_limit_is_judged_by_the_setting(
    manager, manager_client, submit_kwargs, org_tree, global_limit
):
    global_limit(1)
    _budget_limit(org_tree["nlp/tulu"], 0)  # none in tulu
    first = do_submit_workload(manager, **submit_kwargs(budget=org_tree["nlp/tulu"]))
    do_submit_workload(manager, **submit_kwargs(budget=org_tree["nlp/tulu"]))
    response = manager_client.patch(f"/api/v1/workloads/{first.pk}/", {"budget": "nlp/olmo"}, format="json")
    _refused(response, 1, "FAIRWAY_MAX_SUBMITTED_PER_USER, as Slurm's MaxSubmitJobs")
    assert Workload.objects.get(pk=first.pk).budget_id == org_tree["nlp/tulu"].pk


def test_a_group_move_is_refused_before_any_member_moves(manager, manager_client, submit_kwargs, org_tree):
    tulu = org_tree["nlp/tulu"]
    _budget_limit(org_tree["nlp/olmo"], 3)
    first = do_submit_workload(manager, **submit_kwargs(budget=tulu, array="0-4"))
    response = manager_client.patch(f"/api/v1/groups/{first.group_id}/", {"budget": "nlp/olmo"}, format="json")
    _refused(response, 3, "budget nlp/olmo's submission limit per user")
    assert set(Workload.objects.values_list("budget_id", flat=True)) == {tulu.pk}
