"""maint55: a drain (or drain now) scheduled for a later time, applied by the tick at that time as
the immediate one (``services.do_schedule_drain``, ``apply_due_drains``; docs/deploy.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from scheduler.models import Attempt, Host, HostEvent
from scheduler.services import (
    HostError,
    apply_due_drains,
    do_cancel_scheduled_drain,
    do_schedule_drain,
    do_set_host_state,
    do_submit_workload,
    drain_time,
    host_actions,
    scheduled_drain,
)
from scheduler.tick import run_tick


def _kinds(host: Host) -> list[str]:
    return list(HostEvent.objects.filter(host=host).exclude(kind="registered").values_list("kind", flat=True))


def test_a_scheduled_drain_is_listed_and_applied_at_its_time_once(admin, hosts):
    host = hosts["a100-1"]
    at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)  # kept in whole seconds (try59)
    do_schedule_drain(admin, host, at, "PSU swap")
    host.refresh_from_db()
    assert host.state == Host.State.ACTIVE  # until then it schedules as it is
    shown = scheduled_drain(host)
    assert shown is not None
    assert (shown["at"], shown["drain_now"], shown["by"], shown["reason"]) == (at, False, admin.username, "PSU swap")
    assert shown["summary"].startswith("drain scheduled at ") and "by admin: PSU swap" in shown["summary"]
    event = HostEvent.objects.get(host=host, kind="drain_scheduled")
    assert (event.actor, event.message, event.data["at"]) == (admin, "PSU swap", at.isoformat())

    assert apply_due_drains(host.cluster_id, at - timedelta(seconds=1)) == []  # not yet
    run_tick(host.cluster_id, at - timedelta(seconds=1))
    host.refresh_from_db()
    assert (host.state, host.drain_at) == (Host.State.ACTIVE, at)

    run_tick(host.cluster_id, at)  # the tick at the time: the drain, as an immediate one
    host.refresh_from_db()
    assert (host.state, host.drain_now, host.drain_at, host.drain_at_by) == (Host.State.DRAINED, False, None, None)
    applied = HostEvent.objects.get(host=host, kind="draining")
    assert (applied.actor, applied.message) == (admin, "PSU swap")  # who scheduled it, and why
    # and when it was asked (lt61: the host's reason named only when it was applied)
    assert applied.data["scheduled"] == {"at": at.isoformat(), "by": "admin", "asked_at": event.at.isoformat()}
    run_tick(host.cluster_id, at + timedelta(seconds=5))  # a second tick: nothing more
    assert apply_due_drains(host.cluster_id, at + timedelta(minutes=1)) == []
    assert _kinds(host) == ["drain_scheduled", "draining", "drained"]  # the same tick found it empty


def test_a_scheduled_drain_of_a_busy_host_drains_it_as_an_immediate_one(
    admin, hosts, researcher, submit_kwargs, django_capture_on_commit_callbacks
):
    host = hosts["a100-1"]
    do_set_host_state(None, hosts["a100-2"], Host.State.CORDONED)
    with django_capture_on_commit_callbacks(execute=True):
        do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
        run_tick(host.cluster_id)
    attempt = Attempt.objects.get()
    assert attempt.host_id == host.pk
    at = timezone.now() + timedelta(minutes=5)
    do_schedule_drain(admin, host, at, "", drain_now=True)
    run_tick(host.cluster_id, at)
    host.refresh_from_db()
    attempt.refresh_from_db()
    assert (host.state, host.drain_now) == (Host.State.DRAINING, True)
    assert attempt.stop_reason == "drained"  # drain now stops it, protection or not


def test_a_second_schedule_replaces_the_first_and_resume_or_cancel_forget_it(admin, hosts):
    host = hosts["a100-1"]
    first = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    second = first + timedelta(hours=1)
    do_schedule_drain(admin, host, first, "a")
    do_schedule_drain(admin, host, second, "b", drain_now=True)
    host.refresh_from_db()
    assert (host.drain_at, host.drain_at_now, host.drain_at_reason) == (second, True, "b")
    assert HostEvent.objects.filter(kind="drain_scheduled").latest("id").data["replaces"] == first.isoformat()
    run_tick(host.cluster_id, first)  # the replaced time passes: nothing
    host.refresh_from_db()
    assert host.state == Host.State.ACTIVE

    assert "resume" in host_actions(host)  # an active host's resume cancels its schedule
    do_set_host_state(admin, host, Host.State.ACTIVE, "not needed")
    host.refresh_from_db()
    assert host.drain_at is None and host.state == Host.State.ACTIVE
    assert "resume" not in host_actions(host)
    run_tick(host.cluster_id, second)
    host.refresh_from_db()
    assert host.state == Host.State.ACTIVE

    do_schedule_drain(admin, host, second, "c")
    do_cancel_scheduled_drain(admin, host, "moved to next week")
    host.refresh_from_db()
    assert host.drain_at is None
    do_cancel_scheduled_drain(admin, host)  # none left: a no-op, no event (left59)
    assert _kinds(host) == [
        "drain_scheduled",
        "drain_scheduled",
        "drain_unscheduled",
        "drain_scheduled",
        "drain_unscheduled",
    ]


@pytest.mark.parametrize(
    ("at", "words"),
    [
        ("tomorrow", "ISO 8601"),
        ("2026-13-01T00:00Z", "ISO 8601"),
        ("2099-12-10T08:00", "names its zone"),
        ("2020-01-01T00:00Z", "is past"),
        ("2099-01-01T00:00Z", "at most 366 days ahead"),
        (None, "ISO 8601"),
        ("2026-12-10T08:00\x00Z", "ISO 8601"),
    ],
)
def test_a_bad_time_is_refused_and_changes_nothing(admin, hosts, at, words):
    host = hosts["a100-1"]
    with pytest.raises(HostError) as info:
        do_schedule_drain(admin, host, at, "")
    assert info.value.code == "invalid_at" and words in info.value.message
    host.refresh_from_db()
    assert host.drain_at is None and _kinds(host) == []


def test_drain_time_reads_a_zone_and_a_z():
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    assert drain_time("2026-12-10T08:00Z", now) == datetime(2026, 12, 10, 8, 0, tzinfo=UTC)
    assert drain_time("2026-12-10T09:00+01:00", now) == datetime(2026, 12, 10, 8, 0, tzinfo=UTC)


def test_a_drain_that_would_change_nothing_or_a_removed_host_is_refused(admin, hosts):
    from scheduler.services import do_remove_host

    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_set_host_state(admin, host, Host.State.DRAINING)  # empty: drained
    with pytest.raises(HostError) as info:
        do_schedule_drain(admin, host, at)
    assert info.value.code == "invalid_state"
    do_remove_host(admin, host)
    with pytest.raises(HostError) as info:
        do_schedule_drain(admin, host, at, drain_now=True)
    assert info.value.code == "host_removed"
    with pytest.raises(HostError):
        do_cancel_scheduled_drain(admin, host)


def test_a_host_removed_before_the_time_is_left_alone(admin, hosts):
    from scheduler.services import do_remove_host

    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at, "x")
    do_remove_host(admin, host, "decommissioned")
    host.refresh_from_db()
    assert host.drain_at is None  # the removal drops it
    Host.objects.filter(pk=host.pk).update(drain_at=at)  # (as if left by an older server)
    assert apply_due_drains(host.cluster_id, at) == []
    host.refresh_from_db()
    assert (host.state, host.drain_at) == (Host.State.ACTIVE, None)
    assert "draining" not in _kinds(host)


def test_a_drain_done_by_hand_meanwhile_makes_the_schedule_moot(admin, hosts):
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at, "x")
    # a drain by hand cancels it now (left59: tests/web/test_left59_drain_notes.py); one that was
    # drained otherwise (a race) still finds it moot
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINING)
    assert apply_due_drains(host.cluster_id, at) == []
    host.refresh_from_db()
    assert host.drain_at is None
    moot = HostEvent.objects.filter(host=host).latest("id")
    assert (moot.kind, moot.data["why"]) == ("drain_unscheduled", "moot")


def test_a_scheduled_drain_of_an_offline_host_is_kept_for_its_return(admin, hosts):
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at)
    Host.objects.filter(pk=host.pk).update(state=Host.State.OFFLINE, state_before_offline=Host.State.ACTIVE)
    assert apply_due_drains(host.cluster_id, at) == [host.pk]
    host.refresh_from_db()
    assert (host.state, host.state_before_offline, host.drain_at) == (Host.State.OFFLINE, Host.State.DRAINING, None)
