"""brk50: breaking resubmit, update, holds and statements (the features of rounds 44-49)."""

from __future__ import annotations

from scheduler.models import ArrayGroup, Workload, WorkloadEvent
from scheduler.services import do_submit_workload, do_update_workload


def test_a_group_update_refused_for_one_members_own_values_changes_no_member(
    researcher, researcher_client, submit_kwargs
) -> None:
    """A group's change refused for one member (its own wall-time limit, set on it alone, is below
    the group's new minimum runtime) answered 400 after the members before it had changed: the
    person read "refused" while one member now asked 2h30m."""
    first = do_submit_workload(researcher, **submit_kwargs(array="0-2", min_runtime_s=3600, max_runtime_s=3 * 3600))
    group = ArrayGroup.objects.get(pk=first.group_id)
    members = list(Workload.objects.filter(group=group).order_by("pk"))
    do_update_workload(researcher, members[1], {"max_runtime_s": 2 * 3600})

    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"min_runtime": "150m"}, format="json")

    assert (r.status_code, r.json()["code"]) == (400, "max_runtime_below_min_runtime"), r.json()
    assert r.json()["max_runtime"][0].startswith(f"pretrain[1] (#{members[1].pk}): The wall-time limit (2h)")
    assert set(Workload.objects.filter(group=group).values_list("min_runtime_s", flat=True)) == {3600}
    assert not WorkloadEvent.objects.filter(workload__in=[members[0], members[2]], kind="updated").exists()


def test_an_array_whose_member_names_pass_200_characters_is_refused_by_name(
    researcher_client, submission, cluster
) -> None:
    """A member's name is the name and its ``[index]``: a 200-character name (or 197 with index 10)
    passed the name rule, and every member's 204 characters were a 500 on PostgreSQL
    (``varchar(200)``), stored whole on SQLite; a resubmission of such a member alike."""
    r = researcher_client.post("/api/v1/workloads/", submission(name="x" * 197, array="9-10"), format="json")

    assert (r.status_code, r.json()["code"]) == (400, "invalid_name"), r.json()
    assert "[10]" in r.json()["name"][0]
    assert not Workload.objects.exists()
    # one whose every member fits is taken
    r = researcher_client.post("/api/v1/workloads/", submission(name="x" * 197, array="0-9"), format="json")
    assert r.status_code == 201, r.json()


def test_an_array_spec_longer_than_the_group_keeps_is_refused(researcher_client, submission, cluster) -> None:
    """The group keeps the array as submitted in 64 characters: ``0,2,4,…,58`` (89) was a 500 on
    PostgreSQL (``varchar(64)``) and stored whole on SQLite."""
    spec = ",".join(str(i) for i in range(0, 60, 2))
    r = researcher_client.post("/api/v1/workloads/", submission(array=spec), format="json")

    assert (r.status_code, r.json()["code"]) == (400, "invalid_array"), r.json()
    assert "64 characters" in r.json()["array"][0]
    assert not Workload.objects.exists()


def test_an_admin_is_offered_the_groups_hold_where_it_replaces_its_members_user_holds(
    client, admin, researcher, submit_kwargs
) -> None:
    """brk47 made an admin's hold replace a user hold (``services.hold_changes``, the member's own
    button's rule), but the group's button was offered only where a member was not held at all: an
    admin saw no "Hold the group" on a group its owner had held, which ``POST groups/G/hold/`` does
    change (every member to an admin hold)."""
    first = do_submit_workload(researcher, **submit_kwargs(), array="0-1", hold=True)
    client.force_login(admin)
    assert 'id="hold-group-button"' in client.get(f"/workloads/{first.pk}/").content.decode()
    client.force_login(researcher)  # the owner's own holds: nothing to change
    assert 'id="hold-group-button"' not in client.get(f"/workloads/{first.pk}/").content.decode()


def test_the_edit_form_does_not_move_a_workload_to_a_new_budget_of_its_budgets_path(
    client, researcher, org_tree, submit_kwargs
) -> None:
    """The edit form posts every field, the budget as its path. With the workload's budget archived
    (its pending work carries on) and a new ``nlp/olmo`` created, that path names the new one (a
    live budget wins): a rename on the page moved the workload, unasked, to the new budget, charged
    there. The workload's own path names its own budget, where a rename is taken (left51: an
    archived budget's pending work may shrink or be renamed, not grow)."""
    from accounts.services import do_add_membership
    from budgets.services import do_archive_budget, do_create_budget

    w = do_submit_workload(researcher, **submit_kwargs())
    do_archive_budget(org_tree["nlp/olmo"])
    fresh = do_create_budget(name="olmo", parent=org_tree["nlp"])
    do_add_membership(researcher, fresh)
    client.force_login(researcher)
    form = {"name": "renamed", "budget": "nlp/olmo", "gpu_count": "4", "gpu_model": "A100", "min_runtime": "1h"}

    r = client.post(f"/workloads/{w.pk}/update/", {**form, "version": str(w.spec_version)})

    w.refresh_from_db()
    assert w.budget_id == org_tree["nlp/olmo"].pk, "moved to the new nlp/olmo"
    assert r.status_code == 302 and w.name == "renamed"  # as the API takes it
    r = client.post(f"/workloads/{w.pk}/update/", {**form, "gpu_count": "8", "version": str(w.spec_version)})
    w.refresh_from_db()
    assert r.status_code == 400 and "archived" in r.content.decode() and w.gpu_count == 4  # growth: refused
