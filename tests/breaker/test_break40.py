"""brk40: a staff member the admin gave only view permissions (an auditor, a help desk) changed
things through the admin's actions: Django offers an action to everyone who may see the list
unless the action names the permissions it needs (``@admin.action(permissions=...)``)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from accounts.models import User
from budgets.models import Budget
from scheduler.models import Host, JoinToken, NotificationSettings, Workload
from scheduler.services import do_create_join_token


@pytest.fixture
def viewer(db: None) -> Client:
    """A staff member with view permissions only (deploy.md: what staff may change in the admin
    is the Django permissions an admin gives)."""
    user = User.objects.create_user(username="auditor", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    client = Client()
    client.force_login(user)
    return client


def _act(client: Client, model: str, action: str, pk: int, **extra: str):
    data = {"action": action, "_selected_action": [pk], **extra}
    return client.post(reverse(f"admin:{model}_changelist"), data)


@pytest.mark.parametrize(
    "action", ["cordon", "drain", "drain_now_action", "resume", "approve_inventory", "rotate_token", "revoke_token"]
)
def test_a_view_only_staff_member_cannot_act_on_hosts(viewer, hosts, action):
    host = hosts["a100-1"]
    if action == "resume":
        Host.objects.filter(pk=host.pk).update(state=Host.State.CORDONED)
    before = Host.objects.values().get(pk=host.pk)
    _act(viewer, "scheduler_host", action, host.pk)
    assert Host.objects.values().get(pk=host.pk) == before


def test_a_view_only_staff_member_cannot_remove_a_host(viewer, hosts):
    host = hosts["a100-1"]
    _act(viewer, "scheduler_host", "remove_hosts", host.pk, confirm="yes")
    assert Host.objects.get(pk=host.pk).removed_at is None


def test_a_view_only_staff_member_cannot_mint_a_join_token(viewer, cluster):
    response = _act(viewer, "scheduler_cluster", "create_join_token", cluster.pk)
    assert not JoinToken.objects.exists()
    assert b"join token" not in response.content


@pytest.mark.parametrize(("action", "field"), [("hold_budgets", "hold"), ("archive_budgets", "archived_at")])
def test_a_view_only_staff_member_cannot_hold_or_archive_a_budget(viewer, org_tree, action, field):
    budget = org_tree["nlp/olmo"]
    before = Budget.objects.values().get(pk=budget.pk)
    _act(viewer, "budgets_budget", action, budget.pk)
    assert Budget.objects.values().get(pk=budget.pk) == before


def test_a_view_only_staff_member_cannot_revoke_join_tokens(viewer, admin, cluster):
    row, _token = do_create_join_token(admin, cluster, note="")
    _act(viewer, "scheduler_jointoken", "revoke", row.pk)
    assert JoinToken.objects.get(pk=row.pk).expires_at == row.expires_at


def test_a_staff_member_given_the_change_permission_still_acts(viewer, hosts, cluster):
    user = User.objects.get(username="auditor")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_host", "add_jointoken", "change_jointoken"])
    )
    host = hosts["a100-1"]
    _act(viewer, "scheduler_host", "cordon", host.pk)
    assert Host.objects.get(pk=host.pk).state == Host.State.CORDONED
    _act(viewer, "scheduler_cluster", "create_join_token", cluster.pk)
    row = JoinToken.objects.get()
    _act(viewer, "scheduler_jointoken", "revoke", row.pk)
    assert JoinToken.objects.get().expires_at < row.expires_at


@pytest.mark.parametrize("after", [["1", "1:any"], ["#1:any", "1:ok"], "1:any,1"])
def test_one_workload_named_with_two_conditions_is_refused(researcher_client, submission, cluster, after):
    """``after: ["1", "1:any"]`` asks both "only if 1 succeeded" and "whatever its end": the last
    one silently won (the workload would start after 1 failed though the person also wrote 1:ok)."""
    first = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    assert first.status_code == 201
    response = researcher_client.post("/api/v1/workloads/", submission(after=after), format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "invalid_after"
    assert "twice" in response.json()["after"][0]
    assert Workload.objects.count() == 1


def test_one_workload_named_twice_with_one_condition_is_taken_once(researcher_client, submission, cluster):
    first = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    pk = first.json()["id"]  # not 1: ids go on across tests on PostgreSQL and in a long run
    response = researcher_client.post("/api/v1/workloads/", submission(after=f"{pk},#{pk}:ok"), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["after"] == [{"workload": first.json()["id"], "condition": "ok", "state": "pending"}]


def test_the_api_lists_every_state_given_as_the_page_does(researcher_client, submission, cluster):
    """``?state=pending&state=canceled`` listed the canceled ones alone (QueryDict keeps the last
    value): the page joins repeated states (``?state=pending,canceled``), the API now too."""
    ids = [researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json").json()["id"]]
    ids.append(researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json").json()["id"])
    researcher_client.post(f"/api/v1/workloads/{ids[1]}/cancel/")
    body = researcher_client.get("/api/v1/workloads/?state=pending&state=canceled").json()
    assert sorted(w["id"] for w in body["results"]) == ids


@pytest.mark.parametrize("surface", ["api", "page"])
def test_another_filter_given_twice_is_refused_not_read_as_its_last(
    researcher_client, researcher, submission, cluster, surface
):
    """``?owner=me&owner=teammate`` listed the teammate's workloads alone, as if the first value
    were not there: it is a 400 naming the filter on both surfaces."""
    researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    query = "owner=me&owner=teammate"
    if surface == "api":
        response = researcher_client.get(f"/api/v1/workloads/?{query}")
        assert response.status_code == 400, response.json()
        assert "once" in response.json()["owner"][0]
    else:
        web = Client()
        web.force_login(researcher)
        response = web.get(f"/workloads/?{query}")
        assert response.status_code == 400
        assert b"owner: give it once" in response.content


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/workloads/history/?budget=nlp&budget=vision",
        "/api/v1/hosts/?state=active&state=drained",
        "/api/v1/groups/?owner=me&owner=teammate",
        "/api/v1/workloads/?limit=1&limit=500",
        "/api/v1/budgets/tree/?cluster=default&cluster=other",
    ],
)
def test_a_parameter_given_twice_is_refused_on_every_list(researcher_client, cluster, url):
    """Every list read the last of a repeated parameter, silently (``?budget=nlp&budget=vision``
    reported vision alone): refused with the parameter's name, by the rule of unknown ones."""
    response = researcher_client.get(url)
    name = url.split("?")[1].split("=")[0]
    assert response.status_code == 400, response.content
    assert "once" in response.json()[name][0]


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("email_kinds", "5", "a list of event kinds"),
        ("email_kinds", '"started"', "a list of event kinds"),
        ("webhook_kinds", '["strated"]', "unknown event kind"),
        ("webhook_kinds", '["failed"]', "need a webhook URL"),
    ],
)
def test_the_admin_refuses_notification_settings_the_api_refuses(admin, researcher, field, value, said):
    """The admin's form took any JSON for the kinds: ``5`` there made every start and exit report
    of the user's workloads fail (``kind in 5``: TypeError in the transaction that records the
    ``started``, ``succeeded`` or ``failed`` event): an exited attempt stayed running."""
    client = Client()
    client.force_login(admin)
    data = {"user": researcher.pk, "email_kinds": "[]", "webhook_kinds": "[]", "webhook_url": "", field: value}
    response = client.post(reverse("admin:scheduler_notificationsettings_add"), data)
    assert response.status_code == 200  # the form again, with the error
    assert said in response.content.decode()
    assert not NotificationSettings.objects.exists()


