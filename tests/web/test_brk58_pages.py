"""brk58: the clusters page's time field with an action that is no drain (browser)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduler.models import Host, HostEvent
from tests.browser import log_in


def test_enter_in_the_time_field_does_not_cordon_the_host(new_page, admin, hosts):
    """A time typed in a host's row and Enter pressed submitted the form's first button, Cordon:
    the host was cordoned at once and the time dropped unsaid. It is refused, nothing changed."""
    at = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%MZ")
    events = HostEvent.objects.count()
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/default/")
    field = page.locator("#host-a100-1 input[name=at]")
    field.fill(at)
    field.press("Enter")
    page.wait_for_load_state()
    assert "a time schedules a drain or a drain now, not a cordon" in page.locator("body").inner_text()
    host = Host.objects.get(name="a100-1")
    assert (host.state, host.drain_at) == (Host.State.ACTIVE, None)
    assert HostEvent.objects.count() == events
