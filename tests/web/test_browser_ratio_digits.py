"""Ratios on the budgets page and the dashboard in a real browser (tests/browser.py), found by the
README's pictures (shots59): the digits of every ratio were chosen over the whole tree, so two
budgets that are never compared (``nlp/tulu`` and ``vision/sam``, under different parents), equal
to three digits, made every ratio on both pages take four ("0.1231×", "0.8476×") while the
why-pending sentence, comparing two siblings, said "0.123×" for the same number. The digits are
now chosen among siblings, the budgets a rank compares. Skipped without Chromium or Playwright."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from budgets.models import UsageEntry
from tests.browser import log_in


def lump(budget, cluster, gpu_hours):
    end = timezone.now() - timedelta(hours=1)
    UsageEntry.objects.create(
        budget=budget, cluster=cluster, start=end, end=end, gpu_seconds=round(gpu_hours * 3600), note="test"
    )


def test_a_ratio_has_the_digits_its_siblings_need(new_page, researcher, org_tree, cluster):
    # 20 GPUs × 7 d = 3,360 GPU-h: olmo, tulu and sam are each entitled to 1,120 GPU-h
    lump(org_tree["nlp/olmo"], cluster, 560.0)  # 0.5
    lump(org_tree["nlp/tulu"], cluster, 137.872)  # 0.1231
    lump(org_tree["vision/sam"], cluster, 138.208)  # 0.1234: equal to tulu's to three digits
    page = new_page(viewport={"width": 1360, "height": 900})
    log_in(page, "researcher")
    page.goto("/budgets/")

    def ratio(path):
        return page.locator(f"tr[data-budget='{path}'] td.ratio").inner_text()

    texts = {path: ratio(path) for path in ("nlp", "vision", "nlp/olmo", "nlp/tulu", "vision/sam")}
    assert texts == {
        "nlp": "0.312×",  # (560 + 137.872) ÷ 2,240
        "vision": "0.123×",
        "nlp/olmo": "0.5×",
        "nlp/tulu": "0.123×",
        "vision/sam": "0.123×",
    }, texts
    page.goto("/")
    dashboard = page.locator("section, .panel").filter(has_text="My budgets").first.inner_text()
    assert "0.312×" in dashboard and "0.5×" in dashboard and "0.3115×" not in dashboard, dashboard
