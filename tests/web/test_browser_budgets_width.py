"""The budgets page's standing table in a real browser (tests/browser.py), found by the README's
pictures (shots59): at a laptop's 1360 px its last columns (attainment, running GPUs, pending) were
cut off by the page's 1240 px column and scrolled out of sight, and a name like ``vc-11cb48``
broke at its hyphen over two lines. Skipped without Chromium or Playwright."""

from __future__ import annotations

from budgets.services import do_create_budget
from tests.browser import log_in

VIEWPORT = {"width": 1360, "height": 900}


def test_the_standing_table_fits_a_laptop_and_keeps_names_whole(new_page, researcher, org_tree, cluster):
    do_create_budget(name="vc-11cb48", parent=org_tree["vision"])
    page = new_page(viewport=VIEWPORT)
    log_in(page, "researcher")
    page.goto("/budgets/")
    scroll = page.locator(".table-scroll").first
    widths = scroll.evaluate("el => [el.scrollWidth, el.clientWidth]")
    assert widths[0] <= widths[1] + 1, f"the table scrolls: {widths[0]} px in {widths[1]} px"
    last = page.locator("table.budget-standing tr").first.locator("th").last.bounding_box()
    assert last is not None and last["x"] + last["width"] <= VIEWPORT["width"], last
    lines = page.locator("tr[data-budget='vision/vc-11cb48'] td").first.evaluate(
        """td => {
            const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
            while (walk.nextNode() && !walk.currentNode.textContent.includes("vc-11cb48"));
            const r = document.createRange();
            r.selectNodeContents(walk.currentNode);
            return r.getClientRects().length;
        }"""
    )
    assert lines == 1, f"the name takes {lines} lines"
