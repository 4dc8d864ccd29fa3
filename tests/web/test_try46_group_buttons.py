"""try46: a member's page offers the group's buttons only where they change a member (docs/jobs.md
"Hold and release", "Arrays"), in a real browser (Playwright driving Debian's Chromium). Skipped
when ``/usr/bin/chromium`` or the ``playwright`` package is missing."""

from __future__ import annotations

import shutil

import pytest

from scheduler.services import do_submit_workload
from tests.e2e.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.web.test_browser_hold import _log_in

playwright_sync = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian's chromium is not installed")

BUTTONS = ("#cancel-group-button", "#hold-group-button", "#release-group-button")


def test_the_group_buttons_follow_its_members_states(live_server, researcher, submit_kwargs, monkeypatch):
    """A held group offered "Hold the group", a finished one all three buttons, each doing nothing."""
    first = do_submit_workload(researcher, **submit_kwargs(), array="0-1", hold=True)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    seen: list[tuple[int, ...]] = []
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(base_url=live_server.url).new_page()
            page.set_default_timeout(20_000)
            page.on("dialog", lambda dialog: dialog.accept())
            _log_in(page, live_server.url, "researcher")

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
        finally:
            browser.close()
    assert seen == [(1, 0, 1), (1, 1, 0), (0, 0, 0)]
