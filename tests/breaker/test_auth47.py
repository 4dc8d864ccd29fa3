"""auth47: faults an attacker found as an ordinary researcher of the lab (or one made staff with
no rights). Each test failed before its fix."""

from __future__ import annotations

from django.contrib.auth.models import Permission

from accounts.models import User
from accounts.services import do_add_membership
from scheduler.models import Workload, WorkloadDependency
from scheduler.services import do_submit_workload


def test_only_admins_wait_for_another_users_workload(
    outsider, admin, api_client_for, submission, submit_kwargs, org_tree, cluster
):
    """``after`` names only one's own workloads, admins' any (docs/jobs.md): the check read
    ``is_staff`` alone, so a staff account without a right (an SSO group rule's ``staff``, a
    statement reader's) made its work wait for anyone's, tying it to theirs (``WorkloadDependency.after``
    protects the other's workload from deletion) where every other admin rule asks for the
    permission (lim42, brk44). Now the admin rule of others' work: superusers and staff with
    ``change_workload``."""
    theirs = do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"]))
    staff = User.objects.create_user("ops", password="x-ops-password", is_staff=True)
    do_add_membership(staff, org_tree["nlp/olmo"])
    refused = api_client_for(staff).post("/api/v1/workloads/", submission(after=[theirs.pk]), format="json")
    assert refused.status_code == 400, refused.content
    assert refused.json()["code"] == "invalid_after"
    assert "only your own workloads" in refused.json()["after"][0]
    assert not WorkloadDependency.objects.exists()
    staff.user_permissions.add(Permission.objects.get(codename="change_workload"))
    staff = User.objects.get(pk=staff.pk)  # permissions read afresh
    taken = api_client_for(staff).post("/api/v1/workloads/", submission(after=[theirs.pk]), format="json")
    assert taken.status_code == 201, taken.content
    do_add_membership(admin, org_tree["nlp/olmo"])
    by_admin = api_client_for(admin).post("/api/v1/workloads/", submission(after=[theirs.pk]), format="json")
    assert by_admin.status_code == 201, by_admin.content
    assert WorkloadDependency.objects.filter(after=theirs).count() == 2
    assert Workload.objects.get(pk=theirs.pk).state == Workload.State.PENDING
