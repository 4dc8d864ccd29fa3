"""Why pending in numbers (issue 13, point 2): the tick stores only what it decided (no drifting
ratios); the API, the page and the CLI derive the GPU-hours and ratios from the one standing and
name the blocking work with its budget and protection end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from budgets.models import UsageEntry
from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


@pytest.fixture
def blocked(researcher, outsider, cluster, org_tree, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """vision/sam runs two protected 8-GPU workloads on the A100s; nlp/olmo, with much more usage
    this week, waits for 8 A100s: ``fair_share`` (rule 2 forbids taking vision's work)."""
    now = timezone.now()
    UsageEntry.objects.create(
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        start=now - timedelta(days=2),
        end=now - timedelta(days=1),
        gpus=20,
    )
    with django_capture_on_commit_callbacks(execute=True):
        rivals = [
            do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8)) for _ in range(2)
        ]
        run_tick(cluster.pk)
        for attempt in Attempt.objects.filter(workload__cluster=cluster).select_related("host"):
            lifecycle.attempt_started(attempt.host, attempt.pk)
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
        run_tick(cluster.pk)
    waiting.refresh_from_db()
    return waiting, rivals


def test_stored_reason_names_the_blocking_work_and_does_not_drift(blocked, cluster, monkeypatch):
    waiting, rivals = blocked
    assert waiting.pending_reason == "fair_share"
    detail = dict(waiting.pending_detail)
    assert "ratio" not in detail and "other_ratio" not in detail  # numbers that move every tick
    assert detail["other_budget"] == "vision" and detail["budget"] == "nlp"
    assert set(detail["blocking"]) <= {str(r.pk) for r in rivals}
    assert detail["blocking"]
    # Ten minutes later the usage and ratios have moved, the decision has not: nothing to write.
    later = timezone.now() + timedelta(minutes=10)
    monkeypatch.setattr(timezone, "now", lambda: later)
    run_tick(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.pending_detail == detail


def test_api_page_and_cli_explain_with_numbers_and_blocking_work(blocked, researcher, researcher_client, monkeypatch):
    waiting, rivals = blocked
    body = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()
    why = body["pending_explanation"]
    assert why["reason"] == "fair_share"
    mine, theirs = why["numbers"]["budget"], why["numbers"]["other_budget"]
    assert mine["path"] == "nlp" and theirs["path"] == "vision"
    assert mine["used_gpu_hours"] == 480.0  # 20 GPUs × 24 h of history
    assert mine["committed_gpu_hours"] == 8.0  # this workload's 8 GPUs × 1 h
    assert theirs["committed_gpu_hours"] > 0 and theirs["entitled_gpu_hours"] > 0
    assert mine["ratio"] > theirs["ratio"] and mine["ratio_text"] != theirs["ratio_text"]
    assert why["numbers"]["first"] == "other_budget"
    blocking = {b["workload"]: b for b in why["blocking"]}
    assert set(blocking) <= {r.pk for r in rivals} and blocking
    assert all(b["budget"] == "vision/sam" and b["protected_until"] for b in blocking.values())
    assert f"{mine['ratio_text']}×" in why["sentence"] and f"{theirs['ratio_text']}×" in why["sentence"]
    assert "vision goes first" in why["sentence"]
    assert not any("that work" in line for line in body["why_pending"])  # the work in the way is named

    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    assert 'class="why-numbers' in html and f"{mine['ratio_text']}×" in html
    assert f"#{next(iter(blocking))}" in html and "vision/sam" in html

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert "vision goes first" in out
    assert f"ratio {mine['ratio_text']}×" in out and f"ratio {theirs['ratio_text']}×" in out
    assert f"blocking: #{next(iter(blocking))}" in out


def test_not_pending_explains_nothing(blocked, researcher_client):
    _waiting, rivals = blocked
    body = researcher_client.get(f"/api/v1/workloads/{rivals[0].pk}/").json()
    assert body["pending_explanation"] == {"reason": "", "sentence": "", "numbers": {}, "blocking": []}
    assert Workload.objects.get(pk=rivals[0].pk).state == Workload.State.RUNNING
