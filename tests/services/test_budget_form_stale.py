"""nvml56: the budget admin form judges a change of hold (and of name, parent, caps, description)
from the value its page showed (the hidden initial, as brk56 did for shares): a page opened before
someone else changed the budget, saved afterwards for another field, wrote the old value back."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client
from django.urls import reverse

from budgets.models import Budget
from budgets.services import do_set_hold
from tests.conftest import PASSWORD
from tests.services.test_share_audit import _change_form


def _admin_client(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _shown_form(client: Client, budget: Budget) -> dict[str, Any]:
    """The change form as the admin's page shows it now: its values and its hidden initial ones."""
    page = client.get(reverse("admin:budgets_budget_change", args=[budget.pk])).content.decode()
    data = _change_form(budget)
    for name, value in re.findall(r'<input type="hidden" name="(initial-[a-z_]+)" value="([^"]*)"', page):
        data[name] = value
    return data


def test_a_stale_form_saved_for_its_description_keeps_a_hold_set_meanwhile(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    client = _admin_client(admin)
    form = _shown_form(client, olmo)  # not held
    assert "hold" not in form and form.get("initial-hold") == "False"
    do_set_hold(Budget.objects.get(pk=olmo.pk), True, actor=admin, note="incident")
    form["description"] = "ACL push"
    response = client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form)
    assert response.status_code == 302
    now = Budget.objects.get(pk=olmo.pk)
    assert (now.hold, now.description) == (True, "ACL push")


def test_a_stale_form_keeps_a_release_and_a_rename_done_meanwhile(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    do_set_hold(Budget.objects.get(pk=olmo.pk), True, actor=admin, note="")
    client = _admin_client(admin)
    form = _shown_form(client, Budget.objects.get(pk=olmo.pk))  # held, old name
    assert form["hold"] == "on"
    do_set_hold(Budget.objects.get(pk=olmo.pk), False, actor=admin, note="")
    Budget.objects.filter(pk=olmo.pk).update(name="olmo2", cap_period_days=14)
    form["description"] = "later"
    assert client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form).status_code == 302
    now = Budget.objects.get(pk=olmo.pk)
    assert (now.hold, now.name, now.cap_period_days, now.description) == (False, "olmo2", 14, "later")


def test_an_explicit_change_of_hold_from_the_page_still_applies(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    client = _admin_client(admin)
    form = _shown_form(client, olmo)
    form["hold"] = "on"
    assert client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form).status_code == 302
    assert Budget.objects.get(pk=olmo.pk).hold is True
    # a client that posts no hidden initial values is judged from the row, as before
    bare = _change_form(Budget.objects.get(pk=olmo.pk))
    bare.pop("hold")
    assert client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), bare).status_code == 302
    assert Budget.objects.get(pk=olmo.pk).hold is False


def test_in_a_browser_a_stale_page_saved_for_its_description_keeps_the_hold(new_page, admin, org_tree):
    from tests.browser import log_in

    olmo = org_tree["nlp/olmo"]
    page = new_page()
    log_in(page, admin.username)
    page.goto(reverse("admin:budgets_budget_change", args=[olmo.pk]))
    assert not page.is_checked("#id_hold")
    do_set_hold(Budget.objects.get(pk=olmo.pk), True, actor=admin, note="incident")  # someone else, meanwhile
    page.fill("#id_description", "ACL push")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/budgets/budget/")
    now = Budget.objects.get(pk=olmo.pk)
    assert (now.hold, now.description) == (True, "ACL push")
