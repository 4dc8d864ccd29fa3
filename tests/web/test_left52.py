"""left52: the workload list past its last page, and the bulk confirmation's ``action`` and ``ids``."""

from __future__ import annotations

import pytest
from django.utils.html import escape

from scheduler.api.params import REPEATED
from scheduler.services import do_submit_workload
from tests.bulk_setup import states


def test_a_page_past_the_last_redirects_to_the_last_with_its_filters(browser, researcher, submit_kwargs, monkeypatch):
    monkeypatch.setattr("web.views.PAGE_SIZE", 2)
    for n in range(5):
        do_submit_workload(researcher, **submit_kwargs(name=f"w{n}"))

    response = browser.get("/workloads/", {"page": "9", "state": "pending", "owner": "researcher"})

    assert response.status_code == 302
    assert response["Location"] == "/workloads/?state=pending&owner=researcher&page=3"
    assert [w.name for w in browser.get(response["Location"]).context["page"]] == ["w0"]
    # the last page is page 1: the list's own address
    response = browser.get("/workloads/", {"page": "2", "state": "running"})
    assert (response.status_code, response["Location"]) == (302, "/workloads/?state=running")
    assert browser.get("/workloads/", {"page": "9" * 100}).status_code == 302


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_bulk_action_given_twice_is_refused_not_read_as_its_last(browser, researcher, submit_kwargs, method):
    w = do_submit_workload(researcher, **submit_kwargs())
    before = states()

    url = "/workloads/bulk/?action=hold&action=cancel&owner=me"
    response = browser.post(url, {"ids": str(w.pk)}) if method == "post" else browser.get(url)

    assert response.status_code == 400
    assert escape(f"action: {REPEATED}") in response.content.decode()
    assert states() == before


def test_the_bulk_confirmation_takes_at_most_the_apis_cap_of_ids(browser, researcher, submit_kwargs, settings):
    mine = [do_submit_workload(researcher, **submit_kwargs(name=f"r{i}")) for i in range(3)]
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 2}  # FAIRWAY_BULK_MAX (left51)
    before = states()

    response = browser.post("/workloads/bulk/?action=hold&owner=me", {"ids": ",".join(str(w.pk) for w in mine)})

    assert response.status_code == 400
    assert "ids: at most 2 workloads in one bulk action" in response.content.decode()
    assert states() == before
    twice = browser.post("/workloads/bulk/?action=hold&owner=me", {"ids": [str(mine[0].pk), str(mine[1].pk)]})
    assert twice.status_code == 400 and escape(f"ids: {REPEATED}") in twice.content.decode()
    assert states() == before
