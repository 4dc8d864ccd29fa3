"""try63: a quote's charges read as every other surface writes GPU-time charged
(``fairway_cli.numbers.gpu_time_text``): the 30m line of a one-GPU quote read "0.50 GPU-h" (and
the unallocated one "0.00 GPU-h") while the same 30 minutes, once run, read "30 GPU-min" in
``fairway ls``, ``show`` and the pages. In a real browser (Playwright driving Debian's Chromium);
skipped without ``/usr/bin/chromium`` or Playwright."""

from __future__ import annotations

from tests.browser import log_in


def test_the_quotes_charges_read_as_the_charged_column(new_page, researcher, cluster):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/")
    page.fill("#id_command", "python train.py")
    page.fill("#id_gpu_count", "1")
    page.fill("#id_min_runtime", "")
    page.select_option("#id_gpu_model", "A100")
    page.get_by_role("button", name="Quote first").click()
    page.wait_for_selector("#quote-table")
    charges = page.locator("#quote-table tbody tr td:nth-child(3)").all_inner_texts()

    assert [c.strip() for c in charges] == ["0 GPU-h", "30 GPU-min", "2.00 GPU-h", "8.00 GPU-h", "24.00 GPU-h"]
