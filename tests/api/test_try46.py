"""try46: a group's hold and release answer as its update does, with the members they changed."""

from __future__ import annotations

from scheduler.models import ArrayGroup, Workload
from scheduler.services import do_submit_workload


def test_a_group_hold_and_release_name_the_members_changed(researcher_client, researcher, submit_kwargs):
    """`PATCH groups/G/` answered `members` (the ids changed), `hold/` and `release/` only a count:
    a script had to list the group again to learn which members it had held."""
    do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get()
    ids = list(group.members.order_by("pk").values_list("pk", flat=True))
    Workload.objects.filter(pk=ids[2]).update(state=Workload.State.RUNNING)
    held = researcher_client.post(f"/api/v1/groups/{group.pk}/hold/").json()
    assert held == {"group": group.pk, "held": 2, "members": ids[:2], "changed": True}
    released = researcher_client.post(f"/api/v1/groups/{group.pk}/release/").json()
    assert released == {"group": group.pk, "released": 2, "members": ids[:2], "changed": True}
    changed = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"gpu_count": 2}, format="json").json()
    assert changed == {"group": group.pk, "updated": 2, "members": ids[:2], "changed": True}
