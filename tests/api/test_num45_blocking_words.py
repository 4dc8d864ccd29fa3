"""num45: one waiting workload's page named its blocking job "protected until 17:12" while that
job could not be preempted for it even after 17:12 (rule 2 of DESIGN.md §3.4 forbids it: its
budget is further below its share), and the estimate said 22:42. A reader concluded "it starts at
17:12". The work in the way now says why it is in the way (§3.8): under ``fair_share`` the
forbidden work with both sides' ratios and no protection end; under ``protected_work`` the
victims rule 2 allows with their protection ends, the earliest instant room could be made, never
read as the start when the estimate is later. The API's words and fields, the page and
``fairway show`` read the one function that words it (``reports.blocking_words``)."""

from __future__ import annotations

import html as html_text
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler import reports
from scheduler.estimates import store_estimates
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.api.fair_share_setup import olmo_waits_for_visions_protection, vision_runs_while_olmo_has_used_more
from tests.cli.inprocess import run_cli


@pytest.fixture
def forbidden(researcher, outsider, cluster, org_tree, submit_kwargs, django_capture_on_commit_callbacks):
    """vision/sam runs two protected 8-GPU workloads on the A100s; nlp/olmo, with much more usage
    this week, waits for 8 A100s: ``fair_share``. Estimates stored, as the page shows them."""
    with django_capture_on_commit_callbacks(execute=True):
        rivals = vision_runs_while_olmo_has_used_more(outsider, cluster, org_tree, submit_kwargs, started=True)
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
        run_tick(cluster.pk)
    store_estimates(cluster.pk, timezone.now())
    waiting.refresh_from_db()
    assert waiting.pending_reason == "fair_share"
    return waiting, rivals


def test_fair_share_blocking_work_names_the_ratios_never_a_protection_end(forbidden, researcher, monkeypatch):
    waiting, rivals = forbidden
    browser = Client()
    browser.force_login(researcher)
    body = browser.get(f"/api/v1/workloads/{waiting.pk}/").json()
    why = body["pending_explanation"]
    mine, theirs = why["numbers"]["budget"], why["numbers"]["other_budget"]
    assert why["blocking"] and {b["workload"] for b in why["blocking"]} <= {r.pk for r in rivals}
    words = f"vision is further below its share (ratio {theirs['ratio_text']}× < {mine['ratio_text']}× for nlp)"
    for b in why["blocking"]:
        # no instant that reads as a start: rule 2 forbids this work whenever its protection ends
        assert b["protected_until"] is None, b
        assert b["text"].startswith(words), b
        assert "protected" not in b["text"] and "protection" not in b["text"]
        assert b["further_below"] == {
            "side": "vision",
            "ratio": theirs["ratio"],
            "ratio_text": theirs["ratio_text"],
            "waiting_side": "nlp",
            "waiting_ratio": mine["ratio"],
            "waiting_ratio_text": mine["ratio_text"],
        }
    in_the_way = [line for line in body["why_pending"] if line.startswith("In the way:")]
    assert len(in_the_way) == 1 and words in in_the_way[0] and "protected until" not in in_the_way[0]

    html = html_text.unescape(browser.get(f"/workloads/{waiting.pk}/").content.decode())
    blocking = html[html.index('id="blocking"') : html.index('id="estimated-start"')]
    assert blocking.count(words) == len(why["blocking"]) and "protected until" not in blocking

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    lines = [line for line in out.splitlines() if "in the way: #" in line]  # the page's and the API's words (try63)
    assert len(lines) == len(why["blocking"]) and all(words in line for line in lines)
    assert "protected until" not in out


def test_protected_work_end_is_the_earliest_instant_not_the_start_when_the_estimate_is_later(
    researcher, outsider, cluster, org_tree, submit_kwargs, monkeypatch
):
    """The estimate (the policy run forward) may find room only hours after the victims'
    protection ends (by then the standing has moved). "ends at 17:12; it can take those GPUs then"
    beside "by 22:42 at the latest" read as two starts: the sentence names 17:12 as the earliest
    instant and the estimate's instant as the bound."""
    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "protected_work"
    end = waiting.pending_detail["protected_until"]
    later = datetime.fromtimestamp(end, tz=UTC) + timedelta(hours=5, minutes=30)
    detail = {k: v for k, v in waiting.pending_detail.items() if k != "reserved_start"}  # no reservation for it
    Workload.objects.filter(pk=waiting.pk).update(pending_detail=detail, estimated_start=later)
    waiting.refresh_from_db()

    why = reports.explain_pending(waiting)
    text = " ".join(why.lines())
    assert "it can take those GPUs then" not in text
    assert f"ends at {reports._when(end)}" in why.sentence
    assert "the earliest" in why.sentence
    assert f"by {reports._when(int(later.timestamp()))} at the latest" in why.sentence
    assert why.blocking and all(b["text"] == b["protection_text"] for b in why.blocking)
    assert all(b["text"].startswith("protected until ") for b in why.blocking)

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert "it can take those GPUs then" not in out
    assert f"by {reports._when(int(later.timestamp()))} at the latest" in out
