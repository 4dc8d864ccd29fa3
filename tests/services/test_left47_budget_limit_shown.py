"""left47: a budget's own submission limit (``Budget.max_submitted_per_user``, thr47) was set in the
admin but neither shown by the budget API (``GET budgets/``, ``GET budgets/{id}/``) nor kept in the
budget's change history, where a change of its shares, hold, parent or cap is (``ShareChange``)."""

from __future__ import annotations

from django.urls import reverse

from budgets.models import Budget, ShareChange
from tests.services.test_budget_form_stale import _admin_client, _shown_form


def _set_in_admin(client, budget: Budget, value: str, note: str = "") -> None:
    form = _shown_form(client, Budget.objects.get(pk=budget.pk))
    form["max_submitted_per_user"] = value
    form["change_note"] = note
    assert client.post(reverse("admin:budgets_budget_change", args=[budget.pk]), form).status_code == 302


def test_the_budget_api_shows_its_own_limit(researcher_client, org_tree):
    olmo = org_tree["nlp/olmo"]
    Budget.objects.filter(pk=olmo.pk).update(max_submitted_per_user=250)
    Budget.objects.filter(pk=org_tree["nlp/tulu"].pk).update(max_submitted_per_user=0)
    listed = {b["path"]: b for b in researcher_client.get("/api/v1/budgets/").json()}
    assert listed["nlp/olmo"]["max_submitted_per_user"] == 250
    assert listed["nlp/tulu"]["max_submitted_per_user"] == 0  # no limit there
    assert listed["vision/sam"]["max_submitted_per_user"] is None  # the setting
    detail = researcher_client.get(f"/api/v1/budgets/{olmo.pk}/").json()
    assert detail["max_submitted_per_user"] == 250


def test_a_change_of_the_limit_is_kept_in_the_history(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    client = _admin_client(admin)
    _set_in_admin(client, olmo, "250", "sweeps flood the queue")
    _set_in_admin(client, olmo, "0")
    _set_in_admin(client, olmo, "")
    changes = list(ShareChange.objects.filter(budget=olmo).order_by("id"))
    assert [c.kind for c in changes] == ["limit"] * 3
    assert [c.note for c in changes] == [
        "submission limit per user FAIRWAY_MAX_SUBMITTED_PER_USER → 250: sweeps flood the queue",
        "submission limit per user 250 → no limit",
        "submission limit per user no limit → FAIRWAY_MAX_SUBMITTED_PER_USER",
    ]
    assert {c.actor_name for c in changes} == {admin.username}
    assert changes[0].change_text() == "submission limit"
    # the audit inline on the budget's change page lists it
    page = client.get(reverse("admin:budgets_budget_change", args=[olmo.pk])).content.decode()
    assert "submission limit per user 250 → no limit" in page


def test_saving_the_same_limit_records_nothing(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    Budget.objects.filter(pk=olmo.pk).update(max_submitted_per_user=250)
    client = _admin_client(admin)
    form = _shown_form(client, Budget.objects.get(pk=olmo.pk))
    form["description"] = "same limit"
    assert client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form).status_code == 302
    assert not ShareChange.objects.filter(budget=olmo).exists()
