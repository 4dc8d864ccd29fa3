"""upd44: the workload page's "Change this pending workload" form, in a real browser: filled with
the request as it is, a refusal shown beside its field with the typed values kept, a change saved
(the ``updated`` event on the page), and no form once the workload is not pending or for someone
who may not cancel it."""

from __future__ import annotations

from scheduler import services
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.conftest import PASSWORD


def test_the_edit_form_changes_a_pending_workload(new_page, researcher, teammate, submit_kwargs, monkeypatch):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=7200, max_runtime_s=14400))
    # No tick after the update: it would start the workload (and, on PostgreSQL, hold a connection
    # of the in-process worker past the test).
    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{w.pk}/")
    page.click("#edit-workload summary")
    filled = {name: page.input_value(f"#edit_{name}") for name in ("gpu_count", "min_runtime", "max_runtime", "budget")}
    # A refusal: the wall-time limit below the minimum runtime, beside its field; typed values kept.
    page.fill("#edit_gpu_count", "8")
    page.fill("#edit_max_runtime", "1h")
    page.click("#edit-save")
    refused = page.inner_text("#edit_max_runtime-errors")
    kept = page.input_value("#edit_gpu_count")
    still = Workload.objects.get(pk=w.pk).gpu_count
    # Then a good change.
    page.fill("#edit_max_runtime", "12h")
    page.fill("#edit_min_runtime", "30m")
    page.click("#edit-save")
    page.wait_for_url(f"/workloads/{w.pk}/")
    body = page.inner_text("body")
    facts = page.inner_text(".facts")
    # Someone who may not cancel it sees no form.
    other = new_page()
    log_in(other, "teammate")
    other.goto(f"/workloads/{w.pk}/")
    teammate_form = other.locator("#edit-form").count()

    assert filled == {"gpu_count": "4", "min_runtime": "2h", "max_runtime": "4h", "budget": "nlp/olmo"}
    assert "must be at least the minimum runtime" in refused and kept == "8" and still == 4
    row = Workload.objects.get(pk=w.pk)
    assert (row.gpu_count, row.min_runtime_s, row.max_runtime_s) == (8, 1800, 12 * 3600)
    assert "it keeps its place in its budget's queue" in body
    assert "changed GPUs 4 → 8, minimum runtime 2h → 30m, wall-time limit 4h → 12h" in body
    assert "8 × A100" in facts
    assert teammate_form == 0


def test_once_it_runs_the_form_offers_only_the_wall_time_limit(client, researcher, submit_kwargs):
    """ext50: of a running workload only the wall-time limit changes (docs/jobs.md); a form posted
    with the other fields is refused as before, and a finished one has no form."""
    w = do_submit_workload(researcher, **submit_kwargs())
    client.login(username="researcher", password=PASSWORD)
    assert b'id="edit_gpu_count"' in client.get(f"/workloads/{w.pk}/").content
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)

    page = client.get(f"/workloads/{w.pk}/").content
    assert b'id="edit_max_runtime"' in page and b'id="edit_gpu_count"' not in page
    r = client.post(f"/workloads/{w.pk}/update/", {"gpu_count": "2", "min_runtime": "1h", "retries": "0"})
    assert r.status_code == 409 and b"Only a pending workload can be changed" in r.content
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED)
    assert b'id="edit-form"' not in client.get(f"/workloads/{w.pk}/").content


def test_the_limit_of_a_running_workload_in_a_browser(new_page, live_server, researcher, submit_kwargs, monkeypatch):
    """ext50: the owner sees only the wall-time limit, a raise is refused beside it, a lowering is saved."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=3600, max_runtime_s=4 * 3600))
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)
    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    monkeypatch.setattr(services, "request_estimates_on_commit", lambda cluster_id: None)
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{w.pk}/")
    summary = page.inner_text("#edit-workload summary")
    page.click("#edit-workload summary")
    note = page.inner_text("#edit-limit-note")
    filled = page.input_value("#edit_max_runtime")
    others = page.locator("#edit_gpu_count, #edit_min_runtime, #edit_budget").count()
    page.fill("#edit_max_runtime", "5h")
    page.click("#edit-save")
    refused = page.inner_text("#edit_max_runtime-errors")
    still = Workload.objects.get(pk=w.pk).max_runtime_s
    page.fill("#edit_max_runtime", "2h")
    page.click("#edit-save")
    page.wait_for_url(f"{live_server.url}/workloads/{w.pk}/")
    body = page.inner_text("body")

    assert summary == "Change the wall-time limit"
    assert "only an admin may raise or remove it" in note
    assert (filled, others) == ("4h", 0)
    assert "Only an admin" in refused and still == 4 * 3600
    assert Workload.objects.get(pk=w.pk).max_runtime_s == 2 * 3600
    assert "wall-time limit now 2h, counted from its start" in body
    assert "changed wall-time limit 4h → 2h" in body
