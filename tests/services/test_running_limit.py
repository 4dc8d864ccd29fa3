"""ext50: the wall-time limit of a started workload changes like Slurm's ``scontrol update
TimeLimit=`` (docs/jobs.md "The wall-time limit of a running workload"): its owner or a budget
manager lowers it (never below M), only an admin raises or removes it, every other field stays
refused ``not_pending``; the tick stops it at the new limit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from accounts.models import User
from scheduler import lifecycle
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import (
    SubmissionError,
    UpdateError,
    do_submit_workload,
    do_update_group,
    do_update_workload,
)
from scheduler.tick import run_tick

HOUR = 3600


def _staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username=username, password="x", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="scheduler", codename=codename))
    return User.objects.get(pk=user.pk)


def _running(w: Workload, started_ago_s: int = 0) -> Attempt:
    """Start ``w`` (a tick), confirmed ``started_ago_s`` seconds ago."""
    at = timezone.now() - timedelta(seconds=started_ago_s)
    run_tick(w.cluster_id, now=at)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=at)
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING
    return attempt


@pytest.fixture
def running(researcher, submit_kwargs) -> Workload:
    """Running for 30 minutes, M 1h, a 4h limit."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR))
    _running(w, started_ago_s=1800)
    w.refresh_from_db()
    return w


def _unchanged(w: Workload) -> None:
    row = Workload.objects.get(pk=w.pk)
    assert (row.max_runtime_s, row.spec_version) == (w.max_runtime_s, w.spec_version)
    assert not WorkloadEvent.objects.filter(workload=w, kind="updated").exists()


def test_the_owner_lowers_the_limit_of_a_running_workload_and_an_event_says_old_to_new(researcher, running):
    done = do_update_workload(researcher, running, {"max_runtime_s": 2 * HOUR})

    assert (done.max_runtime_s, done.state, done.spec_version) == (2 * HOUR, "running", running.spec_version + 1)
    event = WorkloadEvent.objects.get(workload=running, kind="updated")
    assert event.actor == researcher
    assert event.message == "changed wall-time limit 4h → 2h"
    assert event.data["changes"] == {"max_runtime_s": [4 * HOUR, 2 * HOUR]}


def test_a_budget_manager_may_lower_it_too(manager, running):
    assert do_update_workload(manager, running, {"max_runtime_s": 3 * HOUR}).max_runtime_s == 3 * HOUR


def test_a_limit_may_be_set_where_there_was_none(researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR))
    _running(w)
    assert do_update_workload(researcher, w, {"max_runtime_s": 2 * HOUR}).max_runtime_s == 2 * HOUR


def test_never_below_the_minimum_runtime(researcher, running):
    with pytest.raises(SubmissionError) as refused:
        do_update_workload(researcher, running, {"max_runtime_s": HOUR - 1})
    assert (refused.value.code, refused.value.field, refused.value.status) == (
        "max_runtime_below_min_runtime",
        "max_runtime",
        400,
    )
    _unchanged(running)


@pytest.mark.parametrize("value", [0, "1h"])
def test_a_bad_value_is_refused_with_the_submissions_code(researcher, running, value):
    with pytest.raises(SubmissionError) as refused:
        do_update_workload(researcher, running, {"max_runtime_s": value})
    assert refused.value.code == "invalid_max_runtime"
    _unchanged(running)


@pytest.mark.parametrize("value", [5 * HOUR, None])
def test_the_owner_and_a_manager_may_not_raise_or_remove_it(researcher, manager, running, value):
    for who in (researcher, manager):
        with pytest.raises(UpdateError) as refused:
            do_update_workload(who, running, {"max_runtime_s": value})
        assert (refused.value.code, refused.value.status) == ("raise_needs_admin", 403)
    _unchanged(running)


@pytest.mark.parametrize("value", [5 * HOUR, None])
def test_an_admin_may_raise_or_remove_it(admin, running, value):
    done = do_update_workload(admin, running, {"max_runtime_s": value})
    assert done.max_runtime_s == value
    assert WorkloadEvent.objects.get(workload=running, kind="updated").actor == admin


def test_staff_with_change_workload_may_raise_it_and_view_only_staff_may_not_touch_it(running):
    viewer = _staff("viewer", "view_workload")
    with pytest.raises(UpdateError) as refused:
        do_update_workload(viewer, running, {"max_runtime_s": 2 * HOUR})
    assert refused.value.code == "forbidden"
    operator = _staff("operator", "change_workload")
    assert do_update_workload(operator, running, {"max_runtime_s": 6 * HOUR}).max_runtime_s == 6 * HOUR


