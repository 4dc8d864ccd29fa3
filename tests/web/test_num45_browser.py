"""num45 in a real browser (Playwright driving Debian's Chromium, as tests/web/test_browser_estimate.py
does): a ``fair_share`` wait's page lists the work in the way with the ratios rule 2 compared and no
protection end, and the estimate beside it is the only instant the page names for the start.
Skipped when ``/usr/bin/chromium`` or the ``playwright`` package is missing."""

from __future__ import annotations

import re

from django.utils import timezone

from scheduler.estimates import store_estimates
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.api.fair_share_setup import vision_runs_while_olmo_has_used_more
from tests.browser import log_in


def test_forbidden_work_in_the_way_reads_as_ratios_not_a_start(
    new_page, researcher, outsider, submit_kwargs, org_tree, cluster
):
    rivals = vision_runs_while_olmo_has_used_more(outsider, cluster, org_tree, submit_kwargs, started=True)
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
    run_tick(cluster.pk)
    store_estimates(cluster.pk, timezone.now())
    waiting.refresh_from_db()
    assert waiting.pending_reason == "fair_share"

    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{waiting.pk}/")
    why = page.inner_text("#why-pending")
    in_the_way = page.inner_text("#blocking")
    ratios = page.locator("table.why-numbers td.num").all_inner_texts()
    # left56: the waiting side's numbers count this workload's gpus × M: labelled so
    sides = page.locator("table.why-numbers td:not(.num)").all_inner_texts()
    assert sides == ["nlp, after this one", "vision"], sides

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
