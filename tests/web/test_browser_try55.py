"""try55: the page of a workload canceled before it started said "No attempt yet." twice (the
attempts and the log tail), as if one might still come. Skipped without Chromium/Playwright."""

from __future__ import annotations

from scheduler.services import do_cancel_workload, do_submit_workload
from tests.browser import log_in


def test_a_workload_canceled_before_it_started_never_ran_on_its_page(new_page, researcher, submit_kwargs):
    canceled = do_submit_workload(researcher, **submit_kwargs(name="gone"))
    do_cancel_workload(researcher, canceled)
    pending = do_submit_workload(researcher, **submit_kwargs(name="waiting"))
    page = new_page()
    log_in(page, "researcher")

    page.goto(f"/workloads/{canceled.pk}/")
    page.wait_for_function("!document.body.innerText.includes('Asking the agent')")
    ended = page.inner_text("body")
    page.goto(f"/workloads/{pending.pk}/")
    page.wait_for_function("!document.body.innerText.includes('Asking the agent')")
    waiting = page.inner_text("body")

    assert "yet" not in ended.replace("not started yet", "")
    assert ended.count("This workload ended canceled without an attempt: it never ran.") == 2
    assert waiting.count("This workload has no attempt yet.") == 2


def test_quote_first_with_no_command_nor_minimum_runtime_in_a_browser(new_page, researcher, cluster):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/")
    page.fill("#id_command", "")
    page.fill("#id_min_runtime", "")
    page.select_option("#id_gpu_model", "A100")
    page.get_by_role("button", name="Quote first").click()
    page.wait_for_selector("#quote-table")

    assert "2h" in page.inner_text("#quote-table")
    assert "This field is required." not in page.inner_text("body")
