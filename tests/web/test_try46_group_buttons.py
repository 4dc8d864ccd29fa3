"""try46: a member's page offers the group's buttons only where they change a member (docs/jobs.md
"Hold and release", "Arrays"), in a real browser (Playwright driving Debian's Chromium). Skipped
when ``/usr/bin/chromium`` or the ``playwright`` package is missing."""

from __future__ import annotations

from scheduler.services import do_submit_workload
from tests.browser import log_in

BUTTONS = ("#cancel-group-button", "#hold-group-button", "#release-group-button")


def test_the_group_buttons_follow_its_members_states(new_page, researcher, submit_kwargs):
    """A held group offered "Hold the group", a finished one all three buttons, each doing nothing."""
    first = do_submit_workload(researcher, **submit_kwargs(), array="0-1", hold=True)
    seen: list[tuple[int, ...]] = []
    page = new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, "researcher")

    def shown() -> tuple[int, ...]:
        page.goto(f"/workloads/{first.pk}/")
        page.wait_for_selector("#why-pending, h1")
        return tuple(page.locator(b).count() for b in BUTTONS)

    seen.append(shown())  # held
    page.click("#release-group-button")
    page.wait_for_url("**/workloads/?group=*")
    seen.append(shown())  # released
    page.click("#cancel-group-button")
    page.wait_for_url("**/workloads/?group=*")
    seen.append(shown())  # canceled
    assert seen == [(1, 0, 1), (1, 1, 0), (0, 0, 0)]
