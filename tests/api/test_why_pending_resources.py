"""A workload blocked only by CPUs or memory (DESIGN.md §3.3, §3.8): its reason's ``resources``
is said in the same sentence by the page, the API's why-pending fields and the CLI."""

from __future__ import annotations

import html

import pytest
from rest_framework.test import APIClient

from scheduler.models import Attempt, Host, Workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli

G = 1 << 30


@pytest.mark.parametrize(
    ("asks", "short", "words"),
    [({"cpus": 40}, ["cpus"], "40 CPUs"), ({"memory": "400G"}, ["memory"], "400G of memory")],
)
def test_page_api_and_cli_say_what_is_short(
    researcher, researcher_client, submission, cluster, monkeypatch, asks, short, words
):
    """Given each A100 host running a 1-GPU workload of nlp/olmo holding 40 of its 64 CPUs (or
    400G of 512G), when nlp/olmo asks for one more GPU with as much, then its GPUs are free but
    the CPUs (memory) are not, and its own budget's work is never room: ``insufficient_gpus``
    with ``resources``, and every surface says what is short in one sentence."""
    Host.objects.filter(name__startswith="a100").update(cpus=64, memory_bytes=512 * G)
    for _ in range(2):
        made = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1, **asks), format="json")
        assert made.status_code == 201
    run_tick(cluster.pk)
    assert Attempt.objects.count() == 2
    wid = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1, **asks), format="json").json()["id"]
    run_tick(cluster.pk)
    waiting = Workload.objects.get(pk=wid)
    assert waiting.state == "pending" and waiting.pending_reason == "insufficient_gpus"
    assert waiting.pending_detail.get("resources") == short

    body = researcher_client.get(f"/api/v1/workloads/{wid}/").json()
    sentence = body["pending_explanation"]["sentence"]
    assert f"Not enough {'CPUs' if short == ['cpus'] else 'memory'} for it" in sentence and words in sentence
    assert "GPUs are free" not in sentence
    assert sentence in body["why_pending"] and sentence in body["pending_explanation"]["sentences"]

    page = APIClient()
    page.force_login(researcher)
    assert sentence in html.unescape(page.get(f"/workloads/{wid}/").content.decode())

    out = run_cli(monkeypatch, researcher, "show", str(wid))
    assert sentence in " ".join(out.split())


@pytest.mark.parametrize("reason", ["reserved_for_other", "protected_work", "fair_share"])
def test_every_reason_that_resources_worsened_says_so(researcher_client, submission, cluster, reason):
    """A reason that GPUs alone would have made better (CPUs short where GPUs are free) names
    what is short right after its decision, in the API's sentences and ``why_pending`` alike."""
    wid = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1, cpus=40), format="json").json()["id"]
    detail = {"host": "a100-1", "protected_until": 1_900_000_000, "resources": ["cpus", "memory"]}
    Workload.objects.filter(pk=wid).update(pending_reason=reason, pending_detail=detail)
    body = researcher_client.get(f"/api/v1/workloads/{wid}/").json()
    said = body["pending_explanation"]["sentences"][1]
    assert said.startswith("CPUs and memory are what is short, not A100 GPUs: it asks for 40 CPUs and its per-GPU")
    assert body["why_pending"][1] == said
