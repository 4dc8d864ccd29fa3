"""words46: an attempt running unfunded because its budget reached its cap (``on_cap: downgrade``,
DESIGN.md §3.7) read "MIN-RUNTIME 10m", "0 GPU-h" and an empty WHY in ``fairway ls`` and the web
list, as protected work does; only ``fairway show`` said it was not. The API's list says it
(``accounting.unfunded``), and the lists mark the minimum runtime ``1h (unfunded)``
(``fairway_cli.words.unfunded_text``, the quote's start's mark too). The browser test drives
Debian's Chromium with Playwright (skipped without them)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from fairway_cli.words import UNFUNDED_ATTEMPT
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.cli.inprocess import run_cli


def _running(workload: Workload, host, *, unfunded: bool) -> Workload:
    Attempt.objects.create(
        workload=workload,
        number=1,
        host=host,
        allocated=not unfunded,  # the policy starts unfunded work in its unallocated pass
        unfunded=unfunded,
        placed_at=timezone.now() - timedelta(minutes=5),
        started_at=timezone.now() - timedelta(minutes=5),
    )
    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.RUNNING)
    return workload


@pytest.fixture
def two(researcher, submit_kwargs, hosts) -> tuple[Workload, Workload]:
    """A running workload of ``nlp/olmo`` funded, and one its budget's cap made unfunded (min. runtime 1h)."""
    funded = _running(do_submit_workload(researcher, **submit_kwargs(name="funded")), hosts["a100-1"], unfunded=False)
    capped = _running(do_submit_workload(researcher, **submit_kwargs(name="capped")), hosts["a100-2"], unfunded=True)
    return funded, capped


def test_the_api_list_says_which_runs_unfunded(researcher_client, two):
    funded, capped = two
    rows = {r["id"]: r for r in researcher_client.get("/api/v1/workloads/").json()["results"]}
    assert rows[capped.pk]["accounting"]["unfunded"] is True
    assert rows[funded.pk]["accounting"]["unfunded"] is False
    detail = researcher_client.get(f"/api/v1/workloads/{capped.pk}/").json()
    assert detail["accounting"]["unfunded"] is True


def test_fairway_ls_marks_the_minimum_runtime(monkeypatch, researcher, two):
    funded, capped = two
    lines = {line.split()[0]: line for line in run_cli(monkeypatch, researcher, "ls").splitlines()[1:]}
    assert "1h (unfunded)" in lines[str(capped.pk)]
    assert "unfunded" not in lines[str(funded.pk)]


def test_the_web_list_marks_the_minimum_runtime(researcher, two):
    funded, capped = two
    client = Client()
    client.force_login(researcher)
    page = client.get("/workloads/").content.decode()
    assert f'<td class="num unfunded-marker" title="{UNFUNDED_ATTEMPT}">1h (unfunded)</td>' in page
    assert page.count("(unfunded)") == 1


def test_the_web_list_marks_it_in_a_browser(new_page, researcher, two):
    funded, capped = two
    page = new_page()
    log_in(page, "researcher")
    page.goto("/workloads/")
    marked = page.inner_text(".unfunded-marker")
    title = page.get_attribute(".unfunded-marker", "title")
    row = page.inner_text(f"tr:has(a[href='/workloads/{capped.pk}/'])")
    assert marked == "1h (unfunded)" and title == UNFUNDED_ATTEMPT and "1h (unfunded)" in row
