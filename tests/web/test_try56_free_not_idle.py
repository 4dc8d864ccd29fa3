"""try56: the clusters page counted the GPUs no attempt holds as "idle 2" and an empty host as "idle",
while "idle" everywhere else (`fairway ls --idle`, the workload page, the `idle` notification: docs/jobs.md
"Idle GPUs") means GPUs an attempt holds at under 1 % utilization: with one such attempt running the
page said "idle 0". Its own legend already said "free": the counts and the host row say it too."""

from __future__ import annotations

from tests.browser import log_in


def test_the_clusters_page_says_free_for_unheld_gpus(new_page, admin, hosts):
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/")

    legend = page.locator(".legend").first.inner_text()
    assert "free " in legend and "idle" not in legend, legend
    assert "idle" not in page.locator(".stack").first.get_attribute("title")
    row = page.locator("#host-a100-1").inner_text()
    assert "no attempts" in row and "idle" not in row, row
