"""try58: leadership read "availability 45%" on the metrics page for a cluster whose hosts had
been up all along, one draining for the last minutes: availability is sampled (docs/standing.md,
"Availability is sampled"), each hour taking the host states at its roll-up and the current hour
the states now, and neither the page nor ``fairway metrics`` said so. Both now say it, in one
wording (``fairway_cli.words.AVAILABILITY_MEANS``)."""

from __future__ import annotations

from django.test import Client
from django.utils.html import escape

from fairway_cli.words import AVAILABILITY_MEANS
from tests.browser import log_in
from tests.cli.inprocess import run_cli
from tests.web.test_pyramid_current_hour import _busy

SAMPLED = "in the states at each hour's roll-up"


def test_the_metrics_page_and_fairway_metrics_say_availability_is_sampled(
    researcher, cluster, submit_kwargs, monkeypatch
):
    _busy(researcher, cluster, submit_kwargs, monkeypatch)
    assert SAMPLED in AVAILABILITY_MEANS
    browser = Client()
    browser.force_login(researcher)
    assert escape(AVAILABILITY_MEANS) in browser.get("/metrics/").content.decode()
    said = run_cli(monkeypatch, researcher, "metrics")
    assert f"({AVAILABILITY_MEANS})" in said, said


def test_in_a_browser_the_metrics_page_says_availability_is_sampled(
    new_page, researcher, cluster, submit_kwargs, monkeypatch
):
    _busy(researcher, cluster, submit_kwargs, monkeypatch)
    monkeypatch.undo()  # the live server's own clock from here
    page = new_page()
    log_in(page, researcher.username)
    page.goto("/metrics/")
    row = page.locator("table.pyramid-totals tr", has_text="availability").first.inner_text()
    assert SAMPLED in row, row
