"""words63: one wording (and one number) per thing a person sees, whatever the screen.

- A cluster's occupancy read "8 of 8 GPUs occupied" (dashboard), "8 GPUs · 7 occupied" (clusters
  page) and "7 of 8 … (88%)" (metrics page): one sentence now, the API's ``occupancy_text``.
- A budget's rank read "3rd of 3" on the pages and "3/3" in ``fairway budgets`` and ``fairway share``.
- The submit page's budgets and ``me/``'s ``submit_budgets`` offered a budget whose archived
  sub-budgets still had unfinished work, which a submission then refused ``not_a_leaf`` (brk63).

The page tests drive a real browser (tests/browser.py); skipped without Chromium/Playwright."""

from __future__ import annotations

from accounts.services import submit_budget_paths
from fairway_cli.words import occupancy_words, rank_words
from scheduler.services import do_submit_workload
from tests.api.test_idle_api import run_on
from tests.browser import log_in
from tests.cli.inprocess import run_cli


def test_occupancy_and_rank_words():
    assert occupancy_words(7, 8) == "7 of 8 GPUs occupied (88%)"
    assert occupancy_words(0, 0) == "0 of 0 GPUs occupied (0%)"
    assert occupancy_words(1, 1) == "1 of 1 GPU occupied (100%)"
    assert rank_words(3, 3) == "3rd of 3"
    assert rank_words(11, 12) == "11th of 12"
    assert rank_words(None, 3) == ""


def test_every_page_and_the_api_word_occupancy_alike(new_page, researcher, submit_kwargs, api_client_for):
    work = do_submit_workload(researcher, **submit_kwargs(name="worker", gpu_count=2))
    run_on(work, "a100-1", 60.0)
    sentence = "2 of 20 GPUs occupied (10%)"
    api = api_client_for(researcher).get("/api/v1/metrics/").json()
    assert [o["occupancy_text"] for o in api] == [sentence]

    page = new_page()
    log_in(page, "researcher")
    seen = {}
    for url in ("/", "/clusters/", "/metrics/"):
        page.goto(url)
        seen[url] = page.inner_text("body")
    for url, text in seen.items():
        assert sentence in text, (url, text)
        assert "20 GPUs · 2 occupied" not in text, url


def test_a_budgets_rank_reads_alike_on_the_pages_and_in_the_cli(new_page, researcher, cluster, monkeypatch):
    budgets = run_cli(monkeypatch, researcher, "budgets")
    share = run_cli(monkeypatch, researcher, "share")
    for out in (budgets, share):
        assert "1st of 2" in out and "2nd of 2" in out, out
        assert "1/2" not in out and "2/2" not in out, out

    page = new_page()
    log_in(page, "researcher")
    page.goto("/budgets/")
    text = page.inner_text("body")
    assert "1st of 2" in text and "2nd of 2" in text, text


def test_the_submit_list_leaves_out_a_parent_of_archived_work(
    new_page, researcher, manager, org_tree, submit_kwargs, api_client_for, cluster
):
    from budgets.services import do_archive_budget
    from scheduler.services import do_cancel_workload

    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    do_archive_budget(org_tree["nlp/olmo"])
    do_archive_budget(org_tree["nlp/tulu"])

    assert "nlp" not in submit_budget_paths(manager)
    me = api_client_for(manager).get("/api/v1/me/").json()
    assert "nlp" not in me["submit_budgets"], me
    page = new_page()
    log_in(page, "manager")
    page.goto("/submit/")
    options = page.locator("#id_budget option").all_inner_texts()
    assert "nlp" not in [o.strip() for o in options], options

    do_cancel_workload(researcher, waiting)
    assert "nlp" in submit_budget_paths(manager)  # its own work once theirs ended, as submission says


def test_a_pending_workloads_why_and_start_read_alike_in_ls_and_on_the_pages(
    new_page, researcher, submit_kwargs, cluster, monkeypatch
):
    """The lists wrote "other budgets go first · by 14:05:09 UTC", ``fairway ls`` "…; by …"."""
    from datetime import timedelta

    from django.utils import timezone

    from fairway_cli.numbers import instant_text
    from scheduler.models import Workload

    waiting = do_submit_workload(researcher, **submit_kwargs(name="later", gpu_count=8))
    start = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    Workload.objects.filter(pk=waiting.pk).update(pending_reason="fair_share", estimated_start=start)
    line = f"other budgets go first · by {instant_text(start)}"
    assert line in run_cli(monkeypatch, researcher, "ls")

    page = new_page()
    log_in(page, "researcher")
    for url in ("/", "/workloads/"):
        page.goto(url)
        assert line in page.inner_text("body"), url


def test_a_clusters_standing_heading_reads_alike_on_the_budgets_page_and_in_the_cli(
    new_page, researcher, cluster, monkeypatch
):
    """The page wrote "20 GPUs × 7d = 3,360 GPU-hours per window", the CLI "20 GPUs, window 7d"."""
    heading = "default: 20 GPUs × 7d = 3,360 GPU-h per window"
    assert heading in run_cli(monkeypatch, researcher, "budgets")
    assert heading in run_cli(monkeypatch, researcher, "share")
    page = new_page()
    log_in(page, "researcher")
    page.goto("/budgets/")
    assert heading in " ".join(page.inner_text("body").split()), page.inner_text("h2")
