"""brk46: breaking the update of a pending workload (upd44; docs/jobs.md, "Changing a pending
workload")."""

from __future__ import annotations

from django.utils import timezone

from accounts.services import do_add_membership
from scheduler.models import ArrayGroup, Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def test_a_group_budget_move_refused_for_one_member_changes_no_member(
    researcher, researcher_client, org_tree, submit_kwargs
) -> None:
    """A group's budget move refused ``budget_charged`` for a member that has run (requeued, pending
    again) left the members before it moved: a 409 after a partial change."""
    do_add_membership(researcher, org_tree["nlp/tulu"])
    first = do_submit_workload(researcher, **submit_kwargs(array="0-2", gpu_count=1))
    group = ArrayGroup.objects.get(pk=first.group_id)
    members = list(Workload.objects.filter(group=group).order_by("pk"))
    run_tick(first.cluster_id)
    ran = members[1]  # the second member ran and was requeued: its attempt is charged to nlp/olmo
    now = timezone.now()
    Attempt.objects.filter(workload=ran).update(started_at=now, ended_at=now, end_reason="lost")
    Attempt.objects.filter(workload__in=[members[0], members[2]]).delete()
    Workload.objects.filter(group=group).update(state=Workload.State.PENDING)

    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"budget": "nlp/tulu"}, format="json")

    assert (r.status_code, r.json()["code"]) == (409, "budget_charged"), r.json()
    assert set(Workload.objects.filter(group=group).values_list("budget__name", flat=True)) == {"olmo"}
    assert not WorkloadEvent.objects.filter(workload__group=group, kind="updated").exists()
    # the other fields still change for every member
    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"gpu_count": 2}, format="json")
    assert (r.status_code, r.json()["updated"]) == (200, 3), r.json()
