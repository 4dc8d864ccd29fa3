"""brk51b: names a user controls, holding markup, come out escaped on every page and admin page."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin as django_admin
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken

from accounts.models import ApiTokenInfo
from budgets.models import Budget
from scheduler.models import ArrayGroup, Cluster, Host, NotificationSettings, Workload
from scheduler.services import do_submit_workload

P = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"
RAW = re.compile(rb"<script>alert|<img src=x")


def _hostile_world(researcher, admin, submit_kwargs, hosts):
    made = do_submit_workload(researcher, **submit_kwargs())
    workload = made if isinstance(made, Workload) else Workload.objects.filter(owner=researcher).latest("pk")
    group = ArrayGroup.objects.create(owner=researcher, cluster=workload.cluster, name=P, spec="0-1")
    Workload.objects.filter(pk=workload.pk).update(name=P, group=group)
    Budget.objects.filter(pk=workload.budget_id).update(name=P, description=P)
    Cluster.objects.filter(pk=workload.cluster_id).update(description=P)
    Host.objects.filter(name="a100-1").update(labels={P: P})
    for user in (researcher, admin):
        token, _ = AuthToken.objects.create(user)
        ApiTokenInfo.objects.create(token=token, name=P, kind=ApiTokenInfo.Kind.PERSONAL)
        NotificationSettings.objects.update_or_create(user=user, defaults={"webhook_url": "https://x.example/" + P})
    return workload, group


def test_markup_in_names_is_escaped_everywhere(researcher, admin, submit_kwargs, hosts):
    workload, group = _hostile_world(researcher, admin, submit_kwargs, hosts)
    pages = [
        "/",
        "/submit/",
        "/workloads/",
        f"/workloads/{workload.pk}/",
        f"/workloads/?group={group.pk}",
        "/budgets/",
        "/clusters/",
        "/clusters/default/",
        "/metrics/",
        "/tokens/",
        "/notifications/",
        f"/submit/?again={workload.pk}",
    ]
    for model in django_admin.site._registry:  # noqa: SLF001
        meta = model._meta  # noqa: SLF001
        pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        first = model._default_manager.order_by("pk").values_list("pk", flat=True)[:3]  # noqa: SLF001
        pages += [reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk]) for pk in first]
    bad, seen = [], 0
    for user in (researcher, admin):
        client = Client()
        client.force_login(user)
        for url in pages:
            response = client.get(url)
            if response.status_code != 200 or response.streaming:
                continue
            seen += 1
            if RAW.search(response.content):
                bad.append((user.username, url))
    assert seen > 40
    assert bad == []


WHAT_IF = "/admin/budgets/budget/what-if/"


@pytest.mark.parametrize(
    "name",
    ["a: b", "x #y", "[a]", "{b}", "*c", "&d", "!e", "%f", "@g", "`h", "- z", "? k", "|", ">", "'q", '"q', "yes"],
)
def test_the_what_if_pages_own_shares_run_as_they_are_for_any_budget_name(admin, org_tree, hosts, name):
    """A budget named ``a: b`` (or ``x #y``, ``[a]``, ``*c`` … as a top-level budget) is a name the
    budget rule takes; the what-if page prefilled its shares with the path bare, and running them
    unchanged said "not valid YAML" (or a path no budget has): the key is quoted where YAML needs."""
    Budget.objects.filter(pk=org_tree["vision"].pk).update(name=name)
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(name=name)
    client = Client()
    client.force_login(admin)
    shares = client.get(WHAT_IF).context["form"].initial["shares"]
    response = client.post(WHAT_IF, {"shares": shares, "window": "7d", "cluster": "default"})
    assert response.status_code == 200
    assert response.context["error"] == "", shares
    assert response.context["result"] is not None


def test_a_bulk_post_naming_another_users_workload_says_why_it_was_left(researcher, teammate, submit_kwargs, cluster):
    """The bulk form posted with a teammate's workload id (the preview lists only one's own): it
    was left as it was, and the page said "(changed meanwhile)"; it says the refusal's reason."""
    do_submit_workload(teammate, **submit_kwargs())
    theirs = Workload.objects.filter(owner=teammate).latest("pk")
    client = Client()
    client.force_login(researcher)
    response = client.post("/workloads/bulk/?action=cancel&state=pending", {"ids": str(theirs.pk)}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    theirs.refresh_from_db()
    assert theirs.state == Workload.State.PENDING
    assert len(said) == 1 and "changed meanwhile" not in said[0], said
    assert "1 left as they are (forbidden: Only the owner" in said[0], said


def _admin_form_data(client: Client, url: str) -> dict[str, object]:
    response = client.get(url)
    form = response.context["adminform"].form
    data: dict[str, object] = {}
    for name in form.fields:
        value = form.initial.get(name)
        if value is not None:
            data[name] = value if isinstance(value, list) else str(getattr(value, "pk", value))
    for inline in response.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        data |= {f"{management.prefix}-{n}": str(management.initial.get(n, 0)) for n in management.fields}
    return data


@pytest.mark.parametrize(
    ("field", "typed"),
    [("shares", "\u0663"), ("shares", "1_6"), ("cap_period_days", "\uff13"), ("max_submitted_per_user", "\u0661")],
)
def test_the_admins_number_fields_take_ascii_digits_only(admin, org_tree, field, typed):
    """The budget's change page took ``٣`` (an Arabic-Indic 3), ``１６`` and ``1_6`` as 3 and 16 (Django's
    ``int()``), where the API, the CLI, the submit page (brk46) and the settings refuse them."""
    budget = org_tree["nlp/olmo"]
    url = f"/admin/budgets/budget/{budget.pk}/change/"
    client = Client()
    client.force_login(admin)
    data = _admin_form_data(client, url)
    assert client.post(url, data).status_code == 302  # as it stands: saved
    before = Budget.objects.filter(pk=budget.pk).values().get()
    response = client.post(url, {**data, field: typed})
    assert response.status_code == 200
    assert "ASCII digits" in str(response.context["adminform"].form.errors[field])
    assert Budget.objects.filter(pk=budget.pk).values().get() == before
