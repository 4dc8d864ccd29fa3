"""The browser tests' one way to drive a real browser: Playwright driving Debian's Chromium
(``apt-get install chromium``; never a downloaded browser). Registered as a plugin by
tests/conftest.py, so every test may ask for its fixtures:

- ``chromium``: the browser, asked for its first page by the test (a test's own setup before that
  runs without Playwright's event loop in its thread); the contexts the test opened are closed
  after it. The test skips when the ``playwright`` package or ``/usr/bin/chromium`` is missing.
- ``new_page(**context_options)``: a page on the ``live_server``, in a context of its own (its own
  cookies: one a user).

and call ``log_in(page, username)``.

One Playwright and one Chromium serve every test of a process (an xdist worker), started for the
first page asked of them and stopped when the session ends: launching both for each test cost
≈ 2 s (≈ 1.7 s of CPU) a test. Between tests Playwright's loop is parked (``_Shared.park``), so
the tests without a browser see this thread as before any browser test ran.
"""

from __future__ import annotations

import asyncio
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


class _Shared:
    """This process's Playwright (sync API) and Chromium, kept from one test to the next.

    Playwright's sync API runs its event loop in a greenlet of this thread and, after each call,
    marks that loop as running in the thread (asyncio's running loop is per thread, not per
    greenlet). A loop left marked breaks every later test of the thread that is not a browser
    test: Django's ORM raises SynchronousOnlyOperation, ``asyncio.run`` refuses to start, and
    Django keeps the thread's connections in asgiref's context-variable storage instead of the
    thread-local one. Nothing runs the loop between two Playwright calls (only a call switches to
    its greenlet), so ``park`` unmarks it after a test and ``browser`` marks it again before the
    next test's first call, as Playwright itself does after each call."""

    def __init__(self) -> None:
        self._running = ExitStack()
        self._browser: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def browser(self) -> Any:
        """The browser, launched on the first call; Playwright's loop marked running again."""
        if self._browser is None:
            from playwright.sync_api import sync_playwright

            try:
                playwright = self._running.enter_context(sync_playwright())
                self._loop = asyncio.get_running_loop()  # marked by Playwright's start
                self._browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                self._running.callback(self._browser.close)
            except BaseException:
                self.stop()
                raise
        else:
            self.resume()
        return self._browser

    def resume(self) -> None:
        """Playwright's loop marked running in this thread, as its own calls leave it."""
        if self._loop is not None:
            asyncio._set_running_loop(self._loop)

    @property
    def started(self) -> bool:
        return self._loop is not None

    def park(self) -> None:
        """After a test: the contexts it opened closed, Playwright's loop not marked running. Stops
        everything (the next test starts afresh) when that fails: a browser that crashed or hung."""
        if self._loop is None:
            return
        try:
            self.resume()
            for context in self._browser.contexts:
                context.close()
        except BaseException:
            self.stop()
            raise
        finally:
            asyncio._set_running_loop(None)

    def stop(self) -> None:
        """The browser closed and Playwright stopped (its loop marked running while it stops, then
        not); again: nothing."""
        try:
            self.resume()
            self._running.close()
        finally:
            self._running = ExitStack()
            self._browser = None
            self._loop = None
            asyncio._set_running_loop(None)


_SHARED = _Shared()


class Chromium:
    """One test's view of this process's Chromium: ``page`` opens a page in a context of its own."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._used = False

    def page(self, base_url: str, **context_options: Any) -> Any:
        """A new page, in a new context (``Browser.new_context``'s options) whose relative URLs
        are read against ``base_url``; every wait of it gives up after ``TIMEOUT_MS``."""
        self._used = True
        context = self._shared.browser().new_context(base_url=base_url, **context_options)
        context.set_default_timeout(TIMEOUT_MS)
        return context.new_page()

    def close(self) -> None:
        """Closes the database connections the test made while Playwright's loop was marked
        running, then the test's contexts, and parks Playwright (``_Shared.park``).

        While the loop counts as running in this thread, Django keeps this thread's connections
        in asgiref's context-variable storage instead of the thread-local one: a second set, which
        the main greenlet's context keeps from one test to the next, and which nothing else closes
        (the teardown after the loop was parked sees the thread-local set). ``end_stray_sessions``
        ended the one connection it held and the next browser test's ORM read failed with
        "terminating connection due to administrator command" (brk55's test and the SSO one had
        each replaced it)."""
        if not self._used or not self._shared.started:
            return
        try:
            from django.db import connections

            self._shared.resume()
            # the context-variable set, while the loop is marked running: allowed here even where
            # the test undid its monkeypatch (and with it the fixture's setting)
            with _async_unsafe_allowed():
                connections.close_all()
        finally:  # parked whatever happened: a loop left marked running fails every later test
            self._shared.park()


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


@pytest.fixture(scope="session")
def _shared_chromium() -> Iterator[_Shared]:
    """This process's Playwright and Chromium (``_Shared``), stopped when the session ends."""
    try:
        yield _SHARED
    finally:
        _SHARED.stop()


@pytest.fixture
def chromium(monkeypatch: pytest.MonkeyPatch, _shared_chromium: _Shared) -> Iterator[Chromium]:
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed")
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM reads are safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    browser = Chromium(_shared_chromium)
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
