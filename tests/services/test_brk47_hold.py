"""brk47: holds attacked (docs/jobs.md "Hold and release"): what a hold promised and did not keep."""

from __future__ import annotations

import pytest

from scheduler.estimates import HELD_QUOTE_NOTE
from scheduler.models import ArrayGroup
from scheduler.reports import occupancy
from scheduler.services import HoldError, do_hold_group, do_hold_workload, do_release_workload, do_submit_workload


def test_an_admins_group_hold_replaces_the_members_user_holds(researcher, admin, submit_kwargs):
    # A member its owner had held kept its user hold under the admin's group hold: the owner
    # released it at once, and it ran while the admin's hold stood over its siblings.
    first = do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get(pk=first.group_id)
    do_hold_workload(researcher, first)

    assert len(do_hold_group(admin, group)) == 3
    assert set(group.members.values_list("hold", flat=True)) == {"admin"}
    assert do_hold_group(admin, group) == []  # again: nothing changes
    assert do_hold_group(researcher, group, release=True) == []
    with pytest.raises(HoldError) as refused:
        do_release_workload(researcher, first)
    assert refused.value.status == 403
    assert set(group.members.values_list("hold", flat=True)) == {"admin"}


def test_why_work_waits_tells_a_workloads_own_hold_from_its_budgets(researcher, admin, submit_kwargs, cluster):
    # The metrics page and GET /metrics/ counted every `held` as "budget on hold", a workload's
    # own hold (its owner's or an admin's) included.
    mine = do_submit_workload(researcher, **submit_kwargs(), hold=True)
    theirs = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(admin, theirs)
    budget_held = do_submit_workload(researcher, **submit_kwargs())
    type(budget_held).objects.filter(pk=budget_held.pk).update(pending_reason="held", pending_detail={})
    assert mine.hold == "user"

    (occ,) = occupancy([cluster])

    assert occ.pending_by_reason == {"held": 3}
    assert occ.pending_held == {"admin": 1, "user": 1}
    assert occ.why_waits() == [
        ("budget on hold", "held", 1),
        ("held by its owner", "held", 1),
        ("held by an admin", "held", 1),
    ]


def test_a_quote_of_a_held_submission_says_the_starts_are_for_a_release(researcher_client, submission, cluster):
    # `fairway submit --hold --quote` and the form's quote with "Submit held" said "now" with no
    # word that the workload, submitted held, starts only once released.
    held = researcher_client.post("/api/v1/workloads/quote/", submission(hold=True), format="json").json()
    plain = researcher_client.post("/api/v1/workloads/quote/", submission(), format="json").json()

    assert [q["estimated_start"] is not None for q in held["quotes"]] == [True] * len(held["quotes"])
    assert HELD_QUOTE_NOTE in held["notes"] and HELD_QUOTE_NOTE not in plain["notes"]


def test_the_admins_hold_and_release_actions_are_the_services_and_count_what_changed(
    client, admin, researcher, submit_kwargs
):
    # The actions had no test; "Hold" counted a workload already on an admin's hold as held.
    from django.contrib.messages import get_messages
    from django.urls import reverse

    from scheduler.models import WorkloadEvent

    client.force_login(admin)
    mine = do_submit_workload(researcher, **submit_kwargs(), hold=True)
    other = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(admin, other)
    changelist = reverse("admin:scheduler_workload_changelist")

    held = client.post(changelist, {"action": "hold_action", "_selected_action": [mine.pk, other.pk]}, follow=True)

    assert [str(m) for m in get_messages(held.wsgi_request)] == ["1 workload(s) held."]
    mine.refresh_from_db()
    assert (mine.hold, mine.held_by) == ("admin", admin)
    assert WorkloadEvent.objects.filter(workload=mine, kind="held", actor=admin, data={"hold": "admin"}).exists()
    released = client.post(changelist, {"action": "release", "_selected_action": [mine.pk]}, follow=True)
    assert [str(m) for m in get_messages(released.wsgi_request)] == ["1 workload(s) released."]
    assert WorkloadEvent.objects.filter(workload=mine, kind="released", actor=admin).exists()
