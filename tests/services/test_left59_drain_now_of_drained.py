"""left59: a drain now of a drained (empty) host changes nothing, scheduled or at once: the tick
applying a drain now scheduled before the host drained flipped it back to draining (drain now) for
a tick, where the clusters page refuses it ("nothing to drain now"). One rule:
``services._state_target``, through ``_change_host_state``."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduler.models import Host, HostEvent
from scheduler.services import apply_due_drains, do_schedule_drain, do_set_host_state, host_action_problem


def test_a_scheduled_drain_now_of_a_host_drained_since_changes_nothing(admin, hosts):
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at, drain_now=True)
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)  # drained by the tick meanwhile
    host.refresh_from_db()
    assert "nothing to drain now" in (host_action_problem(host, "drain-now") or "")
    assert apply_due_drains(host.cluster_id, at) == []
    host.refresh_from_db()
    assert (host.state, host.drain_now, host.drain_at) == (Host.State.DRAINED, False, None)
    moot = HostEvent.objects.filter(host=host).latest("id")
    assert (moot.kind, moot.data["why"]) == ("drain_unscheduled", "moot")
    assert moot.message.endswith("changed nothing: the host was drained already")


def test_a_drain_now_of_a_drained_host_at_once_changes_nothing(admin, admin_client_api, hosts):
    host = hosts["a100-1"]
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)
    before = HostEvent.objects.count()
    after = do_set_host_state(admin, host, Host.State.DRAINING, drain_now=True)
    assert (after.state, after.drain_now) == (Host.State.DRAINED, False)
    body = admin_client_api.post("/api/v1/hosts/a100-1/drain-now/", {}, format="json").json()
    assert (body["state"], body["drain_now"]) == ("drained", False)  # the API's repeat: a no-op
    assert HostEvent.objects.count() == before
