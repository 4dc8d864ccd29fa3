"""try56: the clusters page counted the GPUs no attempt holds as "idle 2" and an empty host as "idle",
while "idle" everywhere else (`fairway ls --idle`, the workload page, the `idle` notification: docs/jobs.md
"Idle GPUs") means GPUs an attempt holds at under 1 % utilization: with one such attempt running the
page said "idle 0". Its own legend already said "free": the counts and the host row say it too."""

from __future__ import annotations

from tests.browser import log_in


def test_the_clusters_page_says_free_for_unheld_gpus(new_page, admin, hosts):
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/")

    legend = page.locator(".legend").first.inner_text()
    assert "free " in legend and "idle" not in legend, legend
    assert "idle" not in page.locator(".stack").first.get_attribute("title")
    row = page.locator("#host-a100-1").inner_text()
    assert "no attempts" in row and "idle" not in row, row


def test_the_clusters_page_marks_the_gpus_held_idle(new_page, admin, researcher, submit_kwargs, settings, hosts):
    """try56: an operator looking at the GPU grid for GPUs held at 0 % (docs/jobs.md "Idle GPUs")
    found them nowhere but in `fairway ls --idle`: the grid marks them and the host's row says so,
    in the words of every surface (``fairway_cli.words.idle_held_text``)."""
    from scheduler.services import do_submit_workload
    from tests.api.test_idle_api import run_on

    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}
    idle = do_submit_workload(researcher, **submit_kwargs(name="idler", gpu_count=2))
    busy = do_submit_workload(researcher, **submit_kwargs(name="worker", gpu_count=2))
    run_on(idle, "a100-1", 0.0)
    run_on(busy, "a100-2", 60.0)

    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/")

    assert page.locator("#host-a100-1 .gpu.idle-held").count() == 2
    assert page.locator("#host-a100-2 .gpu.idle-held").count() == 0
    title = page.locator("#host-a100-1 .gpu.idle-held").first.get_attribute("title")
    assert "idle for 1h" in title, title
    row = page.locator("#host-a100-1 .idle-held-note").inner_text()
    assert row.startswith(f"#{idle.pk} idle for 1h"), row
    assert page.locator("#host-a100-2 .idle-held-note").count() == 0


def test_a_heartbeat_of_this_second_is_not_0_ago():
    """try56: the clusters page's "last heartbeat" read "0 ago" for a heartbeat of this second."""
    from datetime import timedelta

    from django.utils import timezone

    from web.templatetags.fairway import since

    now = timezone.now()
    assert since(now, now) == "0s"
    assert since(now - timedelta(seconds=65), now) == "1m 5s"
