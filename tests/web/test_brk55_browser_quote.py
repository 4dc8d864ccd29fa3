"""brk55: "Quote first" without a minimum runtime, in a real browser (Playwright driving Debian's
Chromium): the field's ``required`` attribute made the browser refuse the quote the API and
``fairway submit --quote`` give without one. Skipped without ``/usr/bin/chromium`` or Playwright."""

from __future__ import annotations

from scheduler.models import Workload
from tests.browser import log_in


def test_quote_first_without_a_minimum_runtime_shows_the_ladder(new_page, researcher, cluster):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/")
    page.fill("#id_command", "python train.py")
    page.fill("#id_gpu_count", "1")
    page.fill("#id_min_runtime", "")
    page.select_option("#id_gpu_model", "A100")
    page.get_by_role("button", name="Quote first").click()
    page.wait_for_selector("#quote-table")
    rows = page.locator("#quote-table tbody tr td:first-child").all_inner_texts()

    assert [r.strip() for r in rows] == ["0 (unallocated)", "30m", "2h", "8h", "1d"]
    assert Workload.objects.count() == 0
