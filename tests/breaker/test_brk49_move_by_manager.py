"""brk49: a budget manager moving a member's pending workload (``PATCH workloads/{id}/``, ``fairway
update --budget``, the edit form) into a budget its owner is no member of was told "You are not a
member of budget nlp/tulu or of a budget above it. You may submit to: nlp/olmo.": the manager, who
manages nlp/tulu, read a false statement about themself and the owner's budgets as their own. The
refusal (the rule unchanged: a workload moves only where its owner may submit) names the owner;
the owner's own move keeps "You". Failed before the fix."""

from __future__ import annotations

from typing import Any

from accounts.services import do_add_membership
from budgets.models import Budget
from scheduler.models import Workload
from scheduler.services import do_submit_workload


def test_a_managers_move_names_the_owner_not_the_manager(
    researcher: Any, manager_client: Any, researcher_client: Any, submit_kwargs: Any, org_tree: Any
) -> None:
    w = do_submit_workload(researcher, **submit_kwargs())
    response = manager_client.patch(f"/api/v1/workloads/{w.pk}/", {"budget": "nlp/tulu"}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "not_a_member", body
    text = body["budget"][0]
    assert "You are not" not in text and "You may" not in text, text
    assert "researcher is not a member of budget nlp/tulu" in text and "researcher may submit to: nlp/olmo" in text, (
        text
    )
    assert Workload.objects.get(pk=w.pk).budget_id == org_tree["nlp/olmo"].pk
    own = researcher_client.patch(f"/api/v1/workloads/{w.pk}/", {"budget": "nlp/tulu"}, format="json")
    assert own.status_code == 400 and own.json()["budget"][0].startswith("You are not a member"), own.content


def test_a_managers_move_of_an_array_names_the_owner(
    researcher: Any, manager_client: Any, submit_kwargs: Any, org_tree: Any
) -> None:
    first = do_submit_workload(researcher, **submit_kwargs(array="0-1"))
    response = manager_client.patch(f"/api/v1/groups/{first.group_id}/", {"budget": "nlp/tulu"}, format="json")
    assert response.status_code == 400, response.content
    text = str(response.json())
    assert "You are not" not in text and "researcher is not a member of budget nlp/tulu" in text, text


def test_a_managers_move_past_the_owners_limit_names_the_owner(
    researcher: Any, manager_client: Any, submit_kwargs: Any, org_tree: Any
) -> None:
    """The same of the submission limit's refusal of a move (brk48): "You have more than 1 workloads" was
    said to the manager, who had none."""
    tulu = Budget.objects.get(pk=org_tree["nlp/tulu"].pk)
    tulu.max_submitted_per_user = 1
    tulu.save(update_fields=["max_submitted_per_user"])
    do_add_membership(researcher, tulu)
    w = do_submit_workload(researcher, **submit_kwargs())
    do_submit_workload(researcher, **submit_kwargs())
    response = manager_client.patch(f"/api/v1/workloads/{w.pk}/", {"budget": "nlp/tulu"}, format="json")
    assert response.status_code == 429, response.content
    text = str(response.json())
    assert "You have" not in text and "researcher has more than 1 workloads pending or running" in text, text
    assert Workload.objects.get(pk=w.pk).budget_id == org_tree["nlp/olmo"].pk
