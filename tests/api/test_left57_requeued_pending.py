"""left57: a pending workload that was requeued showed STARTED and ELAPSED of its earlier attempts
in ``fairway ls`` (and the page, the API), read as running. As squeue: one back in the queue shows
no start and no run time; its attempts' history (``fairway show``, the page's attempts,
``fairway history``) keeps the earlier runs, and WAIT, CHARGED and REQUEUES count them (docs/jobs.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.api.test_left41_requeues import _run
from tests.cli.inprocess import run_cli

M = 60


@pytest.fixture
def requeued(researcher, cluster, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """Submitted 2 h ago, ran 1h30m → 1 h ago (drained), pending since."""
    at = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: at)
    with django_capture_on_commit_callbacks(execute=True):
        w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4), submitted_at=at - timedelta(hours=2))
        run_tick(cluster.pk)
        attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
        _run(attempt, at - timedelta(minutes=90), at - timedelta(minutes=60), "drained")
    w.refresh_from_db()
    assert w.state == Workload.State.PENDING
    return w


def test_a_requeued_pending_workload_has_no_start_nor_elapsed_in_the_list(requeued, researcher_client):
    listed = next(r for r in researcher_client.get("/api/v1/workloads/").json()["results"] if r["id"] == requeued.pk)
    acct = listed["accounting"]
    assert (acct["started_at"], acct["elapsed_s"]) == (None, 0)
    assert (acct["wait_s"], acct["requeues"]) == (90 * M, 1)  # the totals keep the earlier run
    assert acct["charged_gpu_hours"] > 0
    detail = researcher_client.get(f"/api/v1/workloads/{requeued.pk}/").json()
    assert detail["accounting"] == acct
    history = researcher_client.get("/api/v1/workloads/history/").json()["results"]
    assert [(r["workload"], r["elapsed_s"]) for r in history] == [(requeued.pk, 30 * M)]  # the earlier run kept


def test_fairway_ls_and_the_page_say_it_likewise(requeued, researcher, monkeypatch):
    out = run_cli(monkeypatch, researcher, "ls")
    head, row = out.splitlines()[:2]
    started = head.index("STARTED")
    assert row[started : started + 2].strip() in {"-", ""}, out
    elapsed = head.index("ELAPSED")
    assert row[elapsed : elapsed + 7].strip() == "-", out
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/workloads/").content.decode()
    row_html = page[page.index(f">{requeued.pk}</a>") :].split("</tr>", 1)[0]
    assert 'acct-elapsed">–</td>' in row_html, row_html
