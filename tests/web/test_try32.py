"""A new user's tryout (try32): copy that told the user something false, one test each."""

from __future__ import annotations

from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.reports import explain_pending
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def test_the_workload_page_says_allocated_work_is_charged_for_every_second_not_only_its_minimum_runtime(
    start_running, browser
):
    # The page said "protected and charged for 30m after each start": charged only for the minimum
    # runtime. It is charged for every second it holds GPUs (DESIGN.md §1), protected for M.
    w = start_running(min_runtime_s=1800)[0]
    page = browser.get(f"/workloads/{w.pk}/").content.decode()
    assert "charged for 30m" not in page
    assert "protected for 30m after each start; charged for every second it holds GPUs" in page


def test_unallocated_work_short_of_gpus_does_not_say_none_are_free_when_some_are(
    start_running, researcher, cluster, submit_kwargs, monkeypatch
):
    # Given 4 of 16 A100 busy, an unallocated 16-GPU gang cannot start: 12 are free
    start_running(gpu_count=4)
    gang = do_submit_workload(researcher, **submit_kwargs(gpu_count=16, min_runtime_s=0))
    run_tick(cluster.pk)
    gang.refresh_from_db()
    assert gang.state == Workload.State.PENDING and gang.pending_reason == "insufficient_gpus"
    # Then its reason does not say that none are free (the page, the API and the CLI read it)
    sentence = explain_pending(gang).sentences[0]
    assert "none are free" not in sentence
    assert sentence == (
        "Unallocated work (minimum runtime 0) only uses GPUs that no allocated work can use, "
        "and not enough are free now for its 16 × A100."
    )
    assert "not enough are free now for its 16 × A100" in run_cli(monkeypatch, researcher, "show", str(gang.pk))


def test_the_metrics_page_counts_one_hour_in_the_singular(start_running, browser):
    # The chart's legend read "1 hours" in a lab's first hour.
    start_running()
    page = browser.get("/metrics/").content.decode()
    assert "1 hours" not in page and "1 hour</span>" in page


def test_work_that_ran_under_a_second_has_an_elapsed_time_not_the_never_started_dash(
    start_running, browser, researcher, monkeypatch
):
    # A `sleep 1` reported late on a busy server: started and ended at the same recorded instant.
    # `ls`, `show` and the web list wrote "-" (never started) beside its start time.
    w = start_running(min_runtime_s=0, gpu_count=1)[0]
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0, age_s=5.0)
    w.refresh_from_db()
    assert w.state == Workload.State.SUCCEEDED
    row = next(ln for ln in run_cli(monkeypatch, researcher, "ls", "--all").splitlines() if ln.split()[0] == str(w.pk))
    assert row.split()[-3] == "0"  # ELAPSED, before CHARGED ("free") and PREEMPT
    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert [ln.split()[-1] for ln in shown.splitlines() if ln.strip().startswith("elapsed")] == ["0"]
    page = browser.get("/workloads/").content.decode()
    assert '<td class="num small acct-elapsed">0</td>' in page  # as ls and show: one formatter


def test_a_gpu_count_past_the_column_is_refused_as_too_many_not_as_below_one(researcher_client):
    # 3,000,000,000 GPUs was answered "gpu_count is an integer >= 1."
    body = {"budget": "nlp/olmo", "cluster": "default", "command": ["x"], "min_runtime": "10m"}
    answer = researcher_client.post("/api/v1/workloads/quote/", {**body, "gpu_count": 3_000_000_000}, format="json")
    assert answer.status_code == 400
    message = answer.json()["gpu_count"][0]
    assert ">= 1" not in message and "3000000000 GPUs is more than" in message
    assert researcher_client.post("/api/v1/workloads/quote/", {**body, "gpu_count": 0}, format="json").json()[
        "gpu_count"
    ] == ["gpu_count is an integer >= 1."]


def test_a_running_attempt_on_a_silent_host_says_so_on_its_page(start_running, browser):
    # The page said "running" with its charge growing while its host was offline; if the agent
    # stays silent the attempt ends lost, charged up to the last heartbeat (DESIGN.md §4).
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Host

    w = start_running()[0]
    attempt = Attempt.objects.select_related("host").get(workload=w)
    heard = timezone.now() - timedelta(seconds=40)
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.OFFLINE, last_heartbeat=heard)
    page = browser.get(f"/workloads/{w.pk}/").content.decode()
    assert f"{attempt.host.name} silent since" in page
    assert "ends lost at" in page and "charged up to its last heartbeat" in page
