"""num45 in a real browser (Playwright driving Debian's Chromium, as tests/web/test_browser_estimate.py
does): a ``fair_share`` wait's page lists the work in the way with the ratios rule 2 compared and no
protection end, and the estimate beside it is the only instant the page names for the start.
Skipped when ``/usr/bin/chromium`` or the ``playwright`` package is missing."""

from __future__ import annotations

import re
import shutil

import pytest
from django.utils import timezone

from scheduler.estimates import store_estimates
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.api.fair_share_setup import vision_runs_while_olmo_has_used_more
from tests.conftest import PASSWORD
from tests.e2e.test_browser import CHROMIUM, CHROMIUM_ARGS

playwright_sync = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian's chromium is not installed")


def test_forbidden_work_in_the_way_reads_as_ratios_not_a_start(
    live_server, researcher, outsider, submit_kwargs, org_tree, cluster, monkeypatch
):
    rivals = vision_runs_while_olmo_has_used_more(outsider, cluster, org_tree, submit_kwargs, started=True)
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
    run_tick(cluster.pk)
    store_estimates(cluster.pk, timezone.now())
    waiting.refresh_from_db()
    assert waiting.pending_reason == "fair_share"

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(base_url=live_server.url).new_page()
            page.set_default_timeout(20_000)
            page.goto("/login/")
            page.fill("#id_username", "researcher")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{live_server.url}/")
            page.goto(f"/workloads/{waiting.pk}/")
            why = page.inner_text("#why-pending")
            in_the_way = page.inner_text("#blocking")
            ratios = page.locator("table.why-numbers td.num").all_inner_texts()
        finally:
            browser.close()

    named = [int(x) for x in re.findall(r"#(\d+) ", in_the_way)]
    assert named and set(named) <= {r.pk for r in rivals}
    entries = re.findall(r"vision is further below its share \(ratio (\S+)× < (\S+)× for nlp\)", in_the_way)
    assert len(entries) == len(named), in_the_way
    # the ratios are the numbers table's (nlp's row first: this workload's side, then vision's)
    nlp_ratio, vision_ratio = ratios[3], ratios[7]
    assert all(e == (vision_ratio.rstrip("×"), nlp_ratio.rstrip("×")) for e in entries), (entries, ratios)
    assert "protected until" not in why and "it can take those GPUs" not in why
    assert "may not be preempted for this workload" in in_the_way
    # the one start instant on the page is the estimate's
    assert len(re.findall(r"\d{2}:\d{2}:\d{2} UTC", why)) == len(
        re.findall(r"\d{2}:\d{2}:\d{2} UTC", why.split("Estimated start")[1])
    )
