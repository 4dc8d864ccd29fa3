"""try41: the dashboard's "My budgets" marks a budget on hold, archived or capped, as the budgets page does."""

from __future__ import annotations

from decimal import Decimal

from django.test import Client
from django.utils import timezone

from budgets.models import Budget


def test_the_dashboard_marks_hold_archive_and_cap_as_the_budgets_page(researcher, org_tree, cluster):
    """alice's workload read "budget capped" on her dashboard, whose "My budgets" showed nlp/olmo
    with no cap, and an archived nlp/bert (no new work) looked live; the budgets page marked both."""
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=Decimal("5"), cap_period_days=7, hold=True)
    archived = Budget.objects.create(name="old", parent=org_tree["nlp"], archived_at=timezone.now())
    browser = Client()
    browser.force_login(researcher)
    dashboard = browser.get("/").content.decode()
    budgets = browser.get("/budgets/").content.decode()
    for page in (dashboard, budgets):
        assert '<span class="badge pending">hold</span>' in page
        assert "cap 0 of 5 GPU-h / 7 d" in page
    assert archived.pk and '<span class="badge">archived</span>' in budgets


def test_the_admins_approval_says_what_it_registered_and_the_hosts_state(admin, hosts):
    """The approval answered "GPU inventory of 1 host(s) approved.": not which GPUs left, nor that
    the host (drained by a GPU fault) stays drained until resumed."""
    from scheduler.models import Host

    host = hosts["a100-1"]
    reported = [
        {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mb": g.memory_mb, "health": "healthy"}
        for g in host.gpus.order_by("index")[:7]
    ]
    Host.objects.filter(pk=host.pk).update(state="drained", pending_inventory={"gpus": reported, "cordoned": False})
    browser = Client()
    browser.force_login(admin)
    page = browser.post(
        "/admin/scheduler/host/", {"action": "approve_inventory", "_selected_action": [host.pk]}, follow=True
    ).content.decode()
    assert "a100-1: GPU inventory approved: 7 × A100; GPU(s) 7 removed; the host is drained." in page
