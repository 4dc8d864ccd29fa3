"""left60: on the clusters page a host name such as "philly-001" broke at its hyphen in a narrow
name cell ("philly-" over "001"), in a real browser (tests/browser.py). Skipped without Chromium
or Playwright."""

from __future__ import annotations

from scheduler.models import Host
from tests.browser import log_in

LINES_JS = """el => { const r = document.createRange(); r.selectNodeContents(el);
                     return new Set([...r.getClientRects()].map(b => Math.round(b.top))).size; }"""


def test_a_hyphenated_host_name_stays_on_one_line(new_page, admin, cluster):
    Host.objects.filter(name="a100-1").update(name="philly-001")
    page = new_page(viewport={"width": 390, "height": 800})
    log_in(page, "admin")
    page.goto("/clusters/")
    name = page.locator("tr#host-philly-001 td b").first
    assert name.inner_text() == "philly-001"
    assert name.evaluate(LINES_JS) == 1
