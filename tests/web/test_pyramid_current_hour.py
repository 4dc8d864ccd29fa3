"""The pyramid and the metrics page include the current, partial hour and say what they cover
(issue 13, point 5: the metrics page showed 0 % with 32 busy GPUs, only complete hours counted);
the budgets page plots usage against entitlement and shows owed vs delivered GPU-hours."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from scheduler import lifecycle
from scheduler.models import Attempt, ClusterHourlyMetrics, Host
from scheduler.pyramid import hour_of
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def _busy(researcher, cluster, submit_kwargs, monkeypatch):
    at = hour_of(timezone.now()) + timedelta(minutes=30)
    Host.objects.update(created_at=at - timedelta(hours=2))  # registered for the whole hour
    monkeypatch.setattr(timezone, "now", lambda: at - timedelta(minutes=20))
    for _ in range(2):
        do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    for a in Attempt.objects.select_related("host"):
        lifecycle.attempt_started(a.host, a.pk)
    monkeypatch.setattr(timezone, "now", lambda: at)
    return at


def test_api_pyramid_counts_the_current_hour_and_says_so(
    researcher, cluster, submit_kwargs, researcher_client, monkeypatch
):
    at = _busy(researcher, cluster, submit_kwargs, monkeypatch)
    assert not ClusterHourlyMetrics.objects.exists()  # nothing rolled up yet
    [c] = researcher_client.get("/api/v1/metrics/pyramid/").json()
    [hour] = c["hours"]
    assert hour["partial"] is True and hour["hour"] == hour_of(at).isoformat().replace("+00:00", "Z")
    # 16 of 20 GPUs busy for the last 20 of the 30 minutes of this hour
    assert c["total"]["occupancy"] == round(16 * 20 / (20 * 30), 6)
    assert c["range"]["complete_hours"] == 0
    assert c["range"]["partial_hour_until"] == at.isoformat().replace("+00:00", "Z")
    olmo = next(b for b in c["budgets"] if b["path"] == "nlp/olmo")
    assert olmo["delivered_gpu_hours"] == round(16 * 20 / 60, 3)


def test_metrics_page_shows_the_partial_hour_and_budgets_page_the_plot(researcher, cluster, submit_kwargs, monkeypatch):
    _busy(researcher, cluster, submit_kwargs, monkeypatch)
    browser = Client()
    browser.force_login(researcher)
    html = browser.get("/metrics/").content.decode()
    assert "0 complete hours and the current hour up to" in html
    assert "No hourly roll-up yet" not in html and "<polyline" in html
    assert '<table class="impact-budgets">' in html
    budgets = browser.get("/budgets/").content.decode()
    assert budgets.count('class="usage-plot"') >= 6 and "owed<br>GPU-h" in budgets


def test_metrics_page_writes_the_range_as_fairway_metrics_does(researcher, cluster, submit_kwargs, monkeypatch):
    """tryout35: the page wrote "Covers 2026-12-06T03:00Z to 2026-12-06T04:00Z: … up to 04:00 UTC"
    (ISO cut to the minute, the seconds dropped) where ``fairway metrics`` and every other screen
    wrote "03:00:00 UTC to 04:00:17 UTC"; the page now writes the instants as they do."""
    from fairway_cli.numbers import instant_text

    at = _busy(researcher, cluster, submit_kwargs, monkeypatch) + timedelta(seconds=17)
    monkeypatch.setattr(timezone, "now", lambda: at)
    browser = Client()
    browser.force_login(researcher)
    html = browser.get("/metrics/").content.decode()
    start, now = instant_text(hour_of(at)), instant_text(at)
    assert f"Covers {start} to {now}: 0 complete hours and the current hour up to {now}." in html, html


def test_the_impact_table_keeps_an_archived_budget_that_delivered_in_the_window(
    researcher, cluster, submit_kwargs, researcher_client, monkeypatch
):
    """try41: archiving nlp/olmo (its work still running) took it out of the pyramid's per-budget
    table while nlp's row still counted its GPU-hours: nlp's children no longer added up to nlp,
    and the budgets page listed it (marked archived). The table now keeps it, marked the same."""
    _busy(researcher, cluster, submit_kwargs, monkeypatch)
    from budgets.models import Budget

    olmo = Budget.objects.get(name="olmo")
    Budget.objects.filter(pk=olmo.pk).update(archived_at=timezone.now())
    [c] = researcher_client.get("/api/v1/metrics/pyramid/").json()
    rows = {b["path"]: b for b in c["budgets"]}
    assert rows["nlp/olmo"]["archived"] is True and rows["nlp"]["archived"] is False
    assert rows["nlp/olmo"]["delivered_gpu_hours"] == rows["nlp"]["delivered_gpu_hours"] > 0
    browser = Client()
    browser.force_login(researcher)
    html = browser.get("/metrics/").content.decode()
    assert '<td>nlp/olmo <span class="badge">archived</span></td>' in html
