"""brk63: faults a breaker found as a hostile or careless user (budget edits, ...). Each test
failed before its fix."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from budgets.models import Budget, ShareChange
from tests.conftest import PASSWORD


@pytest.fixture
def admin_web(client, admin):
    client.login(username="admin", password=PASSWORD)
    return client


def _messages(page: str) -> list[str]:
    listed = page.split('class="messagelist"', 1)[1].split("</ul>")[0]
    return [m.strip() for m in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)]


def test_the_root_budget_is_never_archived(admin_web, org_tree):
    """The budgets admin's "Archive" of the root (a "select all" then Archive, say) archived every
    budget of the organisation: every submission refused, and no budget could be made again (an
    archived parent takes no sub-budget, and the tree keeps its one root), with no way back short
    of the database. The root is refused, in the rule's words; the other budgets chosen are archived."""
    from budgets.services import BudgetError, do_archive_budget

    root, sam = org_tree["org"], org_tree["vision/sam"]
    response = admin_web.post(
        reverse("admin:budgets_budget_changelist"),
        {"action": "archive_budgets", "_selected_action": [root.pk, sam.pk]},
        follow=True,
    )
    assert response.status_code == 200
    said = _messages(response.content.decode())
    assert any("org is the root" in m for m in said), said
    assert any(m.startswith("1 budget(s) archived") for m in said), said
    assert list(Budget.objects.filter(archived_at__isnull=False).values_list("name", flat=True)) == ["sam"]
    assert not ShareChange.objects.filter(budget=root, kind=ShareChange.Kind.ARCHIVE).exists()
    with pytest.raises(BudgetError) as refused:
        do_archive_budget(root)
    assert refused.value.code == "budget_root"
    assert Budget.objects.get(pk=root.pk).archived_at is None


def test_a_budget_whose_archived_sub_budgets_have_work_takes_none_of_its_own(
    researcher, manager, manager_client, submission, submit_kwargs, org_tree, cluster
):
    """With every project of nlp archived, nlp counted as a leaf (archived children make no parent)
    while olmo's pending work carried on: a submission to nlp was taken, and the tick served nlp's
    own queue before its children's, so it started ahead of olmo's older workload. That is the
    parent with work of its own DESIGN.md §3.7 rules out the other way round (``parent_has_work``).
    It is refused until the archived sub-budgets' work has ended; then nlp takes work again."""
    from budgets.services import do_archive_budget
    from scheduler.models import Workload
    from scheduler.services import do_cancel_workload, do_submit_workload

    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    do_archive_budget(org_tree["nlp/olmo"])
    do_archive_budget(org_tree["nlp/tulu"])
    response = manager_client.post("/api/v1/workloads/", submission(budget="nlp", gpu_count=8), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "not_a_leaf"
    message = response.json()["budget"][0]
    assert "archived sub-budgets" in message and "1 unfinished workload" in message, message
    quote = manager_client.post("/api/v1/workloads/quote/", submission(budget="nlp", gpu_count=8), format="json")
    assert quote.status_code == 400 and quote.json()["code"] == "not_a_leaf"
    assert list(Workload.objects.values_list("pk", flat=True)) == [waiting.pk]
    do_cancel_workload(researcher, waiting)
    taken = manager_client.post("/api/v1/workloads/", submission(budget="nlp", gpu_count=8), format="json")
    assert taken.status_code == 201, taken.content


def test_an_archived_budget_with_work_is_not_moved_under_a_budget_with_work_of_its_own(
    admin_web, researcher, outsider, submit_kwargs, org_tree, cluster
):
    """The admin's change form checked a new parent's rules (``parent_has_work``) for live budgets
    only: archived nlp/olmo, its pending workload carrying on, was moved under vision/sam, which had
    pending work of its own, making sam a parent whose own queue the tick serves before its child's
    (DESIGN.md §3.7). The move is refused with the rule's words; nothing changes."""
    from budgets.services import do_archive_budget
    from scheduler.services import do_submit_workload
    from tests.api.test_admin import _budget_form

    olmo, sam = org_tree["nlp/olmo"], org_tree["vision/sam"]
    do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    do_submit_workload(outsider, **submit_kwargs(budget=sam, gpu_count=8))
    do_archive_budget(olmo)
    olmo.refresh_from_db()
    response = admin_web.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), _budget_form(olmo, parent=sam.pk))
    assert response.status_code == 200
    assert "vision/sam has 1 unfinished workload" in response.content.decode()
    assert Budget.objects.get(pk=olmo.pk).parent_id == org_tree["nlp"].pk


