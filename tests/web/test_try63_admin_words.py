"""try63: the admin's lists of workloads and attempts say what the pages and the CLI say.

- Workloads: the "pending reason" column read the policy's codes (``fair_share``,
  ``insufficient_gpus``, ``held``) where the workloads page, the dashboard and ``fairway ls`` say
  "other budgets go first", "not enough GPUs", "held by its owner" (``fairway_cli.words.reason_words``).
- Attempts: the "charged" column of an open allocated attempt read "running" where the workloads
  page, its page and the API give the GPU-time charged so far (``accounting.attempt_charged_gpu_seconds``).

In a real browser (Playwright driving Debian's Chromium); skipped without ``/usr/bin/chromium`` or
Playwright."""

from __future__ import annotations

import re

from fairway_cli.words import reason_words
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.api.test_efficiency_api import ran
from tests.browser import log_in


def _cells(page, column: str) -> dict[str, str]:
    """``column``'s text in the admin change list, by each row's first link (the object's name)."""
    page.wait_for_selector("#result_list")
    headers = [h.strip().lower() for h in page.locator("#result_list thead th").all_inner_texts()]
    index = headers.index(column) + 1
    rows = page.locator("#result_list tbody tr").all()
    return {
        r.locator("th a, td a").first.inner_text().strip(): r.locator(f"> :nth-child({index})").inner_text().strip()
        for r in rows
    }


def test_the_admins_workload_list_names_the_pending_reason_in_the_pages_words(
    new_page, admin, researcher, submit_kwargs
):
    waiting = do_submit_workload(researcher, **submit_kwargs(name="waiting", gpu_count=1))
    short = do_submit_workload(researcher, **submit_kwargs(name="short", gpu_count=1))
    held = do_submit_workload(researcher, **submit_kwargs(name="held", gpu_count=1))
    Workload.objects.filter(pk=waiting.pk).update(pending_reason="fair_share")
    Workload.objects.filter(pk=short.pk).update(pending_reason="insufficient_gpus")
    Workload.objects.filter(pk=held.pk).update(pending_reason="held", hold="user")

    page = new_page()
    log_in(page, "admin")
    page.goto("/admin/scheduler/workload/")
    cells = _cells(page, "pending reason")

    assert cells[str(waiting.pk)] == reason_words("fair_share") == "other budgets go first", cells
    assert cells[str(short.pk)] == "not enough GPUs", cells
    assert cells[str(held.pk)] == reason_words("held", hold="user") == "held by its owner", cells


def test_the_admins_attempt_list_charges_an_open_attempt_as_its_page_does(new_page, admin, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="trainer", gpu_count=2))
    attempt = ran(w, "a100-1", 1, 90, 0, None, end=False)  # 2 GPUs for 90 minutes so far
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)

    page = new_page()
    log_in(page, "admin")
    page.goto("/admin/scheduler/attempt/")
    charged = _cells(page, "charged")[str(attempt.pk)]
    page.goto("/workloads/")  # its one attempt: the workload's charge is the attempt's
    on_its_page = page.locator(".acct-charged").first.inner_text().strip()

    # 2 GPUs × 90 minutes and the seconds of this minute; the two reads a moment apart
    assert re.fullmatch(r"3\.0\d GPU-h", charged) and re.fullmatch(r"3\.0\d GPU-h", on_its_page), (charged, on_its_page)
    assert abs(float(charged.split()[0]) - float(on_its_page.split()[0])) <= 0.01, (charged, on_its_page)
