"""rules48: allocated work submitted into a budget whose nearest cap is 0 GPU-hours with
``on_cap=downgrade`` runs unallocated (unfunded: free, preemptible at any time), and the submission
said nothing of it: ``fairway submit``, the API's answer and the web form's message now say it, as
they say ``held`` and a cap that holds (tryout47b), in ``fairway show``'s words
(``scheduler.reports.unfunded_sentence``), from the policy's verdict
(``scheduler.policy.queues.submission_verdict``)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from budgets.models import Budget
from scheduler.models import Workload
from scheduler.reports import explain_pending, unfunded_sentence
from tests.cli.inprocess import run_cli

SAID = unfunded_sentence("nlp", " (0 GPU-hours of allocated use per 7 days)")


@pytest.fixture
def nlp_downgrades_at_0(org_tree) -> None:
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(
        cap_gpu_hours=Decimal(0), cap_period_days=7, on_cap=Budget.OnCap.DOWNGRADE
    )


def test_the_sentence_says_free_and_preemptible() -> None:
    assert SAID.startswith("Budget nlp has reached its cap (0 GPU-hours of allocated use per 7 days), so ")
    assert "unallocated (unfunded)" in SAID and "preemptible at any time" in SAID and "free" in SAID


def test_submit_says_it_runs_unfunded(monkeypatch, researcher, cluster, nlp_downgrades_at_0):
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--", "x")
    w = Workload.objects.get()
    assert (w.pending_reason, w.pending_detail) == ("budget_capped", {"budget": "nlp", "unfunded": True})
    assert explain_pending(w).sentence == SAID
    assert out.splitlines()[1] == SAID
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--", "y")
    assert Workload.objects.get(name="y").pending_reason == ""  # unallocated already: nothing to say
    assert len(out.splitlines()) == 1


def test_the_api_answer_says_it(researcher_client, cluster, nlp_downgrades_at_0):
    body = {"budget": "nlp/olmo", "cluster": "default", "gpu_model": "A100", "gpu_count": 1}
    answer = researcher_client.post(
        "/api/v1/workloads/", {**body, "command": ["x"], "min_runtime": "1h"}, format="json"
    ).json()
    assert (answer["pending_reason"], answer["pending_detail"]) == (
        "budget_capped",
        {"budget": "nlp", "unfunded": True},
    )
    assert answer["why_pending"][0] == SAID


def test_a_nearer_cap_above_0_leaves_it_to_the_tick(monkeypatch, researcher, cluster, org_tree, nlp_downgrades_at_0):
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=Decimal(5), on_cap=Budget.OnCap.HOLD)
    run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--", "x")
    assert Workload.objects.get().pending_reason == ""


def test_the_web_forms_message_says_it(researcher, cluster, nlp_downgrades_at_0):
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
    w = Workload.objects.get()
    assert [str(m) for m in get_messages(answer.wsgi_request)] == [f"Submitted {w.name} (#{w.pk}). {SAID}"]
