"""Why pending in numbers (issue 13, point 2): the tick stores only what it decided (no drifting
ratios); the API, the page and the CLI derive the GPU-hours and ratios from the one standing and
name the blocking work with its budget and protection end."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler import lifecycle, reports
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.api.fair_share_setup import vision_runs_while_olmo_has_used_more
from tests.cli.inprocess import run_cli


@pytest.fixture
def blocked(researcher, outsider, cluster, org_tree, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """vision/sam runs two protected 8-GPU workloads on the A100s; nlp/olmo, with much more usage
    this week, waits for 8 A100s: ``fair_share`` (rule 2 forbids taking vision's work)."""
    with django_capture_on_commit_callbacks(execute=True):
        rivals = vision_runs_while_olmo_has_used_more(outsider, cluster, org_tree, submit_kwargs, started=True)
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
        run_tick(cluster.pk)
    waiting.refresh_from_db()
    return waiting, rivals


def test_stored_reason_names_the_blocking_work_and_does_not_drift(blocked, cluster, monkeypatch):
    waiting, rivals = blocked
    assert waiting.pending_reason == "fair_share"
    detail = dict(waiting.pending_detail)
    assert "ratio" not in detail and "other_ratio" not in detail  # numbers that move every tick
    assert detail["other_budget"] == "vision" and detail["budget"] == "nlp"
    assert set(detail["blocking"]) <= {str(r.pk) for r in rivals}
    assert detail["blocking"]
    # Ten minutes later the usage and ratios have moved, the decision has not: nothing to write.
    later = timezone.now() + timedelta(minutes=10)
    monkeypatch.setattr(timezone, "now", lambda: later)
    run_tick(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.pending_detail == detail


def test_api_page_and_cli_explain_with_numbers_and_blocking_work(blocked, researcher, researcher_client, monkeypatch):
    waiting, rivals = blocked
    body = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()
    why = body["pending_explanation"]
    assert why["reason"] == "fair_share"
    mine, theirs = why["numbers"]["budget"], why["numbers"]["other_budget"]
    assert mine["path"] == "nlp" and theirs["path"] == "vision"
    assert mine["used_gpu_hours"] == 480.0  # 20 GPUs × 24 h of history
    assert mine["committed_gpu_hours"] == 8.0  # this workload's 8 GPUs × 1 h
    assert theirs["committed_gpu_hours"] > 0 and theirs["entitled_gpu_hours"] > 0
    assert mine["ratio"] > theirs["ratio"] and mine["ratio_text"] != theirs["ratio_text"]
    assert why["numbers"]["first"] == "other_budget"
    blocking = {b["workload"]: b for b in why["blocking"]}
    assert set(blocking) <= {r.pk for r in rivals} and blocking
    # rule 2 forbids this work whatever its protection: no protection end, which read as a start (num45)
    assert all(b["budget"] == "vision/sam" and b["forbidden"] and not b["protected_until"] for b in blocking.values())
    assert f"{mine['ratio_text']}×" in why["sentence"] and f"{theirs['ratio_text']}×" in why["sentence"]
    assert "vision goes first" in why["sentence"]
    assert not any("that work" in line for line in body["why_pending"])  # the work in the way is named

    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    assert 'class="why-numbers' in html and f"{mine['ratio_text']}×" in html
    assert f"#{next(iter(blocking))}" in html and "vision/sam" in html

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert "vision goes first" in out
    assert f"ratio {mine['ratio_text']}×" in out and f"ratio {theirs['ratio_text']}×" in out
    assert f"in the way: #{next(iter(blocking))}" in out  # as the page and the API say it (try63)


def test_not_pending_explains_nothing(blocked, researcher_client):
    _waiting, rivals = blocked
    body = researcher_client.get(f"/api/v1/workloads/{rivals[0].pk}/").json()
    assert body["pending_explanation"] == {"reason": "", "sentence": "", "sentences": [], "numbers": {}, "blocking": []}
    assert Workload.objects.get(pk=rivals[0].pk).state == Workload.State.RUNNING


@pytest.fixture
def blocked_by_starting(researcher, outsider, cluster, org_tree, submit_kwargs, django_capture_on_commit_callbacks):
    """vision/sam's two 8-GPU attempts on the A100s are still starting (no agent confirmed them):
    protected, with no ``protected_until`` stored yet; nlp/olmo, further below its share, waits for
    them (``protected_work``: rule 2 allows them once unprotected)."""
    with django_capture_on_commit_callbacks(execute=True):
        rivals = [
            do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8)) for _ in range(2)
        ]
        run_tick(cluster.pk)
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
        run_tick(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "protected_work"
    assert not Attempt.objects.filter(started_at__isnull=False).exists()
    return waiting, rivals


def test_blocking_work_still_starting_carries_its_protection_end(
    blocked_by_starting, researcher, researcher_client, monkeypatch
):
    """Issue 13 (fix13): an attempt still starting is protected until ``M`` after the agent
    confirms it, so at least now + M: every blocking workload named carries that end, in the
    structured ``blocking`` and in the words of the API, the page and the CLI."""
    waiting, rivals = blocked_by_starting
    before = timezone.now()
    body = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()
    blocking = body["pending_explanation"]["blocking"]
    assert blocking and {b["workload"] for b in blocking} <= {r.pk for r in rivals}
    for b in blocking:
        assert b["starting"] is True
        until = datetime.fromisoformat(b["protected_until"])
        assert until >= before + timedelta(hours=1) - timedelta(seconds=1)
    assert any("starting, protected until at least" in line for line in body["why_pending"])

    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    assert html.count("starting, protected until at least") == len(blocking)

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert out.count("starting, protected until at least") == len(blocking)


def test_fair_share_page_and_cli_name_the_blocking_work_once(blocked, researcher, monkeypatch):
    """Issue 13 (fix13): the sentences do not list the blocking work; the page lists it once,
    linked, the CLI once as ``blocking:`` lines, the API's ``why_pending`` once as "In the way"."""
    waiting, _rivals = blocked
    assert waiting.pending_reason == "fair_share"
    ids = [int(x) for x in waiting.pending_detail["blocking"]]
    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    why = html[html.index('id="why-pending"') : html.index('id="estimated-start"')]
    for wid in ids:
        assert why.count(f"#{wid} ") == 1, why
        assert f'href="/workloads/{wid}/"' in why
    assert why.count("In the way:") == 1
    assert "Room could be made on" in why

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    for wid in ids:
        assert out.count(f"#{wid} ") == 1, out
    body = page.get(f"/api/v1/workloads/{waiting.pk}/").json()
    text = "\n".join(body["why_pending"])
    for wid in ids:
        assert text.count(f"#{wid} ") == 1, text
    sentences = body["pending_explanation"]["sentences"]
    assert sentences == body["why_pending"][: len(sentences)]
    assert not any(f"#{wid}" in s for s in sentences for wid in ids)


def test_protected_work_names_one_end_in_the_sentence_and_the_blocking_line(
    researcher,
    outsider,
    cluster,
    org_tree,
    submit_kwargs,
    researcher_client,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    """tryout22: an attempt confirmed at 10:49:55.74 with M = 30 min is protected until
    11:19:55.74. The policy works in whole seconds rounded up (``snapshot.epoch_up``), so the host's
    sentence said "ends at 11:19:56" while the blocking line under it said "protected until
    11:19:55": one end, two times. Both now name the policy's second, on the API, page and CLI."""
    with django_capture_on_commit_callbacks(execute=True):
        rivals = [
            do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8)) for _ in range(2)
        ]
        run_tick(cluster.pk)
        for attempt in Attempt.objects.filter(workload__cluster=cluster).select_related("host"):
            lifecycle.attempt_started(attempt.host, attempt.pk)
        started = timezone.now().replace(microsecond=744733) - timedelta(minutes=5)
        Attempt.objects.filter(workload__in=rivals).update(
            started_at=started, protected_until=started + timedelta(hours=1)
        )
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, name="waits"))
        run_tick(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "protected_work"
    end = started + timedelta(hours=1)
    words = reports._when(math.ceil(end.timestamp()))  # 11:19:56 UTC for 11:19:55.74
    too_early = reports._when(math.floor(end.timestamp()))
    body = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()
    why = body["pending_explanation"]
    assert words in why["sentence"]
    assert why["blocking"] and all(b["protection_text"] == f"protected until {words}" for b in why["blocking"])
    assert not any(too_early in line for line in body["why_pending"])

    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    assert f"protected until {words}" in html and too_early not in html
    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert f"protected until {words}" in out and too_early not in out


def test_insufficient_gpus_names_the_hosts_that_take_no_new_work(
    researcher, cluster, hosts, submit_kwargs, researcher_client, monkeypatch, django_capture_on_commit_callbacks
):
    """tryout24: two failed starts cordoned every host (FAIRWAY_HOST_START_FAILURES); the waiting
    work then read "Not enough H100 GPUs are free, and no work it may preempt would make room"
    with every GPU idle. The explanation now names the hosts that take no new work, on every
    surface (one sentence list: the API, the page and the CLI print it)."""
    from scheduler.models import Host

    Host.objects.filter(pk=hosts["h100-1"].pk).update(state=Host.State.CORDONED)
    with django_capture_on_commit_callbacks(execute=True):
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_model="H100", gpu_count=4))
        run_tick(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "insufficient_gpus"
    expected = "4 H100 GPUs are on hosts that take no new work (cordoned: h100-1)."
    assert expected in researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()["why_pending"]
    assert expected in run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    # The A100 hosts are all active: nothing more is said of them.
    other = do_submit_workload(researcher, **submit_kwargs(gpu_model="A100", gpu_count=8, name="a100"))
    Workload.objects.filter(pk=other.pk).update(pending_reason="insufficient_gpus")
    other.refresh_from_db()
    assert not any("take no new work" in line for line in reports.explain_pending(other).sentences)


def test_the_numbers_have_the_sentences_digits_on_every_surface(blocked, researcher, researcher_client, monkeypatch):
    """tryout24: one screen printed nlp's usage as "0.074" (the sentence), "0.1" (the CLI's line
    under it) and "0.157 / 2016.0" (the page's table, raw floats): the API now gives each number's
    text, the sentence's (``gpu_hours_text``), and the page and the CLI print it."""
    waiting, _rivals = blocked
    why = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()["pending_explanation"]
    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    for key in ("budget", "other_budget"):
        side = why["numbers"][key]
        texts = [reports.gpu_hours_text(side[f"{k}_gpu_hours"]) for k in ("used", "committed", "entitled")]
        assert [side["used_text"], side["committed_text"], side["entitled_text"]] == texts
        assert f"{texts[1]} " in why["sentence"] and f"of {texts[2]}" in why["sentence"]
        assert "".join(f'<td class="num">{t}</td>' for t in texts) in html
        assert f"used {texts[0]} GPU-h, committed {texts[1]} GPU-h, entitled {texts[2]} GPU-h" in out


def test_a_removed_host_is_not_named_among_those_taking_no_new_work(researcher, cluster, hosts, submit_kwargs):
    """tryout35: after ``fairway hosts remove node3`` (drained, then removed: out of the cluster for
    good, its GPUs out of every count), a waiting workload still read "2 H100 GPUs are on hosts that
    take no new work (drained: node3)". A removed host is no longer the cluster's: not named."""
    from scheduler.models import Host
    from scheduler.services import do_remove_host

    Host.objects.filter(pk=hosts["a100-2"].pk).update(state=Host.State.DRAINED)
    do_remove_host(None, Host.objects.get(pk=hosts["a100-2"].pk))
    Host.objects.filter(pk=hosts["a100-1"].pk).update(state=Host.State.CORDONED)
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_model="A100", gpu_count=8))
    Workload.objects.filter(pk=waiting.pk).update(pending_reason="insufficient_gpus")
    waiting.refresh_from_db()

    sentences = reports.explain_pending(waiting).sentences
    assert "8 A100 GPUs are on hosts that take no new work (cordoned: a100-1)." in sentences, sentences
    assert not any("a100-2" in line for line in sentences), sentences
