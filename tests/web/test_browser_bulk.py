"""The workload list's "Cancel these N" / "Hold" / "Release" (docs/jobs.md "Bulk actions"): a
preview page with the count and the skips, a confirmation, then the list with the same filters.
The browser test drives Debian's Chromium with Playwright (skipped without them)."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.bulk_setup import states


@pytest.fixture
def mine(researcher, submit_kwargs) -> list[Workload]:
    return [do_submit_workload(researcher, **submit_kwargs(name=f"r{i}")) for i in range(2)]


@pytest.fixture
def theirs(teammate, submit_kwargs) -> Workload:
    return do_submit_workload(teammate, **submit_kwargs(name="t0"))


@pytest.fixture
def client_of(db):
    def make(user) -> Client:
        c = Client()
        c.force_login(user)
        return c

    return make


def test_the_list_offers_the_actions_only_with_a_filter(client_of, researcher, mine):
    page = client_of(researcher).get("/workloads/").content.decode()
    assert 'id="bulk-cancel"' not in page
    page = client_of(researcher).get("/workloads/?owner=me&state=pending").content.decode()
    assert "Cancel these 2" in page and 'href="/workloads/bulk/?action=hold&amp;owner=me&amp;state=pending"' in page


def test_the_list_offers_no_action_where_every_match_has_ended(client_of, researcher, mine):
    """try61: /workloads/?state=succeeded offered "Cancel these 15 · Hold · Release", whose preview
    then said "0 to cancel" (all of them already_final); and "All 3 these filters match" lacked its noun."""
    from scheduler.services import do_cancel_workload

    do_cancel_workload(researcher, mine[0])
    page = client_of(researcher).get("/workloads/?owner=me&state=canceled").content.decode()
    assert 'id="bulk-actions"' not in page
    page = client_of(researcher).get("/workloads/?owner=me").content.decode()
    assert "All 2 workloads these filters match" in page and "Cancel these 2" in page


def test_the_preview_changes_nothing_and_names_the_skips(client_of, researcher, mine, theirs):
    before = states()
    response = client_of(researcher).get("/workloads/bulk/?action=cancel&state=pending")
    assert response.status_code == 200
    page = response.content.decode()
    assert "3 workloads match: <strong>2 to cancel</strong>" in page
    assert "1 left as they are (forbidden: Only the owner" in page and f"#{theirs.pk}" in page
    assert f'name="ids" value="{mine[0].pk},{mine[1].pk}"' in page
    assert states() == before


@pytest.mark.parametrize(
    "query",
    [
        "?action=cancel",
        "?action=cancel&state=",
        "?action=nuke&owner=me",
        "?action=hold&state=runing",
        "?action=hold&x=1",
    ],
)
def test_a_bad_query_is_named_and_nothing_changes(client_of, researcher, mine, query):
    before = states()
    response = client_of(researcher).post(f"/workloads/bulk/{query}", {"ids": ",".join(str(w.pk) for w in mine)})
    assert response.status_code == 400
    assert 'id="bulk-errors"' in response.content.decode()
    assert states() == before


def test_the_post_acts_only_on_the_ids_previewed(client_of, researcher, mine, submit_kwargs):
    late = do_submit_workload(researcher, **submit_kwargs(name="late"))
    response = client_of(researcher).post(
        "/workloads/bulk/?action=hold&owner=me", {"ids": f"{mine[0].pk},{mine[1].pk}"}
    )
    assert response.status_code == 302 and response["Location"] == "/workloads/?owner=me"
    assert [Workload.objects.get(pk=w.pk).hold for w in [*mine, late]] == ["user", "user", ""]
    bad = client_of(researcher).post("/workloads/bulk/?action=hold&owner=me", {"ids": "1,x"})
    assert bad.status_code == 400


def test_cancel_these_from_the_list_in_a_browser(new_page, live_server, researcher, mine, theirs):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/workloads/?state=pending")
    offer = page.inner_text("#bulk-actions")
    page.click("#bulk-cancel")
    page.wait_for_selector("#bulk-confirm")
    count = page.inner_text("#bulk-count")
    skips = page.inner_text("#bulk-skips")
    untouched = {w.pk: w.state for w in Workload.objects.all()}
    page.click("#bulk-confirm")
    page.wait_for_url(f"{live_server.url}/workloads/?state=pending")
    notice = page.inner_text(".notice")

    assert "Cancel these 3" in offer and offer.startswith("All 3 workloads these filters match")
    assert "3 workloads match: 2 to cancel" in count and "forbidden" in skips
    assert set(untouched.values()) == {"pending"}  # the preview changed nothing
    assert notice == "Canceled 2 workloads."
    assert {Workload.objects.get(pk=w.pk).state for w in mine} == {"canceled"}
    assert Workload.objects.get(pk=theirs.pk).state == "pending"
