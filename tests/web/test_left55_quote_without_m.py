"""The submit page's "Quote first" without a minimum runtime: the ladder
(``scheduler.estimates.quote_runtimes(None)``), as the API and the CLI quote without one; a
submission still needs one. Client tests and a Playwright browser test."""

from __future__ import annotations

import re

from scheduler.estimates import quote_runtimes
from scheduler.models import Workload
from tests.browser import log_in
from tests.web.test_pages import _form


def _rows(page: str) -> list[str]:
    table = page[page.index('id="quote-table"') :]
    return [re.sub("<.*?>", "", r).strip() for r in re.findall(r"<tr(?: class=\"yours\")?><td>(.*?)</td>", table)]


def test_quote_first_without_a_minimum_runtime_prices_the_ladder(browser):
    response = browser.post("/submit/", {**_form(min_runtime=""), "quote": "1"})

    page = response.content.decode()
    assert response.status_code == 200, page
    assert len(_rows(page)) == len(quote_runtimes(None)) == 5
    assert _rows(page)[0] == "0 (unallocated)" and "(yours)" not in page
    assert Workload.objects.count() == 0


def test_quote_first_of_submit_again_without_a_minimum_runtime_prices_the_ladder(browser, researcher, submit_kwargs):
    from scheduler.services import do_submit_workload

    old = do_submit_workload(researcher, **submit_kwargs())
    response = browser.post(f"/submit/?again={old.pk}", {**_form(min_runtime=""), "quote": "1", "again": old.pk})

    assert response.status_code == 200, response.content.decode()
    assert len(_rows(response.content.decode())) == len(quote_runtimes(None))
    assert Workload.objects.count() == 1


def test_a_submission_without_a_minimum_runtime_is_still_refused(browser):
    response = browser.post("/submit/", _form(min_runtime=""))

    assert response.status_code == 400
    assert "This field is required" in response.content.decode()
    assert Workload.objects.count() == 0


def test_the_browser_quotes_with_the_minimum_runtime_left_empty(new_page, researcher, cluster):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/")
    page.fill("#id_image", "ghcr.io/lab/train:1")
    page.fill("#id_command", "python train.py")
    page.select_option("#id_budget", "nlp/olmo")
    page.select_option("#id_gpu_model", "A100")
    page.fill("#id_min_runtime", "")
    page.click("button[name=quote]")
    page.wait_for_selector("#quote-table")

    cells = page.locator("#quote-table tbody tr td:first-child").all_inner_texts()
    assert [c.strip() for c in cells][0] == "0 (unallocated)"
    assert len(cells) == len(quote_runtimes(None))
    assert not page.locator("#quote-table tr.yours").count()
    assert page.input_value("#id_min_runtime") == ""
    assert Workload.objects.count() == 0


def test_the_field_says_what_an_empty_one_quotes(browser):
    assert "Empty, Quote first prices 0, 30m, 2h, 8h, 1d." in browser.get("/submit/").content.decode()
