"""Holding and releasing a pending workload (docs/jobs.md "Hold and release"; Slurm's
``scontrol hold/release``, ``sbatch -H``): who may, which kind, what it changes, what it refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission

from accounts.models import User
from scheduler.models import GPU, ArrayGroup, Workload, WorkloadEvent
from scheduler.services import (
    HoldError,
    do_hold_group,
    do_hold_workload,
    do_release_workload,
    do_submit_workload,
    hold_kind,
)


def _staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username=username, password="x", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="scheduler", codename=codename))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def work(researcher, submit_kwargs) -> Workload:
    return do_submit_workload(researcher, **submit_kwargs())


def _events(w: Workload) -> list[tuple[str, str, dict]]:
    return [(e.kind, e.actor.username if e.actor else "", e.data) for e in WorkloadEvent.objects.filter(workload=w)]


def test_the_owner_holds_and_releases_a_user_hold(work, researcher):
    before = (work.submitted_at, work.seq)
    held = do_hold_workload(researcher, work)
    assert (held.hold, held.held_by, held.pending_reason, held.pending_detail) == (
        "user",
        researcher,
        "held",
        {"hold": "user"},
    )
    assert held.held_at is not None and held.estimated_start is None
    released = do_release_workload(researcher, work)
    assert (released.hold, released.held_at, released.held_by, released.pending_reason) == ("", None, None, "")
    # its place in its budget's queue: submission time and sequence never change
    assert (released.submitted_at, released.seq) == before
    assert _events(work)[1:] == [
        ("held", "researcher", {"hold": "user"}),
        ("released", "researcher", {"hold": "user"}),
    ]


def test_a_budget_manager_places_a_user_hold_the_owner_may_release(work, manager, researcher):
    assert do_hold_workload(manager, work).hold == "user"
    assert do_release_workload(researcher, work).hold == ""


def test_an_admins_hold_is_an_admin_hold_only_an_admin_releases(work, admin, researcher, manager):
    operator = _staff("operator", "change_workload")
    assert hold_kind(operator, work) == "admin"
    assert do_hold_workload(operator, work).hold == "admin"
    for who in (researcher, manager):
        with pytest.raises(HoldError) as refused:
            do_release_workload(who, work)
        assert (refused.value.code, refused.value.status) == ("forbidden", 403)
        assert "only an admin" in refused.value.message
    work.refresh_from_db()
    assert (work.hold, work.held_by) == ("admin", operator)
    # the owner's own hold cannot lower an admin's; another admin may release it
    assert do_hold_workload(researcher, work).hold == "admin"
    assert do_release_workload(admin, work).hold == ""
    assert [k for k, _a, _d in _events(work)] == ["submitted", "held", "released"]


def test_an_admins_hold_replaces_a_user_hold(work, researcher, admin):
    do_hold_workload(researcher, work)
    assert do_hold_workload(researcher, work).hold == "user"  # twice: nothing changes, no event
    assert do_hold_workload(admin, work).hold == "admin"
    assert [(k, a) for k, a, _d in _events(work)] == [
        ("submitted", "researcher"),
        ("held", "researcher"),
        ("held", "admin"),
    ]


@pytest.mark.parametrize("who", ["teammate", "outsider", "viewer"])
def test_who_may_not_cancel_may_not_hold_and_nothing_changes(work, who, teammate, outsider):
    actor = {"teammate": teammate, "outsider": outsider}.get(who) or _staff("viewer", "view_workload")
    with pytest.raises(HoldError) as refused:
        do_hold_workload(actor, work)
    assert (refused.value.code, refused.value.status) == ("forbidden", 403)
    work.refresh_from_db()
    assert (work.hold, work.held_at, work.pending_reason) == ("", None, "")
    assert [k for k, _a, _d in _events(work)] == ["submitted"]


def test_only_a_pending_workload_is_held_or_released(work, researcher):
    Workload.objects.filter(pk=work.pk).update(state=Workload.State.RUNNING)
    for do in (do_hold_workload, do_release_workload):
        with pytest.raises(HoldError) as refused:
            do(researcher, work)
        assert (refused.value.code, refused.value.status) == ("not_pending", 409)
    assert Workload.objects.get(pk=work.pk).hold == ""


def test_releasing_a_workload_not_held_is_a_conflict(work, researcher):
    with pytest.raises(HoldError) as refused:
        do_release_workload(researcher, work)
    assert (refused.value.code, refused.value.status) == ("not_held", 409)


def test_a_hold_drops_the_workloads_gpu_nomination_and_estimate(work, researcher, hosts):
    gpu = GPU.objects.filter(host=hosts["a100-1"]).first()
    GPU.objects.filter(pk=gpu.pk).update(nominated_for=work)
    Workload.objects.filter(pk=work.pk).update(estimated_start=work.submitted_at + timedelta(hours=1))
    do_hold_workload(researcher, work)
    assert not GPU.objects.filter(nominated_for=work).exists()
    assert Workload.objects.get(pk=work.pk).estimated_start is None


def test_a_hold_keeps_a_dependency_reason_which_comes_first(work, researcher):
    Workload.objects.filter(pk=work.pk).update(pending_reason="dependency", pending_detail={"after": True})
    held = do_hold_workload(researcher, work)
    assert (held.hold, held.pending_reason) == ("user", "dependency")


def test_submitted_held_waits_with_its_hold_and_events(researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(), hold=True)
    w.refresh_from_db()
    assert (w.hold, w.held_by, w.pending_reason, w.pending_detail) == ("user", researcher, "held", {"hold": "user"})
    assert w.held_at == w.submitted_at
    assert [k for k, _a, _d in _events(w)] == ["submitted", "held"]


def test_a_submission_with_a_hold_not_true_or_false_is_refused(researcher, submit_kwargs):
    from scheduler.services import SubmissionError

    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(), hold="yes")  # type: ignore[arg-type]
    assert refused.value.code == "invalid_hold"
    assert not Workload.objects.exists()


def test_a_group_is_held_and_released_member_by_member(researcher, teammate, submit_kwargs):
    first = do_submit_workload(researcher, **submit_kwargs(), array="0-3")
    group = ArrayGroup.objects.get(pk=first.group_id)
    running = group.members.order_by("pk").last()
    Workload.objects.filter(pk=running.pk).update(state=Workload.State.RUNNING)
    with pytest.raises(HoldError):
        do_hold_group(teammate, group)
    assert len(do_hold_group(researcher, group)) == 3
    assert do_hold_group(researcher, group) == []  # already held
    states = sorted(group.members.values_list("state", "hold"))
    assert states == [("pending", "user")] * 3 + [("running", "")]
    assert len(do_hold_group(researcher, group, release=True)) == 3
    assert set(group.members.values_list("hold", flat=True)) == {""}
