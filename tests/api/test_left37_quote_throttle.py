"""left37: quotes have a throttle of their own (``FAIRWAY_THROTTLE_QUOTE``, config.throttling)."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.web.test_pages import _form

URL = "/api/v1/workloads/quote/"


@pytest.fixture
def quote_rate(settings):
    """A quote rate of 2 a minute, the user's API rate untouched (6,000 a minute)."""
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "quote": "2/min"}
    settings.REST_FRAMEWORK = rest


def test_quotes_are_throttled_per_user_below_the_api_rate(quote_rate, researcher_client, submission, cluster):
    """A quote is a forward simulation of the cluster (DESIGN.md §9: up to 300 ms): under the
    user's 6,000 requests a minute one user could keep the web process's cores busy. The third
    quote of the minute is a 429 with ``Retry-After``; other endpoints still answer."""
    codes = [researcher_client.post(URL, submission(), format="json").status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    refused = researcher_client.post(URL, submission(), format="json")
    assert refused.json()["code"] == "throttled" and int(refused["Retry-After"]) >= 1
    assert researcher_client.get("/api/v1/workloads/").status_code == 200
    assert researcher_client.post("/api/v1/workloads/", submission(), format="json").status_code == 201


def test_the_submit_pages_quote_counts_in_the_same_throttle(
    quote_rate, researcher_client, submission, researcher, cluster
):
    """The page's Quote button runs the same simulation: it counts in the same log, so the API
    and the page together get the rate once; the refusal is a form error and nothing is submitted."""
    browser = Client()
    browser.force_login(researcher)
    assert researcher_client.post(URL, submission(), format="json").status_code == 200
    assert 'id="quote-table"' in browser.post("/submit/", {**_form(min_runtime="1h"), "quote": "1"}).content.decode()

    refused = browser.post("/submit/", {**_form(min_runtime="1h"), "quote": "1"})
    page = refused.content.decode()

    assert refused.status_code == 429  # the API's status (left44: the page answered 400)
    assert "Too many quotes: try again in" in page and 'id="quote-table"' not in page
    assert Workload.objects.count() == 0
