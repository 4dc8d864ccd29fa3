"""left51: the metrics page's occupancy right now is :func:`fairway_cli.words.occupancy_now_text` of
the API's ``metrics/`` entry, the sentence ``fairway metrics`` says (tests/cli/test_left51_metrics_now.py).
In a real browser (tests/browser.py); skipped without Chromium or Playwright."""

from __future__ import annotations

from fairway_cli.words import occupancy_now_text
from scheduler.models import Cluster
from scheduler.reports import occupancy
from tests.browser import log_in


def test_the_metrics_pages_occupancy_now_is_the_clis_sentence(new_page, admin, hosts):
    [now] = occupancy(list(Cluster.objects.filter(name="default")))
    page = new_page()
    log_in(page, "admin")
    page.goto("/metrics/")
    shown = page.locator("p.occupancy-now").first.inner_text().strip()
    assert shown == f"{occupancy_now_text(now.as_dict())}." and shown.startswith("0 of 20 GPUs occupied (0%): ")
