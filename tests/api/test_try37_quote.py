"""try37: the array quote's note names the minimum runtime as the table's lines do."""

from __future__ import annotations

URL = "/api/v1/workloads/quote/"


def test_an_array_quote_names_the_minimum_runtime_as_its_lines(researcher_client, submission, cluster):
    """``-M 20m --array 0-3%2``: the note read "at your minimum runtime 0.333333 h" under lines
    that say "20m"; it says "20m" (and 1h30m, not "1.5 h")."""
    for written, shown in (("20m", "20m"), ("1h30m", "1h30m"), ("2h", "2h")):
        body = researcher_client.post(URL, submission(array="0-3%2", min_runtime=written), format="json").json()
        note = next(n for n in body["notes"] if "array" in n)
        assert f"at your minimum runtime {shown}, would charge" in note, note


def test_a_search_that_found_no_start_says_so_on_every_surface(
    researcher, researcher_client, submission, cluster, monkeypatch
):
    """The quote said "none before <a week on>"; once submitted, the page, the API and ``fairway
    show`` said "Not known yet: estimates are refreshed every 60 s…" after the estimates run had
    searched a whole window and found none, which reads as "come back later". The run records
    that it found none (``no_start_found``), the words say so, and a placement forgets it."""
    from django.test import Client
    from django.utils import timezone

    from scheduler.estimates import store_estimates
    from scheduler.models import Workload
    from scheduler.tick import run_tick
    from tests.cli.inprocess import run_cli

    h100 = submission(gpu_model="H100", min_runtime="1h")  # all 4 H100s of h100-1, no wall-time limit
    first = researcher_client.post("/api/v1/workloads/", h100, format="json").json()["id"]
    run_tick(cluster.pk)
    second = researcher_client.post("/api/v1/workloads/", h100, format="json").json()["id"]
    run_tick(cluster.pk)
    assert Workload.objects.get(pk=first).state != Workload.State.PENDING
    before = researcher_client.get(f"/api/v1/workloads/{second}/").json()["estimated_start_words"]
    assert before.startswith("Not known yet")

    store_estimates(cluster.pk, timezone.now())
    w = Workload.objects.get(pk=second)
    assert w.state == Workload.State.PENDING and w.estimated_start is None and w.no_start_found
    words = researcher_client.get(f"/api/v1/workloads/{second}/").json()["estimated_start_words"]
    assert words.startswith("No start within the next 7 days"), words
    assert f"estimated start: {words}" in run_cli(monkeypatch, researcher, "show", str(second))
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{second}/").content.decode()
    assert "No start within the next 7 days" in page

    from scheduler import lifecycle
    from scheduler.models import Attempt

    attempt = Attempt.objects.get(workload_id=first)
    assert lifecycle.attempt_exited(attempt.host, attempt.pk, 0)  # the first ends: its GPUs are free
    run_tick(cluster.pk)
    placed = Workload.objects.get(pk=second)
    assert placed.state != Workload.State.PENDING and not placed.no_start_found


def test_a_workload_with_every_host_of_its_model_drained_is_not_told_the_gpus_are_held(
    researcher, researcher_client, submission, cluster, admin
):
    """With its model's only host drained and idle, the page said "no work it may preempt would
    make room (the GPUs are held by its own budget's work or by budgets further below their
    share)", sending the reader to look for work that is not there."""
    from scheduler.models import Host
    from scheduler.services import do_set_host_state
    from scheduler.tick import run_tick

    do_set_host_state(admin, Host.objects.get(name="h100-1"), "draining", "maintenance")
    run_tick(cluster.pk)
    assert Host.objects.get(name="h100-1").state == "drained"
    wid = researcher_client.post("/api/v1/workloads/", submission(gpu_model="H100"), format="json").json()["id"]
    run_tick(cluster.pk)
    detail = researcher_client.get(f"/api/v1/workloads/{wid}/").json()
    assert detail["pending_reason"] == "insufficient_gpus"
    why = " ".join(detail["why_pending"])
    assert "held by its own budget" not in why
    assert "none of them is on a host that takes new work" in why and "drained: h100-1" in why
    # with an active host of the model the sentence is unchanged
    wid2 = researcher_client.post("/api/v1/workloads/", submission(gpu_count=16), format="json").json()["id"]
    first = researcher_client.post("/api/v1/workloads/", submission(gpu_count=16), format="json").json()["id"]
    run_tick(cluster.pk)
    waiting = [
        w for w in (wid2, first) if researcher_client.get(f"/api/v1/workloads/{w}/").json()["state"] == "pending"
    ]
    assert waiting
    assert "held by its own budget" in " ".join(
        researcher_client.get(f"/api/v1/workloads/{waiting[0]}/").json()["why_pending"]
    )


def test_a_quote_says_what_its_charge_is(researcher_client, submission, cluster):
    """The quote's "charges 8.00 GPU-h" for 8 GPUs × 1 h read as a flat price, while a workload that
    ends at once is charged nothing; a note says the charge is GPUs × M, paid by the second."""
    body = researcher_client.post(URL, submission(min_runtime="1h"), format="json").json()
    assert any(n.startswith("A line's charge is its GPUs × that minimum runtime") for n in body["notes"])
