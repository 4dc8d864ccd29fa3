"""The web UI in a real browser (Playwright driving Debian's Chromium) against the whole stack:
uvicorn, worker, clock and a fake-GPU agent (``stack`` of ``tests/e2e/conftest.py``).

A researcher logs in, submits through the form, watches the workload run on the agent and
finish, reads why a second one is pending (in words, with the time protection ends), and cancels
it. Every page is saved as a PNG: under ``$FAIRWAY_SCREENSHOTS`` when set (``make screenshots``
refreshes ``docs/screenshots/``), else in the test's temporary directory. Skipped when
``/usr/bin/chromium`` or the ``playwright`` package is missing; never downloads a browser.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Chromium, log_in

REPO = Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1360, "height": 900}


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("FAIRWAY_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def page(stack: Any, chromium: Chromium) -> Any:
    # the browser, asked for after the stack, is closed before the stack stops
    return chromium.page(stack.base_url, viewport=VIEWPORT)


@pytest.fixture
def shot(page: Any, shots: Path) -> Any:
    def take(name: str) -> None:
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

    return take


def submit_form(page: Any, stack: Any, *, name: str, budget: str, duration: float, min_runtime: str) -> int:
    page.goto("/submit/")
    page.fill("#id_name", name)
    page.fill("#id_command", f"{sys.executable} -m agent.standin --duration {duration:g}")
    page.fill("#id_env", f"PYTHONPATH={REPO}")
    page.fill("#id_secret_env", "WANDB_KEY=not-a-real-key")
    page.select_option("#id_cluster", stack.cluster.name)
    page.select_option("#id_budget", budget)
    page.select_option("#id_gpu_model", "H100")
    page.fill("#id_gpu_count", "2")
    page.fill("#id_min_runtime", min_runtime)
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r"/workloads/\d+/$"))
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_researcher_submits_watches_reads_why_pending_and_cancels(
    _no_stray_sessions: None, stack: Any, chromium: Chromium, page: Any, shot: Any, shots: Path
) -> None:
    from accounts.models import User
    from scheduler.models import Workload

    rita = User.objects.get(username="rita")
    rita.set_password("rita-password")
    rita.save()

    # Log in.
    page.goto("/")
    assert "/login/" in page.url
    shot("01-login")
    log_in(page, "rita", "rita-password")

    # A refused submission shows the service's errors beside the fields.
    page.goto("/submit/")
    page.fill("#id_command", "python train.py")
    page.select_option("#id_budget", "alpha")
    page.fill("#id_gpu_count", "3")
    page.fill("#id_min_runtime", "48h")
    page.click("#submit-form button[type=submit]")
    page.wait_for_selector("#id_min_runtime-errors")
    assert "at most" in page.inner_text("#id_min_runtime-errors")
    assert "GPUs" in page.inner_text("#id_gpu_count-errors")
    shot("03-submit-errors")
    page.goto("/submit/")
    shot("02-submit")

    # Submit through the form; watch it start on the fake-GPU agent and finish.
    first = submit_form(page, stack, name="short-run", budget="alpha", duration=4, min_runtime="60")
    page.wait_for_selector("h1 .badge.running", timeout=30_000)
    page.wait_for_selector("#logs pre", timeout=15_000)
    assert "standin: running" in page.inner_text("#logs pre")
    assert "WANDB_KEY=********" in page.content() and "not-a-real-key" not in page.content()
    shot("05-workload-running")
    page.wait_for_selector("h1 .badge.succeeded", timeout=40_000)
    shot("06-workload-succeeded")
    assert Workload.objects.get(pk=first).state == "succeeded"

    # A long protected workload takes both GPUs; a second one, of another budget, waits for it.
    long_run = submit_form(page, stack, name="long-run", budget="alpha", duration=120, min_runtime="10m")
    page.wait_for_selector("h1 .badge.running", timeout=30_000)
    waiting = submit_form(page, stack, name="waits", budget="beta", duration=5, min_runtime="60")
    page.wait_for_selector("#why-pending p:has-text('Protected work on h1 ends at')", timeout=30_000)
    why = page.inner_text("#why-pending")
    assert "the earliest it could take those GPUs" in why
    assert "Estimated start" in why
    shot("07-workload-pending-why")

    # The tokens page; the other pages' pictures show a lab's week (tests/web/test_screenshots_lab.py).
    page.goto("/tokens/")
    page.wait_for_load_state("networkidle")
    shot("12-tokens")
    assert "long-run" in page.goto("/workloads/?owner=me").text()
    page.goto("/clusters/")
    assert page.locator("#host-h1 .gpu.alloc").count() == 2

    # An admin drains the host from the cluster page: the protected attempt may finish its
    # minimum runtime, and the page shows when the drain will end; then resumes it.
    User.objects.create_user("ada", password="ada-password", is_staff=True, is_superuser=True)
    admin_page = chromium.page(stack.base_url, viewport=VIEWPORT)
    try:
        log_in(admin_page, "ada", "ada-password")
        admin_page.goto("/clusters/")
        admin_page.fill("#host-h1 input.host-reason", "firmware update")  # one reason, any button
        admin_page.click("#host-h1 button[formaction$='/drain/']")
        admin_page.wait_for_selector("#host-h1 .badge.draining")
        assert "last protection ends" in admin_page.inner_text("#host-h1")
        assert "by ada" in admin_page.inner_text("#host-h1") and "firmware update" in admin_page.inner_text("#host-h1")
        admin_page.click("#host-h1 button[formaction$='/resume/']")
        admin_page.wait_for_selector("#host-h1 .badge.active")
    finally:
        admin_page.context.close()

    # Cancel the pending one from its page.
    page.goto(f"/workloads/{waiting}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-button")
    page.wait_for_selector("h1 .badge.canceled")
    assert Workload.objects.get(pk=waiting).state == "canceled"
    shot("13-workload-canceled")

    # And the running one: a stop like any other (SIGTERM, then the exit is reported).
    page.goto(f"/workloads/{long_run}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-button")
    page.wait_for_selector("h1 .badge.canceled", timeout=30_000)

    # The API's own documentation, served by the server itself.
    page.goto("/api/docs/")
    page.wait_for_selector(".swagger-ui .info", timeout=20_000)
    shot("14-api-swagger")
    page.goto("/api/redoc/")
    page.wait_for_selector("text=Fairway API", timeout=20_000)
    # the first screen only: the whole reference is 25,000 px tall (a 2 MB picture of nothing legible)
    page.screenshot(path=str(shots / "15-api-redoc.png"))
    assert (shots / "07-workload-pending-why.png").exists()
