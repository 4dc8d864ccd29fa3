"""wait51: one Playwright and one Chromium serve every browser test of a process (tests/browser.py),
and a test without a browser after one sees its thread as before any browser ran: no event loop
marked running, Django's ORM allowed, ``asyncio.run`` free to start. Skipped without Chromium or
Playwright (the first and the last test)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from accounts.models import User

SEEN: list[Any] = []  # the first test's browser; the tests run in this order (--dist loadfile)


def test_a_browser_test_gets_this_process_s_browser(new_page):
    page = new_page()
    page.goto("/login/")
    assert page.locator("#id_username").is_visible()
    SEEN.append(page.context.browser)


@pytest.mark.django_db
def test_a_test_without_a_browser_after_it_sees_no_running_loop():
    assert asyncio._get_running_loop() is None
    assert "DJANGO_ALLOW_ASYNC_UNSAFE" not in os.environ
    assert not User.objects.filter(username="nobody-wait51").exists()  # no SynchronousOnlyOperation

    async def answer() -> int:
        return 42

    assert asyncio.run(answer()) == 42


def test_the_next_browser_test_gets_the_same_browser_with_no_context_left(new_page):
    if not SEEN:
        pytest.skip("the first test did not run in this process")
    page = new_page()
    assert page.context.browser is SEEN[0]
    assert page.context.browser.contexts == [page.context]  # the first test's context was closed
    page.goto("/login/")
    assert page.locator("#id_username").is_visible()
