"""try50b: the pyramid of a range with no hour rolled up (one before the cluster existed) said
"No hourly roll-up yet: the clock computes one every hour." on the metrics page and "h100: no hour
counted yet" in ``fairway metrics``: two wordings, and neither true of a past range, which no
later roll-up fills ("yet"; every range that reaches the current hour has that hour at least)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fairway_cli.words import NO_PYRAMID_HOURS, occupancy_now_text
from scheduler.reports import occupancy
from tests.browser import log_in
from tests.cli.inprocess import run_cli


def _past_range() -> tuple[str, str]:
    today = timezone.now().date()
    return (today - timedelta(days=20)).isoformat(), (today - timedelta(days=10)).isoformat()


def test_the_metrics_page_says_a_past_empty_range_in_the_clis_words(new_page, researcher, cluster):
    since, until = _past_range()
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/metrics/?since={since}&until={until}")
    said = page.locator(".pyramid-empty").first.inner_text()
    assert said == NO_PYRAMID_HOURS[0].upper() + NO_PYRAMID_HOURS[1:] + "."
    assert "yet" not in said
    assert "No hourly roll-up yet" not in page.content()


def test_fairway_metrics_says_it_in_the_pages_words(monkeypatch, researcher, cluster):
    since, until = _past_range()
    out = run_cli(monkeypatch, researcher, "metrics", "--since", since, "--until", until)
    now = occupancy_now_text(occupancy([cluster])[0].as_dict())  # then occupancy right now (left51)
    assert out == f"{cluster.name}: {NO_PYRAMID_HOURS}\n  right now     {now}\n"
