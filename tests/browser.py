"""The browser tests' one way to drive a real browser: Playwright driving Debian's Chromium
(``apt-get install chromium``; never a downloaded browser). Registered as a plugin by
tests/conftest.py, so every test may ask for its fixtures:

- ``chromium``: the browser, started on the first page asked of it (a test's own setup before that
  runs without Playwright's event loop in its thread) and closed after the test; the test skips
  when the ``playwright`` package or ``/usr/bin/chromium`` is missing.
- ``new_page(**context_options)``: a page on the ``live_server``, in a context of its own (its own
  cookies: one a user).

and call ``log_in(page, username)``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from tests.conftest import PASSWORD

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000  # any one wait of a page (a selector, a navigation), unless the test says otherwise


class Chromium:
    """Debian's Chromium under Playwright's sync API, launched on the first ``page`` call."""

    def __init__(self) -> None:
        self._running = ExitStack()
        self._browser: Any = None

    def page(self, base_url: str, **context_options: Any) -> Any:
        """A new page, in a new context (``Browser.new_context``'s options) whose relative URLs
        are read against ``base_url``; every wait of it gives up after ``TIMEOUT_MS``."""
        if self._browser is None:
            from playwright.sync_api import sync_playwright

            playwright = self._running.enter_context(sync_playwright())
            self._browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            self._running.callback(self._browser.close)
        context = self._browser.new_context(base_url=base_url, **context_options)
        context.set_default_timeout(TIMEOUT_MS)
        return context.new_page()

    def close(self) -> None:
        """Closes the database connections the test made while Playwright ran, the browser, and
        stops Playwright (again: nothing).

        While Playwright's sync API runs, its event loop counts as running in this thread, so
        Django keeps this thread's connections in asgiref's context-variable storage instead of
        the thread-local one: a second set, which the main greenlet's context keeps from one test
        to the next, and which nothing else closes (the teardown after Playwright stopped sees the
        thread-local set). ``end_stray_sessions`` ended the one connection it held and the next
        browser test's ORM read failed with "terminating connection due to administrator command"
        (brk55's test and the SSO one had each replaced it)."""
        try:
            if self._browser is not None:
                from django.db import connections

                # the context-variable set, while Playwright's loop still runs: allowed here even
                # where the test undid its monkeypatch (and with it the fixture's setting)
                with _async_unsafe_allowed():
                    connections.close_all()
        finally:  # Playwright stopped whatever happened: its loop left running fails every later test
            self._running.close()
            self._browser = None


@contextmanager
def _async_unsafe_allowed() -> Iterator[None]:
    """Django's ORM allowed in this thread while Playwright's event loop runs, then as before."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield
    finally:
        if before is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def chromium(monkeypatch: pytest.MonkeyPatch) -> Iterator[Chromium]:
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed")
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM reads are safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    browser = Chromium()
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def new_page(chromium: Chromium, live_server: Any) -> Callable[..., Any]:
    """``new_page(**context_options)``: a page on the live server (``Chromium.page``)."""

    def make(**context_options: Any) -> Any:
        return chromium.page(live_server.url, **context_options)

    return make


def log_in(page: Any, username: str, password: str = PASSWORD) -> None:
    """Logs ``page`` in through the login form (opened unless the page is on it already, as after
    a redirect to it) and waits for the dashboard."""
    if "/login/" not in page.url:
        page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url("/")  # read against the context's base URL
