"""tryout47b: submitting to a budget on hold (leadership's hold, or a cap of 0 GPU-hours that holds
new allocated work) said just "pending" on ``fairway submit``, in the API's answer and in the web
form's message; only ``--quote`` and ``fairway show`` named the hold. As a workload's own hold
(``do_submit_workload`` writes its reason ``held`` at once), the submission writes the budget's
reason, so every surface says it in ``fairway show``'s words (``scheduler.reports``)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from budgets.models import Budget
from scheduler.models import Workload
from scheduler.reports import explain_pending
from tests.cli.inprocess import run_cli

HELD = "Budget nlp is on hold: no new work of it starts until leadership releases it."


@pytest.fixture
def nlp_held(org_tree) -> None:
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(hold=True)


@pytest.fixture
def olmo_capped_at_0(org_tree) -> None:
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(
        cap_gpu_hours=Decimal(0), cap_period_days=7, on_cap=Budget.OnCap.HOLD
    )


def test_submit_names_the_budgets_hold_as_show_does(monkeypatch, researcher, cluster, nlp_held):
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--", "x")
    w = Workload.objects.get()
    assert (w.pending_reason, w.hold) == ("held", "")
    assert explain_pending(w).sentence == HELD
    assert out.splitlines()[1] == HELD
    assert HELD in run_cli(monkeypatch, researcher, "show", str(w.pk))


def test_the_api_answer_names_it(researcher_client, cluster, nlp_held):
    body = {"budget": "nlp/olmo", "cluster": "default", "gpu_model": "A100", "gpu_count": 1}
    answer = researcher_client.post(
        "/api/v1/workloads/", {**body, "command": ["x"], "min_runtime": "1h"}, format="json"
    ).json()
    assert answer["pending_reason"] == "held"
    assert answer["why_pending"][0] == HELD


def test_a_cap_of_0_holds_allocated_work_not_unallocated(monkeypatch, researcher, cluster, olmo_capped_at_0):
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--", "x")
    w = Workload.objects.get()
    assert (w.pending_reason, w.pending_detail) == ("budget_capped", {"budget": "nlp/olmo"})
    said = explain_pending(w).sentence
    assert said.startswith("Budget nlp/olmo has reached its cap (0 GPU-hours")
    assert out.splitlines()[1] == said
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--", "y")
    assert Workload.objects.get(name="y").pending_reason == ""  # unallocated: no cap holds it
    assert len(out.splitlines()) == 1


def test_a_nearer_cap_not_known_reached_says_nothing(monkeypatch, researcher, cluster, org_tree):
    # nlp capped at 0 (downgrade) under... nearer: olmo with a cap of 5 GPU-h, reached or not is the tick's
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=Decimal(5), on_cap=Budget.OnCap.HOLD)
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(cap_gpu_hours=Decimal(0), on_cap=Budget.OnCap.HOLD)
    run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--", "x")
    assert Workload.objects.get().pending_reason == ""


def test_the_web_forms_message_names_it(researcher, cluster, nlp_held):
    client = Client()
    client.force_login(researcher)
    answer = client.post(
        "/submit/",
        {
            "budget": "nlp/olmo",
            "cluster": "default",
            "gpu_model": "A100",
            "gpu_count": "1",
            "min_runtime": "1h",
            "command": "python train.py",
            "image": "ghcr.io/example/train:1",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:3000]
    said = [str(m) for m in get_messages(answer.wsgi_request)]
    w = Workload.objects.get()
    assert said == [f"Submitted {w.name} (#{w.pk}). {HELD}"]
