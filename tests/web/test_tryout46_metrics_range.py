"""tryout46: a lab manager's monthly look: ``fairway metrics --days 30 -c h100`` and ``GET
metrics/pyramid/?since=30d&cluster=h100`` show any range and one cluster, but the metrics page
showed the last 7 days of every cluster and ignored ``?since=30d`` (200, the same page). It reads
``since``, ``until`` and ``cluster`` as the API does (``scheduler.api.pyramid.pyramid_params``): a
bad one is a 400 saying it, over the default range."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from scheduler.services import do_create_cluster
from web import views


@pytest.fixture
def asked(monkeypatch):
    """The clusters and range each page view asked the pyramid for."""
    calls = []
    real = views.pyramid_report

    def spy(clusters, since, until, now=None):
        calls.append(([c.name for c in clusters], since, until))
        return real(clusters, since, until, now)

    monkeypatch.setattr(views, "pyramid_report", spy)
    return calls


def _page(user):
    web = Client()
    web.force_login(user)
    return web


def test_the_page_shows_the_range_and_cluster_asked(researcher, cluster, asked):
    do_create_cluster("h100")
    web = _page(researcher)

    response = web.get("/metrics/", {"since": "30d", "cluster": "h100"})
    assert response.status_code == 200
    [(clusters, since, until)] = asked
    assert clusters == ["h100"] and until - since == timedelta(days=30)
    text = response.content.decode()
    assert "h100: the pyramid</h2>" in text and "default: the pyramid" not in text
    assert 'value="30d"' in text and '<option value="h100" selected>' in text

    asked.clear()
    assert web.get("/metrics/").status_code == 200  # the default: the last 7 days, every cluster
    [(clusters, since, until)] = asked
    assert clusters == ["default", "h100"] and until - since == timedelta(days=7)
    assert "default: the pyramid, last 7 days" in web.get("/metrics/").content.decode()


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"since": "bogus"}, "since: &#x27;bogus&#x27; is not a duration back from now"),
        ({"cluster": "nope"}, "cluster: No cluster &#x27;nope&#x27;."),
        ({"days": "30"}, "days"),  # fairway metrics' flag is not the page's parameter: said, not ignored
        ({"since": "2026-12-01", "until": "2026-11-01"}, "since: must be before until"),
        ({"until": "2030-01-01"}, "until: the range starts in the future"),  # not since's (admin47)
    ],
)
def test_a_bad_parameter_is_a_400_saying_it_over_the_default_range(researcher, cluster, asked, query, words):
    response = _page(researcher).get("/metrics/", query)
    assert response.status_code == 400
    assert words in response.content.decode()
    [(_clusters, since, until)] = asked
    assert until - since == timedelta(days=7)


def test_the_range_form_in_a_browser(new_page, researcher, cluster):
    """The form under the heading asks the range (tests/browser.py; skipped without Chromium)."""
    from tests.browser import log_in

    page = new_page()
    log_in(page, researcher.username)
    page.goto("/metrics/")
    page.fill(".metrics-range input[name=since]", "30d")
    page.click(".metrics-range button[type=submit]")
    page.wait_for_url("**/metrics/?since=30d*")
    assert page.locator(".metrics-range input[name=since]").input_value() == "30d"
    assert "last 7 days" not in page.locator("h2").first.inner_text()
