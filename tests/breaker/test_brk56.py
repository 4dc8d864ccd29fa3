"""brk56: faults a breaker found in the scheduled drains, idle GPU alerts and temporary shares."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduler.models import Host, HostEvent
from scheduler.services import apply_due_drains, do_schedule_drain, do_set_host_state

# --- a drain never slows a drain now ----------------------------------------------------------


def test_a_scheduled_drain_applied_to_a_host_drained_now_by_hand_keeps_the_drain_now(admin, hosts):
    """A plain drain scheduled at 08:00, the host drained now by hand at 07:00: the tick's drain at
    08:00 turned the drain now into a plain drain (``drain_now`` False: protected attempts kept
    running), which no surface allows by hand ("not a way to slow it")."""
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at, "PSU swap")
    do_set_host_state(admin, host, Host.State.DRAINING, "smoke", drain_now=True)
    assert apply_due_drains(host.cluster_id, at) == []
    host.refresh_from_db()
    assert (host.state, host.drain_now, host.drain_at) == (Host.State.DRAINING, True, None)
    moot = HostEvent.objects.filter(host=host).latest("id")
    assert (moot.kind, moot.data["why"]) == ("drain_unscheduled", "moot")


def test_a_drain_of_a_host_draining_now_changes_nothing(admin, hosts):
    """The API's and the admin's drain (``do_set_host_state``, idempotent) of a host drained now
    slowed it as well: a repeat there is a no-op, not a plain drain."""
    host = hosts["a100-1"]
    do_set_host_state(admin, host, Host.State.DRAINING, "smoke", drain_now=True)
    do_set_host_state(admin, host, Host.State.DRAINING, "again")
    host.refresh_from_db()
    assert (host.state, host.drain_now) == (Host.State.DRAINING, True)
    assert not HostEvent.objects.filter(host=host, kind="draining").exists()
