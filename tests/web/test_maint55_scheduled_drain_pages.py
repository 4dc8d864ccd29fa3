"""maint55: the clusters page schedules a drain at a time (the Drain and Drain now buttons with
the optional time), shows it and cancels it; the hosts admin schedules and cancels one."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduler.models import Host, HostEvent
from tests.browser import log_in


def _messages(page: str) -> list[str]:
    listed = page.split('class="messagelist"', 1)[1].split("</ul>")[0]
    return [m.strip() for m in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)]


def test_an_admin_schedules_and_cancels_a_drain_on_the_clusters_page(new_page, admin, hosts):
    at = (timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/default/")
    row = page.locator("#host-a100-1")
    row.locator("input[name=at]").fill("yesterday")
    row.get_by_role("button", name="Drain", exact=True).click()
    page.wait_for_load_state()
    assert "is not" in page.locator(".messages, .messagelist, body").first.inner_text()
    assert Host.objects.get(name="a100-1").drain_at is None

    row = page.locator("#host-a100-1")
    row.locator("input[name=reason]").fill("PSU swap")
    row.locator("input[name=at]").fill(at.strftime("%Y-%m-%dT%H:%MZ"))
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Drain now").click()
    page.wait_for_selector("#host-a100-1 .scheduled-drain")
    host = Host.objects.get(name="a100-1")
    assert (host.state, host.drain_at, host.drain_at_now, host.drain_at_by) == ("active", at, True, admin)
    shown = page.locator("#host-a100-1 .scheduled-drain").inner_text()
    assert "drain now scheduled at" in shown and "by admin: PSU swap" in shown

    page.locator("#host-a100-1").get_by_role("button", name="Cancel scheduled drain").click()
    page.wait_for_selector("#host-a100-1 .scheduled-drain", state="detached")
    assert Host.objects.get(name="a100-1").drain_at is None
    assert HostEvent.objects.filter(host=host, kind="drain_unscheduled", actor=admin).exists()


def test_the_clusters_page_takes_a_drain_in_a_duration_as_the_cli_and_api(new_page, admin, hosts):
    """admin47: ``fairway hosts drain --in 2h`` and the API's ``in`` take a duration from now, the
    page's field only an ISO time ("'in 2h' is not"): it reads "in 2h" by the same rule."""
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/default/")
    row = page.locator("#host-a100-1")
    assert "in 2h" in (row.locator("input[name=at]").get_attribute("placeholder") or "")
    row.locator("input[name=at]").fill("in 2h")
    before = timezone.now()
    row.get_by_role("button", name="Drain", exact=True).click()
    page.wait_for_selector("#host-a100-1 .scheduled-drain")
    host = Host.objects.get(name="a100-1")
    assert host.drain_at is not None and not host.drain_at_now
    assert before + timedelta(hours=2) - timedelta(seconds=1) <= host.drain_at <= timezone.now() + timedelta(hours=2)


def test_the_cancel_action_is_refused_to_who_may_not_operate_hosts(researcher, admin, hosts):
    from scheduler.services import do_schedule_drain

    do_schedule_drain(admin, hosts["a100-1"], timezone.now() + timedelta(hours=1))
    client = Client()
    client.force_login(researcher)
    client.post("/hosts/a100-1/cancel-drain/")
    client.post("/hosts/a100-1/drain/", {"at": "2099-01-01T00:00Z"})
    assert Host.objects.get(name="a100-1").drain_at is not None
    assert HostEvent.objects.filter(kind__startswith="drain_").count() == 1


def test_the_hosts_admin_schedules_and_cancels_a_drain(admin, hosts):
    client = Client()
    client.force_login(admin)
    url = reverse("admin:scheduler_host_changelist")
    pk = hosts["a100-1"].pk
    asked = client.post(url, {"action": "schedule_drain", "_selected_action": [pk]})
    assert asked.status_code == 200 and 'name="at"' in asked.content.decode()  # asks for the time first
    bad = client.post(
        url,
        {"action": "schedule_drain", "_selected_action": [pk], "confirm": "yes", "at": "2020-01-01T00:00Z"},
        follow=True,
    )
    assert "is past" in _messages(bad.content.decode())[0]
    assert Host.objects.get(pk=pk).drain_at is None
    at = (timezone.now() + timedelta(hours=5)).replace(microsecond=0)
    done = client.post(
        url,
        {
            "action": "schedule_drain",
            "_selected_action": [pk],
            "confirm": "yes",
            "at": at.isoformat(),
            "drain_now": "on",
            "reason": "BIOS",
        },
        follow=True,
    )
    assert _messages(done.content.decode())[0].startswith("1 host(s): drain now scheduled at ")
    host = Host.objects.get(pk=pk)
    assert (host.drain_at, host.drain_at_now, host.drain_at_reason) == (at, True, "BIOS")
    listing = client.get(url).content.decode()
    assert "drain now scheduled at" in listing
    change = client.get(reverse("admin:scheduler_host_change", args=[pk])).content.decode()
    assert "drain now scheduled at" in change and "by admin: BIOS" in change
    client.post(url, {"action": "cancel_scheduled_drain", "_selected_action": [pk]}, follow=True)
    assert Host.objects.get(pk=pk).drain_at is None