def test_a_raise_is_held_to_the_sites_maximum_as_at_submission(admin, running, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_RUNTIME_LIMIT_S": 5 * HOUR}
    with pytest.raises(SubmissionError) as refused:
        do_update_workload(admin, running, {"max_runtime_s": 5 * HOUR + 1})
    assert refused.value.code == "max_runtime_too_long"
    _unchanged(running)


def test_every_other_field_of_a_running_workload_stays_refused_not_pending(researcher, admin, running):
    for changes in ({"gpu_count": 2}, {"name": "x"}, {"max_runtime_s": 2 * HOUR, "retries": 1}):
        with pytest.raises(UpdateError) as refused:
            do_update_workload(admin, running, changes)
        assert (refused.value.code, refused.value.status) == ("not_pending", 409)
        assert "only its wall-time limit" in refused.value.message
    _unchanged(running)


def test_a_starting_workload_may_be_lowered_and_counts_from_its_confirmed_start(researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR))
    run_tick(w.cluster_id)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.STARTING
    done = do_update_workload(researcher, w, {"max_runtime_s": HOUR})
    assert done.max_runtime_s == HOUR
    assert "next pass" not in WorkloadEvent.objects.get(workload=w, kind="updated").message


def test_a_stopping_or_finished_workload_is_refused(researcher, admin, running):
    attempt = Attempt.objects.select_related("host").get(workload=running, ended_at__isnull=True)
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0)
    with pytest.raises(UpdateError) as refused:
        do_update_workload(admin, running, {"max_runtime_s": 2 * HOUR})
    assert (refused.value.code, refused.value.status) == ("not_pending", 409)


def test_a_limit_below_the_time_already_run_stops_it_at_the_next_tick_as_a_timeout(researcher, submit_kwargs):
    """Slurm: a TimeLimit below the elapsed time is taken, and the job ends TIMEOUT at the next check."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR))
    attempt = _running(w, started_ago_s=3 * HOUR)

    do_update_workload(researcher, w, {"max_runtime_s": 2 * HOUR})

    event = WorkloadEvent.objects.get(workload=w, kind="updated")
    assert event.message == "changed wall-time limit 4h → 2h (already run longer: it stops at the next pass, timeout)"
    run_tick(w.cluster_id)
    attempt.refresh_from_db()
    assert attempt.stop_reason == Attempt.EndReason.TIMEOUT
    assert WorkloadEvent.objects.get(workload=w, kind="timeout").data["max_runtime_s"] == 2 * HOUR


def test_a_group_update_still_changes_only_pending_members(researcher, submit_kwargs):
    kw = submit_kwargs(gpu_count=8, min_runtime_s=HOUR, max_runtime_s=4 * HOUR, array="0-2")
    members = do_submit_workload(researcher, **kw)
    first = members[0] if isinstance(members, list) else members
    run_tick(first.cluster_id)
    group = Workload.objects.get(pk=first.pk).group
    started = set(Workload.objects.filter(group=group).exclude(state="pending").values_list("pk", flat=True))
    assert started
    changed = do_update_group(researcher, group, {"max_runtime_s": 2 * HOUR})
    assert {w.pk for w in changed}.isdisjoint(started)
    assert set(Workload.objects.filter(pk__in=started).values_list("max_runtime_s", flat=True)) == {4 * HOUR}


def test_the_forward_simulation_ends_the_running_member_at_its_changed_limit(researcher, submit_kwargs, settings):
    """docs/estimates.md "Wall-time limits": the next member of a %1 group starts when the running
    one's limit frees its slot (a grace later): the limit as changed, not as submitted."""
    from scheduler.estimates import store_estimates

    first = do_submit_workload(
        researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR, array="0-1%1")
    )
    now = timezone.now().replace(microsecond=0)
    run_tick(first.cluster_id, now=now)
    runner = Workload.objects.get(group=first.group, state=Workload.State.STARTING)
    waiting = Workload.objects.get(group=first.group, state=Workload.State.PENDING)
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    store_estimates(first.cluster_id, now)
    assert Workload.objects.get(pk=waiting.pk).estimated_start == now + timedelta(seconds=4 * HOUR + grace)

    do_update_workload(researcher, runner, {"max_runtime_s": 2 * HOUR})
    store_estimates(first.cluster_id, now)

    assert Workload.objects.get(pk=waiting.pk).estimated_start == now + timedelta(seconds=2 * HOUR + grace)


def test_a_change_asks_for_estimates_and_a_limit_already_passed_for_a_tick(
    researcher, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks
):
    from scheduler import tasks

    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(tasks, "request_estimates", lambda cid, **kw: asked.append(("estimates", cid)))
    monkeypatch.setattr(tasks, "request_tick", lambda cid: asked.append(("tick", cid)))
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR))
    _running(w, started_ago_s=3 * HOUR)
    with django_capture_on_commit_callbacks(execute=True):
        do_update_workload(researcher, w, {"max_runtime_s": 3 * HOUR + 600})
    assert asked == [("estimates", w.cluster_id)]
    asked.clear()
    with django_capture_on_commit_callbacks(execute=True):
        do_update_workload(researcher, w, {"max_runtime_s": 2 * HOUR})
    assert sorted(asked) == [("estimates", w.cluster_id), ("tick", w.cluster_id)]