def test_the_admin_refuses_a_webhook_the_api_refuses(admin, researcher):
    client = Client()
    client.force_login(admin)
    data = {"user": researcher.pk, "email_kinds": "[]", "webhook_kinds": '["failed"]'}
    response = client.post(
        reverse("admin:scheduler_notificationsettings_add"), {**data, "webhook_url": "http://127.0.0.1:8000/hook"}
    )
    assert "private or local address" in response.content.decode()
    assert not NotificationSettings.objects.exists()


def test_a_bad_settings_row_saved_before_the_fix_stops_no_exit(
    researcher_client, researcher, submission, cluster, hosts
):
    """A row the admin saved before its form checked the kinds (``5``) made the exit report of
    the user's work fail: the attempt stayed running, holding its GPUs. Such a row sends nothing."""
    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.tick import run_tick
    from tests.conftest import connected

    connected(*hosts.values())
    researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    run_tick(cluster.pk)
    attempt = Attempt.objects.get()
    NotificationSettings.objects.create(user=researcher, email_kinds=5, webhook_kinds="failed", webhook_url="x")
    lifecycle.attempt_started(attempt.host, attempt.pk)
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0)
    assert Workload.objects.get().state == Workload.State.SUCCEEDED


def test_a_bad_settings_row_reads_as_no_kinds(researcher_client, researcher):
    NotificationSettings.objects.create(user=researcher, email_kinds=5, webhook_kinds={"a": 1})
    response = researcher_client.get("/api/v1/notifications/")
    assert response.status_code == 200
    assert (response.json()["email_kinds"], response.json()["webhook_kinds"]) == ([], [])
    web = Client()
    web.force_login(researcher)
    assert web.get("/notifications/").status_code == 200
