"""left52: the workload list past its last page, and the bulk confirmation's ``action`` and ``ids``."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.services import do_submit_workload
from tests.conftest import PASSWORD


@pytest.fixture
def browser(researcher, cluster) -> Client:
    client = Client()
    assert client.login(username="researcher", password=PASSWORD)
    return client


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
