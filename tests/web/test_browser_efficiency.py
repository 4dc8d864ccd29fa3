"""A workload's efficiency on its page in a real browser (tests/browser.py; docs/jobs.md
"Efficiency"): the "Efficiency" block and each attempt's utilization. Skipped without Chromium or
Playwright."""

from __future__ import annotations

from fairway_cli.words import NOT_MEASURED
from tests.api.test_efficiency_api import twice  # noqa: F401 -- the fixture
from tests.browser import log_in


def test_the_workload_page_shows_how_well_it_used_its_gpus(new_page, twice):  # noqa: F811
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{twice.pk}/")
    block = page.locator("#efficiency")
    assert block.is_visible()
    rows = dict((r.locator("th").text_content(), r.locator("td").inner_text()) for r in block.locator("tr").all())
    assert rows["GPU utilization"] == "80% (mean over the measured GPU-time)", rows
    assert rows["Peak GPU memory"] == "30.0 of 80.0 GiB (38%)", rows
    assert rows["Not measured"] == "50% of the GPU-time held had no utilization reading", rows
    assert page.locator(".attempt-util").all_inner_texts() == ["80%", NOT_MEASURED]


def test_a_job_seconds_old_after_another_reads_not_measured_yet_and_why(new_page, researcher, submit_kwargs):
    """util63: a job seconds old read the previous job's minute on its GPU. util46: a minute another
    attempt held the GPU in too is not its own; until it has one, the page says so."""
    import time
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Attempt, Workload
    from scheduler.services import do_submit_workload
    from tests.api.test_efficiency_api import ran

    # The browser started and logged in first (seconds at load), so that only the job's rows and
    # the page's load are left to fit in the minute (slow50: the wait is then rarer and shorter).
    page = new_page()
    log_in(page, "researcher")
    # The job must still be in the minute it shares with the other when the page is read: a minute
    # boundary in between gave it a minute of its own, unsampled ("not measured", at load: 1 run in 2)
    if (second := timezone.now().second) >= 40:
        time.sleep(61 - second)
    before = do_submit_workload(researcher, **submit_kwargs(name="before", gpu_count=1))
    w = do_submit_workload(researcher, **submit_kwargs(name="young", gpu_count=1))
    attempt = ran(w, "a100-1", 1, 0, 1, 90.0, end=False)  # the minute it was placed in: both jobs'
    minute = attempt.placed_at
    attempt.placed_at = attempt.started_at = max(
        minute + timedelta(microseconds=1), timezone.now() - timedelta(seconds=5)
    )
    attempt.save(update_fields=["placed_at", "started_at"])
    previous = ran(before, "a100-1", 1, 3, 3, None)  # ended as the young one was placed
    Attempt.objects.filter(pk=previous.pk).update(ended_at=attempt.placed_at)
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)
    page.goto(f"/workloads/{w.pk}/")
    said = "not measured yet (so far its GPUs were shared with other jobs in every minute it held them)"
    rows = dict(
        (r.locator("th").text_content(), r.locator("td").inner_text()) for r in page.locator("#efficiency tr").all()
    )
    assert rows["GPU utilization"] == said, rows
    assert page.locator(".attempt-util").all_inner_texts() == [said]