@pytest.mark.parametrize("raw", ["abc", "9223372036854775808"])
@pytest.mark.parametrize(
    ("model", "action"),
    [("budgets_budget", "hold_budgets"), ("scheduler_host", "cordon"), ("scheduler_workload", "cancel")],
)
def test_an_admin_action_over_a_selection_that_is_no_id_is_refused_in_words(
    admin_web, org_tree, hosts, researcher, submit_kwargs, model, action, raw
):
    """A changelist action posted with ``_selected_action=abc`` (or past a 64-bit integer) was a
    500 from Django's own ``pk__in`` (ValueError, OverflowError); nothing changed. It is refused
    with a message, back to the list, and still nothing changes."""
    from config.admin_ids import BAD_SELECTION
    from scheduler.models import Host, Workload
    from scheduler.services import do_submit_workload

    workload = do_submit_workload(researcher, **submit_kwargs())
    real = {
        "budgets_budget": org_tree["nlp"].pk,
        "scheduler_host": hosts["a100-1"].pk,
        "scheduler_workload": workload.pk,
    }
    url = reverse(f"admin:{model}_changelist")
    response = admin_web.post(url, {"action": action, "_selected_action": [real[model], raw]}, follow=True)
    assert response.status_code == 200
    assert BAD_SELECTION in _messages(response.content.decode())
    assert not Budget.objects.filter(hold=True).exists()
    assert Host.objects.get(pk=hosts["a100-1"].pk).state == Host.State.ACTIVE
    assert Workload.objects.get(pk=workload.pk).state == Workload.State.PENDING


@pytest.mark.parametrize("raw", ["abc", "9223372036854775808"])
@pytest.mark.parametrize(
    ("page", "field"),
    [
        ("budgets_budget_add", "parent"),
        ("budgets_shareboost_add", "budget"),
        ("budgets_usageentry_add", "budget"),
        ("accounts_membership_add", "user"),
        ("accounts_membership_add", "budget"),
    ],
)
def test_an_admin_picker_posted_with_no_id_shows_its_form_again(admin_web, org_tree, page, field, raw):
    """An autocomplete picker posted with a value that is no id (``parent=abc``) was a 500: the
    form was refused, then its widget queried the value to show it back. The form comes back with
    the field's error; nothing is created."""
    before = Budget.objects.count()
    response = admin_web.post(reverse(f"admin:{page}"), {"name": "x", "shares": "1", field: raw})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert Budget.objects.count() == before


def test_a_users_membership_picker_posted_with_no_id_shows_the_form_again(admin_web, researcher):
    """The user's page's memberships (an inline's autocomplete picker) took the same 500."""
    from accounts.models import Membership

    page = admin_web.get(reverse("admin:accounts_user_change", args=[researcher.pk])).content.decode()
    data = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page))
    data.update({"username": "researcher", "memberships-0-budget": "abc", "memberships-0-role": "member"})
    data.setdefault("date_joined_0", "2026-12-01")
    data.setdefault("date_joined_1", "00:00:00")
    before = list(Membership.objects.values_list("budget_id", "role"))
    response = admin_web.post(reverse("admin:accounts_user_change", args=[researcher.pk]), data)
    assert response.status_code == 200
    assert list(Membership.objects.values_list("budget_id", "role")) == before
