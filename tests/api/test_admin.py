"""The admin pages render, and the host and workload actions go through the services."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduler.models import Host, HostEvent, Workload
from scheduler.services import do_submit_workload
from tests.conftest import PASSWORD


@pytest.fixture
def admin_web(client, admin):
    client.login(username="admin", password=PASSWORD)
    return client


MODELS = [
    "accounts_user",
    "accounts_membership",
    "budgets_budget",
    "budgets_usageentry",
    "scheduler_cluster",
    "scheduler_host",
    "scheduler_gpu",
    "scheduler_workload",
    "scheduler_attempt",
    "scheduler_workloadevent",
    "scheduler_hostevent",
]


@pytest.mark.parametrize("model", MODELS)
def test_admin_changelist_renders(admin_web, researcher, submit_kwargs, model):
    do_submit_workload(researcher, **submit_kwargs())
    response = admin_web.get(reverse(f"admin:{model}_changelist"))
    assert response.status_code == 200


def test_admin_change_pages_render(admin_web, researcher, submit_kwargs, hosts, org_tree):
    workload = do_submit_workload(researcher, **submit_kwargs())
    for name, pk in [
        ("scheduler_workload", workload.pk),
        ("scheduler_host", hosts["a100-1"].pk),
        ("budgets_budget", org_tree["nlp/olmo"].pk),
    ]:
        assert admin_web.get(reverse(f"admin:{name}_change", args=[pk])).status_code == 200


def test_budget_changelist_shows_path_and_normalized_share(admin_web, org_tree):
    page = admin_web.get(reverse("admin:budgets_budget_changelist")).content.decode()
    assert "nlp/olmo" in page
    assert "66.67%" in page


@pytest.mark.parametrize(
    ("action", "state", "drain_now", "kind"),
    [
        ("cordon", "cordoned", False, "cordoned"),
        ("drain", "draining", False, "draining"),
        ("drain_now_action", "draining", True, "drain_now"),
    ],
)
def test_host_actions_change_state_and_record_who(admin_web, admin, hosts, action, state, drain_now, kind):
    host = hosts["a100-1"]
    response = admin_web.post(
        reverse("admin:scheduler_host_changelist"), {"action": action, "_selected_action": [host.pk]}
    )
    assert response.status_code == 302
    host.refresh_from_db()
    assert (host.state, host.drain_now) == (state, drain_now)
    assert HostEvent.objects.filter(host=host, kind=kind, actor=admin).exists()


def test_resume_action_returns_host_to_active(admin_web, hosts):
    host = hosts["a100-1"]
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)
    admin_web.post(reverse("admin:scheduler_host_changelist"), {"action": "resume", "_selected_action": [host.pk]})
    host.refresh_from_db()
    assert host.state == Host.State.ACTIVE


def test_workload_cancel_action(admin_web, researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs())
    changelist = reverse("admin:scheduler_workload_changelist")
    admin_web.post(changelist, {"action": "cancel", "_selected_action": [workload.pk]})
    workload.refresh_from_db()
    assert workload.state == Workload.State.CANCELED


def test_budget_admin_shows_entitlement_per_cluster_beside_the_shares(admin, org_tree, cluster):
    from django.test import Client

    client = Client()
    client.force_login(admin)
    page = client.get("/admin/budgets/budget/").content.decode()

    # nlp has 2 of 3 shares of 20 GPUs over 168 h: 2,240 GPU-hours per window.
    assert "ntitlement (GPU-h per window)" in page
    assert "default: 2,240" in page
