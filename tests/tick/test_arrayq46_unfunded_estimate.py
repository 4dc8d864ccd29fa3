"""arrayq46: a pending workload's stored estimate said "by 14:05" where the estimates run starts it
unfunded at its budget's downgrade cap (DESIGN.md §3.7: neither protected nor charged). The run
stores whether it does (``estimate_unfunded``), and the estimate's words say it: the API, the
workload's page, ``fairway show`` and the lists (docs/estimates.md "Caps in the simulation",
"Unfunded starts, stored")."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.test import Client
from django.utils import timezone

from budgets.models import Budget
from scheduler.estimates import store_estimates
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def _pending_behind_an_hour(researcher, outsider, org_tree, cluster, submit_kwargs):
    """vision/sam holds the 16 A100s for an hour, to its wall-time limit; nlp/olmo's 8 GPUs wait."""
    now = timezone.now()
    for _ in range(2):
        do_submit_workload(
            outsider,
            **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8, min_runtime_s=3600, max_runtime_s=3600),
        )
    run_tick(cluster.pk)
    Attempt.objects.filter(workload__budget=org_tree["vision/sam"]).update(
        started_at=now, protected_until=now + timedelta(hours=1)
    )
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, min_runtime_s=7200))
    run_tick(cluster.pk)
    store_estimates(cluster.pk, timezone.now())
    waiting.refresh_from_db()
    assert waiting.state == Workload.State.PENDING and waiting.estimated_start is not None
    return waiting


def test_an_estimate_at_a_downgrade_cap_says_unfunded(
    researcher, researcher_client, outsider, org_tree, cluster, submit_kwargs, monkeypatch
):
    # nlp/olmo at a cap of 0 GPU-hours that downgrades: it never lifts, its next start is unfunded
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=0, on_cap="downgrade")
    waiting = _pending_behind_an_hour(researcher, outsider, org_tree, cluster, submit_kwargs)
    grace = timedelta(seconds=settings.FAIRWAY["GRACE_PERIOD_S"])
    assert waiting.estimated_start <= timezone.now() + timedelta(hours=1) + 2 * grace  # sam's limit, its stop
    assert getattr(waiting, "estimate_unfunded", None) is True
    detail = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()
    assert detail["estimate_unfunded"] is True
    words = detail["estimated_start_words"]
    assert "at the latest (if nothing else ends earlier), unfunded: its budget is at its cap then, so it " in words
    listed = researcher_client.get("/api/v1/workloads/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert next(r for r in rows if r["id"] == waiting.pk)["estimate_unfunded"] is True
    assert detail["estimated_start_words"] in run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert " (unfunded)" in run_cli(monkeypatch, researcher, "ls")
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{waiting.pk}/").content.decode()
    assert "unfunded: its budget is at its cap then" in page
    assert " (unfunded)" in browser.get("/workloads/").content.decode()


def test_an_estimate_under_no_cap_says_nothing_of_it(
    researcher, researcher_client, outsider, org_tree, cluster, submit_kwargs, monkeypatch
):
    waiting = _pending_behind_an_hour(researcher, outsider, org_tree, cluster, submit_kwargs)
    assert getattr(waiting, "estimate_unfunded", None) is False
    detail = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()
    assert detail["estimate_unfunded"] is False and "unfunded" not in detail["estimated_start_words"]
    assert "(unfunded)" not in run_cli(monkeypatch, researcher, "ls")
