"""num42: a page's numbers come from one read of the database.

Under a burst the dashboard counted 52 pending under "My workloads" and 59 under "Occupancy" in
one request: each read saw the database at its own moment. The page's reads now share one
snapshot (``config.one_read``: REPEATABLE READ on PostgreSQL). The test commits a submission from
another connection between two of the page's reads."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.test import Client

from scheduler.models import Workload
from scheduler.services import do_submit_workload

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="a concurrent commit between two reads needs PostgreSQL"
)


def _commit_elsewhere(researcher, submit_kwargs) -> None:
    """One more pending workload, committed by another connection (another thread's)."""

    def submit() -> None:
        try:
            do_submit_workload(researcher, **submit_kwargs())
        finally:
            connections.close_all()

    thread = threading.Thread(target=submit)
    thread.start()
    thread.join(timeout=30)


def _pending(context) -> tuple[int, int, dict[str, int]]:
    mine = dict(context["by_state"])["pending"]
    occupancy = context["occupancy"][0].workloads_by_state.get("pending", 0)
    standing = {
        b.path: b.pending_workloads for standing, rows in context["standings"] for b in rows if b.path == "nlp/olmo"
    }
    return mine, occupancy, standing


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_counts_pending_work_once(researcher, cluster, submit_kwargs, monkeypatch):
    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs())
    import web.views

    original = web.views.budget_standings
    calls = []

    def standings_after_a_commit(*args, **kwargs):
        if not calls:  # after "My workloads" was read, before the standing and the occupancy
            _commit_elsewhere(researcher, submit_kwargs)
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(web.views, "budget_standings", standings_after_a_commit)
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/")
    assert Workload.objects.filter(state="pending").count() == 4  # committed during the request
    assert _pending(page.context) == (3, 3, {"nlp/olmo": 3})  # one instant: before it
    assert _pending(browser.get("/").context) == (4, 4, {"nlp/olmo": 4})


@pytest.mark.django_db(transaction=True)
def test_the_cluster_and_metrics_pages_read_once(researcher, cluster, submit_kwargs, monkeypatch):
    """The cluster page's hosts and occupancy, the metrics page's occupancy and pyramid: one read
    each (a commit between two of their queries is not seen)."""
    do_submit_workload(researcher, **submit_kwargs())
    import web.views

    original = web.views.occupancy

    def occupancy_after_a_commit(*args, **kwargs):
        _commit_elsewhere(researcher, submit_kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(web.views, "occupancy", occupancy_after_a_commit)
    browser = Client()
    browser.force_login(researcher)
    for url, pending in (("/clusters/", 1), ("/metrics/", 2)):
        page = browser.get(url)
        assert page.status_code == 200
        occ = page.context["sections"][0]["occupancy"] if "sections" in page.context else page.context["occupancy"][0]
        # the first read of the page came before the commit made during the request
        assert occ.workloads_by_state.get("pending", 0) == pending, url
