"""left50: a resubmission's page and its original's, in a real browser: "resubmitted from #N" and
"resubmitted as #M" (``fairway_cli.words``, the words of every surface), each a link to the other."""

from __future__ import annotations

import shutil

import pytest

from fairway_cli.words import resubmitted_as_text, resubmitted_from_text
from scheduler.services import do_submit_workload
from tests.e2e.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.web.test_browser_update import _log_in

playwright_sync = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian's chromium is not installed")


def test_the_pages_word_and_link_the_origin_and_the_copy(live_server, researcher, submit_kwargs, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    old = do_submit_workload(researcher, **submit_kwargs())
    new = do_submit_workload(researcher, **submit_kwargs(), resubmitted_from=old)
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(base_url=live_server.url).new_page()
            page.set_default_timeout(20_000)
            _log_in(page, live_server.url, "researcher")
            page.goto(f"/workloads/{new.pk}/")
            copy_facts = page.inner_text(".facts")
            page.click("#resubmitted-from")
            page.wait_for_url(f"{live_server.url}/workloads/{old.pk}/")
            old_facts = page.inner_text(".facts")
            page.click(f"#resubmissions a[href='/workloads/{new.pk}/']")
            page.wait_for_url(f"{live_server.url}/workloads/{new.pk}/")
        finally:
            browser.close()

    assert resubmitted_from_text(old.pk) in " ".join(copy_facts.split())
    assert resubmitted_as_text([new.pk]) in " ".join(old_facts.split())
