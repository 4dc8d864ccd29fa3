"""quote46: a quote line's start, charge and ratio in one statement on every surface. The submit
form's "Starts by" column and ``fairway submit --quote``'s STARTS BY were each built from the
API's fields by their own rule; both now print the API's ``start_text``
(``fairway_cli.words.quote_start_text``), and a line that has no start because of its budget (on
hold, or at a cap of 0 that holds allocated work) says so instead of "none before <a week on>".
The page in a real browser (Playwright driving Debian's Chromium; skipped without
``/usr/bin/chromium`` or Playwright), the CLI with its API calls answered in-process."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from fairway_cli.numbers import gpu_time_text
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.cli.inprocess import run_cli

URL = "/api/v1/workloads/quote/"
ARGV = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-m", "A100", "-g", "8", "-M", "2h")


@pytest.fixture
def frozen(monkeypatch: Any) -> Any:
    """One "now" for the API, the page and the CLI: a line with no start reads "none before" the
    search's end, one window from now, the same second on every surface."""
    at = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: at)
    return at


def _api(client: Any) -> list[dict[str, Any]]:
    response = client.post(URL, {**_body(), "min_runtime": "2h"}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["quotes"]


def _body() -> dict[str, Any]:
    return {"budget": "nlp/olmo", "cluster": "default", "gpu_model": "A100", "gpu_count": 8}


def _page(page: Any) -> list[list[str]]:
    page.goto("/submit/")
    page.fill("#id_command", "python train.py")
    page.fill("#id_gpu_count", "8")
    page.fill("#id_min_runtime", "2h")
    page.select_option("#id_gpu_model", "A100")
    page.get_by_role("button", name="Quote first").click()
    page.wait_for_selector("#quote-table")
    rows = page.locator("#quote-table tbody tr")
    return [[c.strip() for c in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())]


def _cli(monkeypatch: Any, user: Any, lines: int) -> list[list[str]]:
    """The table's rows below its header, cut at two spaces or more (a cell has single spaces)."""
    out = run_cli(monkeypatch, user, *ARGV)
    return [re.split(r"\s{2,}", row) for row in out.splitlines()[2 : 2 + lines]]


def _same_on_every_surface(api: list[dict[str, Any]], page: list[list[str]], cli: list[list[str]]) -> list[str]:
    """Each line's start, charge and ratio: the API's, which the page and the CLI print."""
    starts = [q["start_text"] for q in api]
    assert [row[1] for row in page] == starts
    assert [row[1] for row in cli] == starts
    charges = [gpu_time_text(q["charge_gpu_hours"] * 3600) for q in api]
    assert [row[2] for row in page] == charges == [row[2] for row in cli]
    ratios = [f"{q['ratio_after_text']}×" for q in api]
    assert [row[3] for row in page] == ratios == [row[3] for row in cli]
    return starts


def test_every_surface_prints_the_apis_start_words(
    new_page, researcher, researcher_client, outsider, org_tree, cluster, submit_kwargs, frozen, monkeypatch
):
    from scheduler.tick import run_tick

    # vision/sam holds every A100 for an hour, protected: the allocated lines start when that ends,
    # the unallocated one (M = 0) preempts nothing and nothing ends on its own: no start in the window
    for _ in range(2):
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8, min_runtime_s=3600))
    run_tick(cluster.pk)
    Attempt.objects.update(started_at=frozen, protected_until=frozen + timedelta(hours=1))
    api = _api(researcher_client)
    page = new_page()
    log_in(page, "researcher")

    starts = _same_on_every_surface(api, _page(page), _cli(monkeypatch, researcher, len(api)))

    week = frozen + timedelta(seconds=7 * 86400)
    from fairway_cli.numbers import instant_text

    assert [q["min_runtime_s"] for q in api] == [0, 1800, 7200, 28800, 86400]
    assert starts[0] == f"none before {instant_text(week)}"  # unallocated: preempts nothing
    # the short lines once sam's protection and its grace end; the long ones later (their ratio)
    grace = timedelta(seconds=settings.FAIRWAY["GRACE_PERIOD_S"])
    assert starts[1:3] == [instant_text(frozen + timedelta(hours=1) + grace)] * 2
    assert not any(s == "now" or s.startswith("none") for s in starts[1:])

    # olmo at a cap of 0 GPU-hours that holds its allocated work: the unallocated line starts now,
    # the allocated ones never, and say why (they read "none before <a week on>")
    from budgets.models import Budget

    Attempt.objects.update(ended_at=frozen, end_reason="canceled")
    from scheduler.models import Workload

    Workload.objects.update(state="canceled")
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=0, on_cap="hold")
    api = _api(researcher_client)
    starts = _same_on_every_surface(api, _page(page), _cli(monkeypatch, researcher, len(api)))
    assert starts == ["now"] + ["none: budget nlp/olmo is capped at 0 GPU-h"] * 4

    # nlp on hold: no line starts, each says the held budget
    from budgets.services import do_set_hold

    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=None)
    do_set_hold(org_tree["nlp"], True)
    api = _api(researcher_client)
    starts = _same_on_every_surface(api, _page(page), _cli(monkeypatch, researcher, len(api)))
    assert starts == ["none: budget nlp is on hold"] * 5


