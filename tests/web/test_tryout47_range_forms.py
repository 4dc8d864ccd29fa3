"""tryout47: the metrics page's range form (since, until, cluster, Show) and the budgets page's
cluster form are one line each, as the workloads page's filters: every field there took the forms'
full width (``input, select { width: 100% }``, up to 640 px), so on a 1400 px window "since" stood
at the end of one line, its field alone on the next, "until" after it, and so on, three lines of
labels and fields out of step (tests/browser.py; skipped without Chromium)."""

from __future__ import annotations

from tests.browser import log_in


def _tops(page, form: str, fields: list[str]) -> list[float]:
    return [page.locator(f"{form} {field}").bounding_box()["y"] for field in fields]


def test_the_range_and_cluster_forms_are_one_line(new_page, researcher, cluster):
    page = new_page(viewport={"width": 1400, "height": 900})
    log_in(page, researcher.username)

    page.goto("/metrics/")
    tops = _tops(page, ".metrics-range", ["input[name=since]", "input[name=until]", "select[name=cluster]", "button"])
    assert max(tops) - min(tops) < 8, tops
    assert page.locator(".metrics-range input[name=since]").bounding_box()["width"] < 200

    page.goto("/budgets/")
    tops = _tops(page, ".budgets-cluster", ["select[name=cluster]", "button"])
    assert max(tops) - min(tops) < 8, tops
    assert page.locator(".budgets-cluster select[name=cluster]").bounding_box()["width"] < 300
