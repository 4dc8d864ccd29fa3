"""Accounting like sacct/sshare (issue 13, point 6): wait, elapsed, GPU-hours charged and
preemptions on the workloads list (API, page, ``fairway ls``/``show``), finished attempts in
``workloads/history/`` and ``fairway history``, and the share tree in ``fairway share``."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler import lifecycle
from scheduler.models import Attempt, Host, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli

H = 3600


def _ran_an_hour_and_was_preempted(researcher, cluster, kwargs, at):
    """Submitted 3 h before ``at``; its first attempt ran 2 h → 1 h before ``at`` and was preempted,
    then a tick placed it again. Returns the workload and that first attempt."""
    w = do_submit_workload(researcher, **kwargs, submitted_at=at - timedelta(hours=3))
    run_tick(cluster.pk)
    first = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(first.host, first.pk, now=at - timedelta(hours=2))
    Attempt.objects.filter(pk=first.pk).update(stop_requested_at=at - timedelta(hours=1), stop_reason="preempted")
    for host in Host.objects.filter(gpus__attempt_links__attempt=first).distinct():  # each part of a gang
        lifecycle.attempt_exited(host, first.pk, None, now=at - timedelta(hours=1))
    run_tick(cluster.pk)
    return w, first


@pytest.fixture
def preempted_once(researcher, cluster, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """Submitted 3 h ago, first attempt ran 2 h → 1 h ago and was preempted; the second has run 30 min."""
    at = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: at)
    with django_capture_on_commit_callbacks(execute=True):
        w, _first = _ran_an_hour_and_was_preempted(researcher, cluster, submit_kwargs(gpu_count=4), at)
        second = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
        lifecycle.attempt_started(second.host, second.pk, now=at - timedelta(minutes=30))
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING
    return w, at


def test_list_and_detail_carry_wait_elapsed_charge_and_preemptions(preempted_once, researcher_client):
    w, at = preempted_once
    rows = researcher_client.get("/api/v1/workloads/").json()["results"]
    acct = next(r for r in rows if r["id"] == w.pk)["accounting"]
    assert acct == {
        "started_at": (at - timedelta(minutes=30)).isoformat().replace("+00:00", "Z"),  # this run's (idle58)
        "wait_s": H + H // 2,  # 1 h before the first start, 30 min before the second (left41)
        "elapsed_s": H + H // 2,
        "charged_gpu_hours": 6.0,  # 4 GPUs × 1 h closed + 4 GPUs × 30 min so far
        "charged_gpu_seconds": 6 * H,  # the same, the figure every surface writes (same47)
        "preemptions": 1,
        "requeues": 1,
        "unfunded": False,  # its open attempt is funded (words46)
    }
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["accounting"] == acct


def test_list_costs_no_query_per_row(researcher, submit_kwargs, preempted_once, researcher_client):
    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert researcher_client.get("/api/v1/workloads/?state=pending,running").status_code == 200
        return len(ctx.captured_queries)

    queries()  # the process loads the budget tree once (budgets.tree_memo)
    before = queries()
    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    assert queries() == before


def test_history_lists_finished_attempts_with_filters(preempted_once, researcher_client):
    w, _at = preempted_once
    answer = researcher_client.get("/api/v1/workloads/history/", {"since": "7d"}).json()
    assert answer["count"] == 1
    [row] = answer["results"]
    assert (row["workload"], row["attempt"], row["end_reason"], row["elapsed_s"]) == (w.pk, 1, "preempted", H)
    assert row["charged_gpu_hours"] == 4.0 and row["budget"] == "nlp/olmo" and row["allocated"] is True
    assert researcher_client.get("/api/v1/workloads/history/", {"budget": "nlp"}).json()["count"] == 1
    assert researcher_client.get("/api/v1/workloads/history/", {"budget": "vision"}).json()["count"] == 0
    assert researcher_client.get("/api/v1/workloads/history/", {"since": "30m"}).json()["count"] == 0
    for bad in ({"since": "soon"}, {"since": "0"}, {"budget": "nope"}, {"limit": "0"}):
        response = researcher_client.get("/api/v1/workloads/history/", bad)
        assert response.status_code == 400, bad


def test_history_and_pyramid_read_since_alike(researcher_client, cluster):
    """tryout: ``metrics/pyramid/?since=7d`` was refused (ISO dates only) while
    ``workloads/history/?since=7d`` worked (durations only); one parser reads both forms in both."""
    now = timezone.now()
    day = (now - timedelta(days=3)).date()
    forms = {"7d": now - timedelta(days=7), day.isoformat(): day, f"{day.isoformat()}T06:00Z": day}
    for since, start in forms.items():
        history = researcher_client.get("/api/v1/workloads/history/", {"since": since})
        pyramid = researcher_client.get("/api/v1/metrics/pyramid/", {"since": since})
        assert history.status_code == 200 and pyramid.status_code == 200, (since, pyramid.content[:200])
        assert history.json()["since"][:10] == str(start)[:10]
    for url in ("/api/v1/workloads/history/", "/api/v1/metrics/pyramid/"):
        refused = researcher_client.get(url, {"since": "soon"})
        assert refused.status_code == 400 and "7d" in refused.json()["since"][0]
        assert "ISO 8601" in refused.json()["since"][0]


def test_history_since_takes_weeks(preempted_once, researcher, researcher_client, monkeypatch):
    """tryout: ``fairway history --since 1w`` (and ``?since=1w``) was refused: days and hours only."""
    w, at = preempted_once
    answer = researcher_client.get("/api/v1/workloads/history/", {"since": "1w"})
    assert answer.status_code == 200 and answer.json()["count"] == 1
    assert answer.json()["since"][:10] == str((at - timedelta(weeks=1)).date())
    assert researcher_client.get("/api/v1/workloads/history/", {"since": "2w3d"}).json()["count"] == 1
    assert researcher_client.get("/api/v1/metrics/pyramid/", {"since": "1w"}).status_code == 200
    refused = researcher_client.get("/api/v1/workloads/history/", {"since": "1.5w"})
    assert refused.status_code == 400 and "7d" in refused.json()["since"][0] and "2w" in refused.json()["since"][0]
    assert researcher_client.get("/api/v1/workloads/history/", {"since": "60w"}).status_code == 400  # past 400d
    table = run_cli(monkeypatch, researcher, "history", "--since", "1w")
    assert f"{w.pk}.1" in table and "preempted" in table


def test_cli_ls_show_history_and_share(preempted_once, researcher, monkeypatch):
    w, _at = preempted_once
    out = run_cli(monkeypatch, researcher, "ls")
    header, *lines = out.splitlines()
    for column in ("SUBMITTED", "STARTED", "WAIT", "ELAPSED", "CHARGED", "REQUEUES"):
        assert column in header
    row = next(line for line in lines if line.split()[0] == str(w.pk))
    assert row.split()[-5:] == ["1h30m", "1h30m", "6.00", "GPU-h", "1"]  # as the web's list writes it

    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert "wait:            1h30m" in shown and "charged:         6.00 GPU-h" in shown
    assert "requeues:        1 (1 preempted)" in shown

    text = run_cli(monkeypatch, researcher, "history", "--since", "7d", "--csv")
    [record] = list(csv.DictReader(io.StringIO(text)))
    assert (record["workload"], record["attempt"], record["end_reason"]) == (str(w.pk), "1", "preempted")
    assert record["charged_gpu_hours"] == "4.0"
    table = run_cli(monkeypatch, researcher, "history", "--budget", "nlp/olmo")
    assert f"{w.pk}.1" in table and "preempted" in table

    share = run_cli(monkeypatch, researcher, "share")
    head = share.splitlines()[1].split()
    assert head[:4] == ["Account", "RawShares", "NormShares", "RawUsage"]
    olmo = next(line for line in share.splitlines() if line.strip().startswith("olmo"))
    tulu = next(line for line in share.splitlines() if line.strip().startswith("tulu"))
    assert "2nd of 2" in olmo and "1st of 2" in tulu  # rank among its siblings (rank_words): less used first
    assert olmo.split()[3] == "6.000"  # RawUsage, GPU-hours


def test_web_list_shows_the_accounting(preempted_once, researcher):
    w, _at = preempted_once
    page = APIClient()
    page.force_login(researcher)
    html = page.get("/workloads/").content.decode()
    assert '<td class="num small acct-requeues">1</td>' in html
    assert '<td class="num small acct-charged">6.00 GPU-h</td>' in html


@pytest.fixture
def gang_ran(researcher, cluster, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """A 16-GPU gang on a100-1 and a100-2 that ran an hour 2 h ago, then a second attempt running."""
    at = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: at)
    with django_capture_on_commit_callbacks(execute=True):
        w, first = _ran_an_hour_and_was_preempted(researcher, cluster, submit_kwargs(gpu_count=16), at)
    assert sorted(first.host_names()) == ["a100-1", "a100-2"]
    return w, first.host_names()


def test_a_gang_shows_every_host_everywhere(gang_ran, researcher, researcher_client, monkeypatch):
    """tryout: a gang's attempt showed one host (rank 0) in the history, the API, the CLI and the
    page; every surface shows every host it holds GPUs on, rank 0 first, from Attempt.host_names."""
    w, hosts = gang_ran
    words = ",".join(hosts)
    [row] = researcher_client.get("/api/v1/workloads/history/", {"since": "7d"}).json()["results"]
    assert row["hosts"] == hosts and row["host"] == hosts[0]
    attempts = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"]
    assert [a["hosts"] for a in attempts] == [hosts, hosts]

    table = run_cli(monkeypatch, researcher, "history", "--since", "7d")
    assert "HOSTS" in table.splitlines()[0] and words in table
    [record] = list(csv.DictReader(io.StringIO(run_cli(monkeypatch, researcher, "history", "--csv"))))
    assert record["hosts"] == words and record["host"] == hosts[0]
    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert "HOSTS" in shown and shown.count(words) == 2

    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{w.pk}/").content.decode()
    assert html.count(f'<td class="attempt-hosts">{words}</td>') == 2
