"""left51: the clusters page's occupancy bar (also the dashboard's and the metrics page's) called its
grey part "unavailable" where the GPU grid's legend under it called the same grey "host not
schedulable". One wording, :data:`fairway_cli.words.NOT_SCHEDULABLE_WORDS`, read by both (the bar's
grey counts free GPUs that cannot be scheduled: on a host not active, or unhealthy). In a real
browser (tests/browser.py); skipped without Chromium or Playwright."""

from __future__ import annotations

from fairway_cli.words import NOT_SCHEDULABLE_WORDS
from scheduler.models import Host
from tests.browser import log_in


def test_the_bar_and_the_grid_name_the_grey_alike(new_page, admin, hosts):
    Host.objects.filter(name="a100-2").update(state=Host.State.CORDONED)
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/default/")
    bar = page.locator(".stack").first
    legends = page.locator(".legend")
    bar_grey = legends.first.locator("span:has(i.c-off)").inner_text().strip()
    grid_grey = legends.last.locator("span:has(i.c-off)").inner_text().strip()
    assert bar_grey == f"{NOT_SCHEDULABLE_WORDS} 8"  # the cordoned host's 8 free GPUs
    assert grid_grey == NOT_SCHEDULABLE_WORDS
    assert f"8 {NOT_SCHEDULABLE_WORDS}" in (bar.get_attribute("title") or "")
    assert "unavailable" not in page.locator("main").inner_text() + (bar.get_attribute("title") or "")
    assert page.locator("#host-a100-2 span.gpu.off").count() == 8  # the grid's grey tiles: the same GPUs

    page.goto("/")  # the dashboard's bar: the same words
    assert page.locator(".legend span:has(i.c-off)").first.inner_text().strip() == f"{NOT_SCHEDULABLE_WORDS} 8"
