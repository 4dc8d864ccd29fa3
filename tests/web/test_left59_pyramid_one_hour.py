"""left59: the pyramid's chart with a single hour (a new cluster's first, the current one so far)
read "01:00:00 UTC … 01:00:00 UTC" on its axis (the first and last points, one hour start) and drew
nothing one could see: each metric is a level line across the chart, which spans that hour, with
a dot at each end, and the axis reads the hour's start and end."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.pyramid import hour_of
from tests.browser import log_in
from tests.web.test_pyramid_current_hour import _busy


def test_a_single_hour_is_drawn_and_its_axis_reads_its_start_and_end(
    new_page, researcher, cluster, submit_kwargs, monkeypatch
):
    at = _busy(researcher, cluster, submit_kwargs, monkeypatch)
    page = new_page()
    log_in(page, researcher.username)
    page.goto("/metrics/")
    figure = page.locator("main figure.pyramid-chart").first
    axis = figure.locator(".chart-x span").all_inner_texts()
    start = hour_of(at)
    assert axis == [instant_text(start), instant_text(start + timedelta(hours=1))]
    assert "1 hour" in figure.locator("figcaption").inner_text()
    drawn = figure.evaluate(
        """f => [...f.querySelectorAll('svg polyline')].map(p => {
             const r = p.getBoundingClientRect(); return [p.querySelector('title').textContent, r.width]; })"""
    )
    widths = dict(drawn)
    assert {"availability", "occupancy", "impact"} <= set(widths), drawn
    assert all(w > 100 for w in widths.values()), drawn  # across the chart, not a point
    # a dot at each end of every line, so one level line on the frame's edge still shows
    assert figure.locator("svg polyline[marker-start][marker-end]").count() == len(drawn)
    assert timezone.now() == at
