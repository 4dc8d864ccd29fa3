"""list59: a workload kept out only by a scheduled drain (reason ``reserved_for_other`` with
``pending_detail.drain`` and no ``reserved_for``; docs/deploy.md "Scheduled drains") reads "GPUs
reserved for maintenance (h1 drains …)" in every list — the API row's ``pending_drain``, ``fairway
ls``, the web's workload list and dashboard, the metrics page's "Why work waits" — as its page says
"reserved for maintenance", not "GPUs reserved for a larger job" (one source: ``reason_words``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from fairway_cli.cli import _pending_words
from fairway_cli.numbers import instant_text
from fairway_cli.words import REASON_WORDS, drain_only, reason_words
from scheduler.models import Host, Workload
from scheduler.reports import explain_pending, occupancy
from scheduler.services import do_schedule_drain, do_set_host_state, do_submit_workload
from scheduler.snapshot import epoch
from scheduler.tick import run_tick
from tests.browser import log_in
from tests.cli.inprocess import run_cli

LARGER = REASON_WORDS["reserved_for_other"]
AT = 1_796_716_800  # Dec 8 2026 08:00:00 UTC


def test_reason_words_name_a_drain_that_alone_keeps_it_out():
    drain = {"host": "h1", "at": AT}
    words = f"GPUs reserved for maintenance (h1 drains {instant_text(AT)})"
    assert reason_words("reserved_for_other", drain=drain) == words
    assert reason_words("reserved_for_other", ["cpus"], drain=drain) == f"{words} (CPUs short)"
    assert reason_words("reserved_for_other") == LARGER  # no drain, or an older server's row
    assert reason_words("reserved_for_other", drain={"host": "h1"}) == "GPUs reserved for maintenance (h1 drains)"
    # only the drain alone: one held for another workload too is that workload's, as its page says
    assert drain_only("reserved_for_other", {"drain": drain, "reserved_for": None}) == drain
    assert drain_only("reserved_for_other", {"drain": drain, "reserved_for": 7}) is None
    assert drain_only("protected_work", {"drain": drain}) is None
    assert drain_only("reserved_for_other", {"drain": "h1"}) is None
    assert drain_only(None, None) is None
    # an older server's row (no pending_drain) still reads
    assert _pending_words({"state": "pending", "pending_reason": "reserved_for_other"}) == LARGER


@pytest.fixture
def drained(admin, hosts, researcher, submit_kwargs) -> tuple[Workload, Host, int]:
    """A workload the tick keeps off ``a100-1`` only by its drain in 2 h (``a100-2`` cordoned)."""
    host = hosts["a100-1"]
    do_set_host_state(None, hosts["a100-2"], Host.State.CORDONED)
    now = timezone.now().replace(microsecond=0)
    at = now + timedelta(hours=2)
    do_schedule_drain(admin, host, at, "PSU swap")
    work = do_submit_workload(researcher, **submit_kwargs(gpu_count=2, min_runtime_s=8 * 3600))
    run_tick(host.cluster_id, now)
    work.refresh_from_db()
    assert work.pending_reason == "reserved_for_other"
    assert work.pending_detail["drain"] == {"host": host.name, "at": epoch(at)}
    assert not work.pending_detail.get("reserved_for")
    assert "reserved for maintenance" in " ".join(explain_pending(work, now).lines())
    return work, host, epoch(at)


def test_every_list_says_maintenance(drained, researcher, researcher_client, monkeypatch):
    work, host, at = drained
    words = f"GPUs reserved for maintenance ({host.name} drains {instant_text(at)})"

    row = researcher_client.get("/api/v1/workloads/").json()["results"][0]
    assert row["id"] == work.pk and row["pending_drain"] == {"host": host.name, "at": at}
    detail = researcher_client.get(f"/api/v1/workloads/{work.pk}/").json()
    assert "reserved for maintenance" in str(detail["why_pending"])

    web = APIClient()
    web.force_login(researcher)
    for url in ("/workloads/", "/"):
        page = web.get(url).content.decode()
        assert words in page and LARGER not in page, url
    metrics = web.get("/metrics/").content.decode()
    assert "GPUs reserved for maintenance" in metrics and LARGER not in metrics

    out = run_cli(monkeypatch, researcher, "ls")
    assert words in out and LARGER not in out

    (occ,) = occupancy([host.cluster])
    assert occ.pending_by_reason == {"reserved_for_other": 1} and occ.pending_maintenance == 1
    assert occ.why_waits() == [("GPUs reserved for maintenance", "reserved_for_other", 1)]


def test_a_drain_and_another_workloads_reservation_read_as_the_larger_job(
    researcher, researcher_client, submission, cluster
):
    """``reserved_for`` names a holder of the drained host: the page says that workload, so do the lists."""
    wid = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json").json()["id"]
    detail = {"drain": {"host": "h1", "at": AT}, "reserved_for": wid + 1, "host": "h1"}
    Workload.objects.filter(pk=wid).update(pending_reason="reserved_for_other", pending_detail=detail)
    row = researcher_client.get("/api/v1/workloads/").json()["results"][0]
    assert row["pending_drain"] is None
    (occ,) = occupancy([cluster])
    assert occ.pending_maintenance == 0
    assert occ.why_waits() == [(LARGER, "reserved_for_other", 1)]


def test_the_list_reads_the_drain_without_a_query_per_row(researcher_client, submission, cluster):
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert researcher_client.get("/api/v1/workloads/").status_code == 200
        return len(ctx.captured_queries)

    def drained() -> None:
        Workload.objects.update(
            pending_reason="reserved_for_other",
            pending_detail={"drain": {"host": "h1", "at": AT}, "reserved_for": None},
        )

    researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    drained()
    count()
    one = count()
    for _ in range(4):
        researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    drained()
    assert count() == one
    rows = researcher_client.get("/api/v1/workloads/").json()["results"]
    assert len(rows) == 5 and all(r["pending_drain"] == {"host": "h1", "at": AT} for r in rows)


def test_the_workload_list_says_maintenance_in_a_browser(drained, new_page):
    work, host, at = drained
    page = new_page()
    log_in(page, "researcher")
    page.goto("/workloads/")
    row = page.inner_text(f"tr:has(a[href='/workloads/{work.pk}/'])")
    assert f"GPUs reserved for maintenance ({host.name} drains {instant_text(at)})" in row
    assert LARGER not in row
