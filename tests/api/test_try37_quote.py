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
