"""left41: a workload's wait is its whole time in the queue, across requeues, and its requeues count
every cause that sent it back (preempted, drained, GPU fault, lost, a failed start): ``fairway ls``
said WAIT = submission to the first start and PREEMPT = 0 for a workload drained, then faulted.
One source (``scheduler.accounting.accounting``); the API, the CLI and the page agree."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler import lifecycle
from scheduler.accounting import ATTEMPT_ROW, account_from_attempts, accounting, with_accounting
from scheduler.models import Attempt, Host, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli

M = 60


def _run(attempt: Attempt, start, stop, reason: str) -> None:
    lifecycle.attempt_started(attempt.host, attempt.pk, now=start)
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=stop, stop_reason=reason)
    for host in Host.objects.filter(gpus__attempt_links__attempt=attempt).distinct():
        lifecycle.attempt_exited(host, attempt.pk, None, now=stop)


@pytest.fixture
def drained_then_faulted(researcher, cluster, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """Submitted 4 h ago; attempt 1 ran 3h30m → 3h ago (drained), attempt 2 ran 2 h → 1 h ago
    (GPU fault), attempt 3 has run 30 min: queued 30 + 60 + 30 min, ran 30 + 60 + 30 min."""
    at = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: at)
    with django_capture_on_commit_callbacks(execute=True):
        w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4), submitted_at=at - timedelta(hours=4))
        for start, stop, reason in ((210, 180, "drained"), (120, 60, "gpu_fault")):
            run_tick(cluster.pk)
            attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
            _run(attempt, at - timedelta(minutes=start), at - timedelta(minutes=stop), reason)
        run_tick(cluster.pk)
        third = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
        lifecycle.attempt_started(third.host, third.pk, now=at - timedelta(minutes=30))
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING
    assert list(Attempt.objects.filter(workload=w).order_by("number").values_list("end_reason", flat=True)) == [
        "drained",
        "gpu_fault",
        "",
    ]
    return w, at


def test_wait_is_the_whole_queue_time_and_requeues_count_every_cause(drained_then_faulted, researcher_client):
    w, at = drained_then_faulted
    listed = next(r for r in researcher_client.get("/api/v1/workloads/").json()["results"] if r["id"] == w.pk)
    acct = listed["accounting"]
    assert acct["wait_s"] == 120 * M  # 30 min before the first start + 60 between the runs + 30
    assert acct["elapsed_s"] == 120 * M
    assert acct["requeues"] == 2 and acct["preemptions"] == 0  # drained, GPU fault: none preempted
    assert acct["started_at"] == (at - timedelta(minutes=30)).isoformat().replace(
        "+00:00", "Z"
    )  # its current run (idle58)
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["accounting"] == acct


def test_cli_api_and_page_agree(drained_then_faulted, researcher, researcher_client, monkeypatch):
    w, _at = drained_then_faulted
    acct = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["accounting"]
    header, *lines = run_cli(monkeypatch, researcher, "ls").splitlines()
    assert "REQUEUES" in header and "PREEMPT " not in header + " "
    row = next(line for line in lines if line.split()[0] == str(w.pk))
    assert row.split()[-5:] == ["2h", "2h", "8.00", "GPU-h", str(acct["requeues"])]
    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert "wait:            2h\n" in shown and "requeues:        2 (0 preempted)\n" in shown
    page = APIClient()
    page.force_login(researcher)
    html = page.get("/workloads/").content.decode()
    assert ">requeues</th>" in html and ">preempted</th>" not in html
    assert '<td class="num small acct-requeues">2</td>' in html
    assert '<td class="num small acct-wait">2h 0m</td>' in html or '<td class="num small acct-wait">2h</td>' in html


def test_the_three_readers_agree(drained_then_faulted):
    """The SQL aggregates (lists), the rows in memory (a page) and the prefetched detail give the
    same accounting, requeues and wait included."""
    w, at = drained_then_faulted
    by_sql = accounting(with_accounting(Workload.objects.filter(pk=w.pk)).get(), at)
    rows = Attempt.objects.filter(workload=w).values_list(*ATTEMPT_ROW)
    in_memory = accounting(account_from_attempts(Workload.objects.get(pk=w.pk), rows), at)
    assert by_sql == in_memory
    assert by_sql["requeues"] == 2 and by_sql["wait_s"] == 120 * M


def test_a_failed_start_that_fails_the_workload_is_no_requeue(researcher, cluster, submit_kwargs):
    """Requeued after ``failed_to_start`` at most ``MAX_START_FAILURES`` times: the last one ends it."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    now = timezone.now()
    for _ in range(lifecycle.MAX_START_FAILURES + 1):
        run_tick(cluster.pk)
        attempt = Attempt.objects.get(workload=w, ended_at__isnull=True)
        lifecycle.attempt_failed_to_start(None, attempt.pk, "image pull", now=now)
    w.refresh_from_db()
    assert w.state == Workload.State.FAILED
    acct = accounting(with_accounting(Workload.objects.filter(pk=w.pk)).get(), now)
    assert acct["requeues"] == lifecycle.MAX_START_FAILURES
