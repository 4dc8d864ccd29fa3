"""The budgets page shows a budget's active temporary share in the words of the API and the CLI
(docs/standing.md, "Temporary shares"), in a real browser (tests/browser.py)."""

from __future__ import annotations

from fairway_cli.words import boost_text
from tests.api.test_share_boost_display import boost_olmo
from tests.browser import log_in


def test_the_budgets_page_shows_the_boost(new_page, admin, researcher, org_tree, cluster):
    until = boost_olmo(admin, org_tree)
    page = new_page()
    log_in(page, "researcher")
    page.goto("/budgets/")
    olmo = page.locator('tr[data-budget="nlp/olmo"]').first.inner_text()
    tulu = page.locator('tr[data-budget="nlp/tulu"]').first.inner_text()
    boost = page.locator('tr[data-budget="nlp/olmo"] .boost').first.inner_text()
    assert boost == boost_text(3, until, 1)
    assert "share 3 until" in olmo and "until" not in tulu
