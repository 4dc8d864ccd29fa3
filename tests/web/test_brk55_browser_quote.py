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
    # The browser tests before this one end stray backends of the test database
    # (pg_terminate_backend, tests/dbsessions.py): this thread's connection and the pool's idle
    # ones may be among them, so both are replaced here (on PostgreSQL under the full suite, a
    # fresh clone's CI failed here twice: "terminating connection due to administrator command").
    from django.db import connection

    if connection.vendor == "postgresql":
        connection.close()
        connection.close_pool()
    assert Workload.objects.count() == 0
