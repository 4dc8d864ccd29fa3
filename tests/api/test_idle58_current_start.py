"""idle58: a running workload requeued earlier showed its FIRST attempt's start as "started" in
``fairway ls`` / ``show``, the web list and the API, where squeue shows the current run's start.
Every surface reads ``scheduler.accounting.accounting`` (``run_start``): the current run's start
while one runs (none while its new attempt is only starting, none back in the queue: left57), the
last run's once it ended; the wait, elapsed, charged and requeues still count every run (docs/jobs.md)."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client

from fairway_cli.numbers import instant_text
from scheduler import lifecycle
from scheduler.accounting import ATTEMPT_ROW, account_from_attempts, accounting, with_accounting
from scheduler.models import Attempt, Workload
from scheduler.tick import run_tick
from tests.api.test_left41_requeues import _run, drained_then_faulted  # noqa: F401 -- the fixture
from tests.cli.inprocess import run_cli

M = 60


def _iso(at) -> str:
    return at.isoformat().replace("+00:00", "Z")


def test_a_running_requeued_workload_shows_its_current_runs_start_everywhere(
    drained_then_faulted,  # noqa: F811 -- the imported fixture
    researcher,
    researcher_client,
    monkeypatch,
):
    w, at = drained_then_faulted  # runs 1 and 2 ended; run 3 started 30 minutes ago
    current = at - timedelta(minutes=30)
    listed = next(r for r in researcher_client.get("/api/v1/workloads/").json()["results"] if r["id"] == w.pk)
    assert listed["accounting"]["started_at"] == _iso(current)
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["accounting"]["started_at"] == _iso(current)
    assert listed["accounting"]["wait_s"] == 120 * M and listed["accounting"]["requeues"] == 2  # every run counts

    head, *lines = run_cli(monkeypatch, researcher, "ls").splitlines()
    row = next(line for line in lines if line.split()[0] == str(w.pk))
    column = head.index("STARTED")
    assert row[column:].startswith(instant_text(current)), (head, row)
    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert f"started:         {instant_text(current)}\n" in shown, shown

    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/workloads/").content.decode()
    row_html = page[page.index(f">{w.pk}</a>") :].split("</tr>", 1)[0]
    assert f'<td class="small muted">{instant_text(current)}</td>' in row_html, row_html
    assert instant_text(at - timedelta(minutes=210)) not in row_html


def test_starting_again_shows_no_start_and_ended_shows_the_last_runs(
    drained_then_faulted,  # noqa: F811 -- the imported fixture
    cluster,
    django_capture_on_commit_callbacks,
):
    w, at = drained_then_faulted
    third = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)

    def started() -> object:
        by_sql = accounting(with_accounting(Workload.objects.filter(pk=w.pk)).get(), at)
        rows = Attempt.objects.filter(workload=w).values_list(*ATTEMPT_ROW)
        in_memory = accounting(account_from_attempts(Workload.objects.get(pk=w.pk), rows), at)
        assert by_sql == in_memory  # the readers agree
        return by_sql["started_at"]

    with django_capture_on_commit_callbacks(execute=True):
        _run(third, at - timedelta(minutes=30), at - timedelta(minutes=20), "drained")
        run_tick(cluster.pk)  # placed again: starting
    assert Workload.objects.get(pk=w.pk).state == Workload.State.STARTING
    assert started() is None  # its new run has not started: no earlier run's start
    fourth = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.attempt_started(fourth.host, fourth.pk, now=at - timedelta(minutes=10))
        lifecycle.attempt_exited(fourth.host, fourth.pk, 0, now=at - timedelta(minutes=5))
    assert Workload.objects.get(pk=w.pk).state == Workload.State.SUCCEEDED
    assert started() == at - timedelta(minutes=10)  # its last run's, as sacct shows a requeued job
