"""The workloads list in a real browser (tests/browser.py), found by the README's pictures
(shots59): at a laptop's 1360 px its 15 columns squeezed "why / estimate" to a few words a line, so
a pending row ("waiting for protection to end · by Dec 10 06:48:28 UTC") stood eight lines tall.
Skipped without Chromium or Playwright."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in


def lines_of(cell):
    return cell.evaluate(
        """td => { const r = document.createRange(); r.selectNodeContents(td);
                   return new Set([...r.getClientRects()].map(b => Math.round(b.top))).size; }"""
    )


def test_why_pending_keeps_room_for_its_words(new_page, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="waits-for-protection", budget="nlp/olmo"))
    Workload.objects.filter(pk=w.pk).update(
        pending_reason="protected_work", estimated_start=timezone.now() + timedelta(days=3)
    )
    page = new_page(viewport={"width": 1360, "height": 900})
    log_in(page, "researcher")
    page.goto("/workloads/")
    cell = page.locator(f"tr:has(a[href='/workloads/{w.pk}/']) td.small").first
    assert "waiting for protection to end · by" in cell.inner_text()
    box = cell.bounding_box()
    line = float(cell.evaluate("td => parseFloat(getComputedStyle(td).fontSize)"))
    assert box is not None and box["width"] >= 14 * line, box
    # the words and the estimate take at most two lines
    assert lines_of(cell) <= 2, lines_of(cell)

    # the dashboard's table of my workloads: the same room, inside its panel (no yellow callout: the
    # why-pending box's class is ``why``)
    page.goto("/")
    cell = page.locator(f"tr:has(a[href='/workloads/{w.pk}/']) td.small").first
    assert "waiting for protection to end · by" in cell.inner_text()
    assert lines_of(cell) <= 2, lines_of(cell)
    assert cell.evaluate("td => getComputedStyle(td).borderLeftWidth") == "0px"
    panel = page.locator("section.panel").filter(has_text="My workloads").first
    inside = panel.evaluate(
        "p => p.querySelector('table').getBoundingClientRect().right <= p.getBoundingClientRect().right"
    )
    assert inside, "the table overflows its panel"
