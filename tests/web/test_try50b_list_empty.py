"""try50b: the web workload list with nothing to show says it in ``fairway ls``'s words."""

from __future__ import annotations

from fairway_cli.words import NO_WORKLOADS_MATCH
from tests.browser import log_in


def test_an_empty_list_says_no_workloads_match(new_page, researcher, cluster):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/workloads/?state=failed")
    said = page.locator("td.no-match").first.inner_text()
    assert said == "No workloads match." == NO_WORKLOADS_MATCH.capitalize() + "."
