"""try58 (a researcher, an operator and leadership through the README): the admin's instants.

A host's page listed its events with an "at" of minutes (Django's DATETIME_FORMAT, truncated)
beside each row's own name, which writes the instant as every surface does (``instant_text``,
seconds rounded up): "joined of host 2 at Dec 7 2026 01:09:00 UTC" over an at of "Dec 7 2026
01:08 UTC"; its last heartbeat read "01:16 UTC" there and "01:16:38 UTC" in the hosts list; the
temporary shares' from and until read "Dec 7 2026 01:13 UTC" beside their state's "until
02:30:00 UTC"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.urls import reverse
from django.utils import timezone

from budgets.services import do_schedule_boost
from fairway_cli.numbers import instant_text
from scheduler.models import Host, HostEvent, WorkloadEvent
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.services.test_share_boosts import _client

AT = datetime(2026, 12, 7, 1, 8, 59, 600000, tzinfo=UTC)  # 01:09:00 in instant_text, 01:08 in minutes


def test_a_hosts_page_and_the_event_lists_write_instants_as_every_instant(admin, cluster, researcher, submit_kwargs):
    host = Host.objects.get(name="h100-1")
    Host.objects.filter(pk=host.pk).update(last_heartbeat=AT)
    event = HostEvent.objects.create(host=host, at=AT, kind="joined", message="joined with join token 2")
    client = _client(admin)
    shown = instant_text(AT)
    page = client.get(reverse("admin:scheduler_host_change", args=[host.pk])).content.decode()
    assert str(event) in page
    assert page.count(shown) >= 2, "the event's at and the last heartbeat"
    assert "01:08 UTC" not in page
    listing = client.get(reverse("admin:scheduler_hostevent_changelist")).content.decode()
    assert shown in listing and "01:08 UTC" not in listing
    workload = do_submit_workload(researcher, **submit_kwargs())
    WorkloadEvent.objects.create(workload=workload, at=AT, kind="submitted", message="submitted")
    listing = client.get(reverse("admin:scheduler_workloadevent_changelist")).content.decode()
    assert shown in listing and "01:08 UTC" not in listing


def test_the_temporary_shares_list_writes_from_and_until_as_its_state(admin, org_tree):
    start = timezone.now() + timedelta(days=2)
    boost = do_schedule_boost(admin, org_tree["nlp/olmo"], 3, start + timedelta(days=1), start)
    listing = _client(admin).get(reverse("admin:budgets_shareboost_changelist")).content.decode()
    for at in (boost.starts_at, boost.ends_at):
        assert (
            f'<td class="field-{"starts" if at == boost.starts_at else "ends"}_shown">{instant_text(at)}</td>'
            in listing
        )
        at = at.astimezone(UTC)
        assert f"{at:%b} {at.day} {at.year} {at:%H:%M} UTC" not in listing  # Django's minutes


def test_in_a_browser_a_hosts_events_read_their_instants_as_their_names_do(new_page, admin, cluster):
    host = Host.objects.get(name="h100-1")
    event = HostEvent.objects.create(host=host, at=AT, kind="joined", message="joined with join token 2")
    page = new_page()
    log_in(page, admin.username)
    page.goto(reverse("admin:scheduler_host_change", args=[host.pk]))
    row = (
        page.locator("tr", has_text=str(event)).first.inner_text()
        + page.locator("tr", has=page.locator("td.field-message", has_text="joined with join token 2")).inner_text()
    )
    assert instant_text(AT) in row and "01:08 UTC" not in row
