"""brk50: a budget manager may change (and move) the pending work of their budget's members
(``can_cancel``), but the move's other end was judged only by the owner's membership there: the
manager of ``nlp`` moved a member's workload into ``vision/sam`` (where the member also belongs),
charging a budget they have no say in (the API's PATCH, a group's, the edit form, ``fairway
update --budget``: one service). A move by anyone but the owner or an admin needs that they may act
in the budget it goes to too (403 ``forbidden``, nothing moved); a move within their budgets stays."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.services import do_add_membership
from scheduler.models import Workload


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


def _pending(client: Any, payload: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/workloads/", payload, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.fixture
def in_both(researcher, org_tree):
    do_add_membership(researcher, org_tree["vision/sam"])
    return researcher


def test_a_manager_cannot_move_a_members_work_into_a_budget_they_do_not_manage(
    in_both, researcher_client, manager_client, submission, org_tree
):
    w = _pending(researcher_client, submission())
    moved = manager_client.patch(f"/api/v1/workloads/{w['id']}/", {"budget": "vision/sam"}, format="json")
    assert moved.status_code == 403, moved.json()
    assert moved.json()["code"] == "forbidden"
    assert "vision/sam" in moved.json()["detail"]
    assert Workload.objects.get(pk=w["id"]).budget_id == org_tree["nlp/olmo"].pk


def test_nor_a_group_of_them(in_both, researcher_client, manager_client, submission, org_tree):
    w = _pending(researcher_client, submission(array="0-1", gpu_count=1))
    group = Workload.objects.get(pk=w["id"]).group_id
    moved = manager_client.patch(f"/api/v1/groups/{group}/", {"budget": "vision/sam"}, format="json")
    assert moved.status_code == 403, moved.json()
    assert set(Workload.objects.filter(group_id=group).values_list("budget_id", flat=True)) == {org_tree["nlp/olmo"].pk}


def test_the_owner_an_admin_and_a_move_within_the_managers_budgets_still_move(
    in_both, researcher_client, manager_client, admin_client_api, submission, org_tree
):
    do_add_membership(in_both, org_tree["nlp/tulu"])
    w = _pending(researcher_client, submission())
    within = manager_client.patch(f"/api/v1/workloads/{w['id']}/", {"budget": "nlp/tulu"}, format="json")
    assert within.status_code == 200, within.json()
    by_admin = admin_client_api.patch(f"/api/v1/workloads/{w['id']}/", {"budget": "vision/sam"}, format="json")
    assert by_admin.status_code == 200, by_admin.json()
    back = researcher_client.patch(f"/api/v1/workloads/{w['id']}/", {"budget": "nlp/olmo"}, format="json")
    assert back.status_code == 200, back.json()
    own = researcher_client.patch(f"/api/v1/workloads/{w['id']}/", {"budget": "vision/sam"}, format="json")
    assert own.status_code == 200, own.json()


def test_the_edit_form_says_it_beside_the_budget(in_both, researcher_client, manager, submission, org_tree):
    import html

    from django.test import Client

    w = _pending(researcher_client, submission())
    page = Client()
    page.force_login(manager)
    form = {"budget": "vision/sam", "gpu_count": "4", "min_runtime": "2h", "retries": "0", "version": "0"}
    response = page.post(f"/workloads/{w['id']}/update/", form)
    assert response.status_code == 403
    assert "a manager of vision/sam may move a workload into vision/sam" in html.unescape(response.content.decode())
    assert Workload.objects.get(pk=w["id"]).budget_id == org_tree["nlp/olmo"].pk
