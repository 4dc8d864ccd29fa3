"""A workload's efficiency on its page in a real browser (tests/browser.py; docs/jobs.md
"Efficiency"): the "Efficiency" block and each attempt's utilization. Skipped without Chromium or
Playwright."""

from __future__ import annotations

from fairway_cli.words import NOT_MEASURED
from tests.api.test_efficiency_api import twice  # noqa: F401 -- the fixture
from tests.browser import log_in


def test_the_workload_page_shows_how_well_it_used_its_gpus(new_page, twice):  # noqa: F811
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{twice.pk}/")
    block = page.locator("#efficiency")
    assert block.is_visible()
    rows = dict((r.locator("th").text_content(), r.locator("td").inner_text()) for r in block.locator("tr").all())
    assert rows["GPU utilization"] == "80% (mean over the measured GPU-time)", rows
    assert rows["Peak GPU memory"] == "30.0 of 80.0 GiB (38%)", rows
    assert rows["Not measured"] == "50% of the GPU-time held had no utilization reading", rows
    assert page.locator(".attempt-util").all_inner_texts() == ["80%", NOT_MEASURED]
