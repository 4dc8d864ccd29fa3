"""An idle workload's page in a real browser (tests/browser.py): its running attempt says it is idle
(docs/jobs.md "Idle GPUs"), a busy one's says nothing of it. Skipped without Chromium or Playwright."""

from __future__ import annotations

import re

import pytest

from scheduler.services import do_submit_workload
from tests.api.test_idle_api import run_on
from tests.browser import log_in


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}


def test_the_workload_page_marks_an_idle_attempt(new_page, researcher, submit_kwargs):
    idle = do_submit_workload(researcher, **submit_kwargs(name="idler", gpu_count=2))
    busy = do_submit_workload(researcher, **submit_kwargs(name="worker", gpu_count=2))
    run_on(idle, "a100-1", 0.0)
    run_on(busy, "a100-2", 60.0)

    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{idle.pk}/")
    marker = page.locator(".idle-marker")
    text = marker.inner_text()
    assert re.match(r"idle for 1h (19|20)m \(GPUs < 1 % since (?:[A-Z][a-z]{2} \d+ )?\d\d:\d\d:00 UTC\)", text), text
    assert text.endswith(" GPU-h held idle"), text  # left60: as its charged GPU-time
    assert marker.is_visible()

    page.goto(f"/workloads/{busy.pk}/")
    page.wait_for_selector("text=worker")
    assert page.locator(".idle-marker").count() == 0


def test_the_workload_list_marks_and_filters_idle_work(new_page, researcher, submit_kwargs):
    idle = do_submit_workload(researcher, **submit_kwargs(name="idler", gpu_count=2))
    busy = do_submit_workload(researcher, **submit_kwargs(name="worker", gpu_count=2))
    run_on(idle, "a100-1", 0.0)
    run_on(busy, "a100-2", 60.0)

    page = new_page()
    log_in(page, "researcher")
    page.goto("/workloads/")
    rows = page.locator("#workload-rows")
    assert rows.locator(".idle-marker").count() == 1
    assert re.match(r"idle for 1h (19|20)m \(GPUs < 1 % since ", rows.locator(".idle-marker").inner_text())
    page.select_option("select[name=idle]", "true")  # the filter form: htmx swaps the rows
    page.wait_for_url("**/workloads/?*idle=true*")
    page.wait_for_function("!document.querySelector('#workload-rows').innerText.includes('worker')")
    text = page.inner_text("#workload-rows")
    assert "idler" in text and "worker" not in text
