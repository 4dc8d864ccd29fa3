"""lt61, leftovers of try61 and brk61: a scheduled drain's reason names when it was asked and when
it began; a pending reason in brackets nests readably; the web form and the admin name their own
webhook field; ``fairway metrics`` shows the page's per-budget table; a drain's time within the
current second is not stored at or before now."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.models import HostEvent
from tests.cli.inprocess import run_cli


def test_a_scheduled_drain_now_says_when_it_was_asked_and_when_it_began(admin, hosts, admin_client_api, monkeypatch):
    """A drain now scheduled at 03:53 for 04:23:44 read "drain now asked by admin at 04:23:49" on
    the host (the time the tick applied it): the CLI, the page and the API say who asked it, when,
    for when, and when it began, in one wording."""
    from scheduler.services import apply_due_drains, do_schedule_drain

    at = timezone.now().replace(microsecond=0) + timedelta(minutes=30)
    began = at + timedelta(seconds=5)
    do_schedule_drain(admin, hosts["a100-1"], at, "BIOS update", drain_now=True)
    asked = HostEvent.objects.get(kind="drain_scheduled").at
    monkeypatch.setattr(timezone, "now", lambda: began)
    assert apply_due_drains(hosts["a100-1"].cluster_id, began) == [hosts["a100-1"].pk]

    words = (
        f"drain now asked by admin at {instant_text(asked)} for {instant_text(at)}, "
        f"began {instant_text(began)}: BIOS update"
    )
    api = admin_client_api.get("/api/v1/hosts/a100-1/").json()["state_reason"]
    assert api["summary"] == words, api
    assert datetime.fromisoformat(api["scheduled"]["asked_at"].replace("Z", "+00:00")) == asked
    assert f"why:       {words}\n" in run_cli(monkeypatch, admin, "hosts", "a100-1")
    page = Client()
    page.force_login(admin)
    html = page.get("/clusters/").content.decode()
    assert re.findall(r'<div class="small muted state-reason">([^<]*)</div>', html) == [words]


def test_an_immediate_drain_says_when_it_was_asked(admin, hosts, admin_client_api):
    from scheduler.services import do_set_host_state

    do_set_host_state(admin, hosts["a100-1"], "draining", "fan")
    reason = admin_client_api.get("/api/v1/hosts/a100-1/").json()["state_reason"]
    assert reason["scheduled"] is None
    assert reason["summary"] == f"drain asked by admin at {instant_text(reason['at'])}: fan"


def test_a_pending_reason_in_brackets_nests_readably():
    """`fairway wait` printed "pending (GPUs reserved for maintenance (gpu1 drains …))"."""
    from fairway_cli.cli import _wait_line

    at = datetime(2026, 12, 8, 8, tzinfo=UTC).timestamp()
    w = {
        "id": 12,
        "name": "train",
        "state": "pending",
        "pending_reason": "reserved_for_other",
        "pending_drain": {"host": "gpu1", "at": at},
    }
    line = _wait_line(None, w)
    assert line == f"#12 train: pending (GPUs reserved for maintenance [gpu1 drains {instant_text(at)}])", line


def test_web_settings_and_admin_name_their_own_webhook_field(researcher, admin):
    """The settings page and the admin refused webhook kinds without a URL with "set webhook_url"
    (the API's field name): they name their form's field."""
    page = Client()
    page.force_login(researcher)
    html = page.post("/notifications/", {"webhook_kinds": ["failed"], "webhook_url": ""}).content.decode()
    errors = " ".join(re.findall(r'<ul class="errorlist"[^>]*>(.*?)</ul>', html, re.S))
    assert "set a webhook URL in the Webhook URL field" in errors and "webhook_url" not in errors, errors

    from scheduler.models import NotificationSettings

    site = Client()
    site.force_login(admin)
    pref = NotificationSettings.objects.create(user=researcher)
    html = site.post(
        f"/admin/scheduler/notificationsettings/{pref.pk}/change/",
        {"user": researcher.pk, "email_kinds": "[]", "webhook_kinds": '["failed"]', "webhook_url": ""},
    ).content.decode()
    assert "set a webhook URL in the Webhook url field" in html, html[:3000]
    assert "set webhook_url" not in html


def test_fairway_metrics_shows_the_pages_budget_table(researcher, cluster, submit_kwargs, monkeypatch):
    """`fairway metrics` lacked the metrics page's impact per budget (delivered against owed)."""
    import json

    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    for a in Attempt.objects.select_related("host"):
        lifecycle.attempt_started(a.host, a.pk)
    later = timezone.now() + timedelta(minutes=30)
    monkeypatch.setattr(timezone, "now", lambda: later)

    page = Client()
    page.force_login(researcher)
    html = page.get("/metrics/").content.decode()
    html = html[html.index('<table class="impact-budgets">') :]
    html = html[: html.index("</table>")]
    rows = re.findall(
        r"<tr(?: class=\"muted\")?><td>([^<]+)(?:<span[^>]*>archived</span>)?</td>"
        r"((?:<td class=\"num\">[^<]*</td>)+)</tr>",
        html,
    )
    shown = {path.strip(): re.findall(r'<td class="num">([^<]*)</td>', cells) for path, cells in rows}
    assert shown["nlp/olmo"][0] not in ("0", "–"), shown

    out = run_cli(monkeypatch, researcher, "metrics")
    assert "impact per budget, last " in out
    for path, cells in shown.items():
        line = next(line for line in out.splitlines() if line.split()[:1] == [path])
        assert line.split()[1 : 1 + len(cells)] == cells, (line, cells)
    data = json.loads(run_cli(monkeypatch, researcher, "metrics", "--json"))
    assert {b["path"] for b in data[0]["budgets"]} == set(shown)


@pytest.mark.parametrize("after_us", [100_000, 499_999])
def test_a_drain_time_within_this_second_is_refused_as_past_not_kept_before_now(after_us):
    """brk61: a drain's time is kept in whole seconds, floored (try59), so one asked for later in
    this second was kept at or before now, a drain scheduled in the past; it is refused as a past
    time is, naming the second kept."""
    from scheduler.services import HostError, drain_time

    now = datetime(2026, 12, 7, 4, 0, 0, 500_000, tzinfo=UTC)
    with pytest.raises(HostError) as refused:
        drain_time(now + timedelta(microseconds=after_us), now)
    assert refused.value.code == "invalid_at"
    assert refused.value.message == (
        "A drain is scheduled for a later time: Dec 7 2026 04:00:00 UTC is past (drain it now instead)."
    )
    assert drain_time(now + timedelta(microseconds=500_000), now) == now.replace(second=1, microsecond=0)