def _olmo_used_8_gpu_hours(researcher: Any, submit_kwargs: Any, frozen: Any, leaves_in: timedelta) -> None:
    """nlp/olmo ran 8 A100s for an hour, ended; that usage starts leaving a one-day period in ``leaves_in``."""
    from scheduler.models import Workload
    from scheduler.tick import run_tick

    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, min_runtime_s=3600))
    run_tick(workload.cluster_id)
    start = frozen - timedelta(days=1) + leaves_in
    attempt = Attempt.objects.get(workload=workload)
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=start, ended_at=start + timedelta(hours=1), end_reason=Attempt.EndReason.SUCCEEDED
    )
    attempt.gpu_links.update(open=False)
    Workload.objects.filter(pk=workload.pk).update(
        state=Workload.State.SUCCEEDED, finished_at=start + timedelta(hours=1)
    )


def test_a_line_that_starts_at_a_downgrade_cap_says_unfunded_and_charges_nothing(
    new_page, researcher, researcher_client, outsider, org_tree, cluster, submit_kwargs, frozen, monkeypatch
):
    """unfunded46: at a cap that downgrades (on_cap downgrade) the allocated lines read "now" with a
    charge of 8 × M and the ratio after admission, while a note said the work would run unfunded.
    A line whose work starts before the cap lifts starts unfunded: it says so, charges 0 and leaves
    the budget's ratio as it is; one that starts after the cap lifts is funded as any other."""
    from budgets.models import Budget
    from fairway_cli.numbers import instant_text
    from scheduler.tick import run_tick

    # nlp/olmo at its cap (8 GPU-hours a day) for the next 30 minutes; 16 A100s idle
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=8, cap_period_days=1, on_cap="downgrade")
    _olmo_used_8_gpu_hours(researcher, submit_kwargs, frozen, leaves_in=timedelta(minutes=30))
    api = _api(researcher_client)
    page = new_page()
    log_in(page, "researcher")

    starts = _same_on_every_surface(api, _page(page), _cli(monkeypatch, researcher, len(api)))

    # every allocated line starts now, before the cap lifts: unfunded, nothing charged, the ratio unchanged
    assert starts == ["now"] + ["now (unfunded)"] * 4
    assert [q["unfunded"] for q in api] == [False] + [True] * 4
    assert [q["charge_gpu_hours"] for q in api] == [0.0] * 5
    assert {q["ratio_after"] for q in api} == {api[0]["ratio_after"]}  # M = 0 adds no commitment
    # as the tick starts it, submitted: unallocated, unfunded (then canceled, to free the GPUs)
    from scheduler.models import Workload

    submitted = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, min_runtime_s=7200))
    run_tick(cluster.pk)
    attempt = Attempt.objects.get(workload=submitted)
    assert (attempt.allocated, attempt.unfunded) == (False, True)
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=frozen, end_reason=Attempt.EndReason.CANCELED)
    attempt.gpu_links.update(open=False)
    Workload.objects.filter(pk=submitted.pk).update(state=Workload.State.CANCELED)

    # vision/sam holds every A100 for an hour, protected: the allocated lines start when that ends,
    # after the cap has lifted (30 minutes from now): funded, charged 8 × M, their commitment in the ratio
    for _ in range(2):
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8, min_runtime_s=3600))
    run_tick(cluster.pk)
    Attempt.objects.filter(workload__budget=org_tree["vision/sam"]).update(
        started_at=frozen, protected_until=frozen + timedelta(hours=1)
    )
    api = _api(researcher_client)
    starts = _same_on_every_surface(api, _page(page), _cli(monkeypatch, researcher, len(api)))
    grace = timedelta(seconds=settings.FAIRWAY["GRACE_PERIOD_S"])
    assert starts[1] == instant_text(frozen + timedelta(hours=1) + grace)
    assert not any(q["unfunded"] for q in api)
    assert [q["charge_gpu_hours"] for q in api] == [8 * q["min_runtime_s"] / 3600 for q in api]
    assert api[1]["ratio_after"] < api[2]["ratio_after"] < api[3]["ratio_after"]
