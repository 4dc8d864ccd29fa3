"""upd44: ``PATCH /api/v1/workloads/{id}/`` changes a pending workload (Slurm's ``scontrol update``):
the submission's checks, the cancel's permissions, pending only, its place in the queue kept."""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from accounts.services import do_add_membership
from scheduler.models import GPU, ArrayGroup, Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


@pytest.fixture
def pending(researcher, submit_kwargs) -> Workload:
    return do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=7200))


def _patch(client, pk: int, body: dict):
    return client.patch(f"/api/v1/workloads/{pk}/", body, format="json")


def test_the_owner_changes_size_runtimes_and_memory_and_keeps_the_place(researcher_client, pending) -> None:
    before = Workload.objects.get(pk=pending.pk)

    r = _patch(
        researcher_client,
        pending.pk,
        {"gpu_count": 8, "min_runtime": "30m", "max_runtime": "12h", "memory": "64G", "retries": 2, "name": "bigger"},
    )

    assert r.status_code == 200, r.json()
    body = r.json()
    assert (body["gpu_count"], body["min_runtime_s"], body["name"]) == (8, 1800, "bigger")
    row = Workload.objects.get(pk=pending.pk)
    assert (row.max_runtime_s, row.memory_bytes, row.retries) == (12 * 3600, 64 << 30, 2)
    assert (row.submitted_at, row.seq) == (before.submitted_at, before.seq)
    assert row.spec_version == before.spec_version + 1
    event = WorkloadEvent.objects.get(workload=pending, kind="updated")
    assert event.data["changes"]["gpu_count"] == [4, 8]
    assert event.data["changes"]["min_runtime_s"] == [7200, 1800]
    assert event.message == (
        "changed name pretrain → bigger, GPUs 4 → 8, minimum runtime 2h → 30m, wall-time limit none → 12h, "
        "retries 0 → 2, memory default → 64G"
    )
    assert event.actor.username == "researcher"
    assert any(e["kind"] == "updated" for e in body["events"])


def test_null_removes_the_wall_time_limit_and_the_memory_request(researcher, researcher_client, submit_kwargs) -> None:
    w = do_submit_workload(researcher, **submit_kwargs(max_runtime_s=7200, memory_bytes=32 << 30))

    r = _patch(researcher_client, w.pk, {"max_runtime": None, "memory": None})

    assert r.status_code == 200, r.json()
    row = Workload.objects.get(pk=w.pk)
    assert (row.max_runtime_s, row.memory_bytes) == (None, None)


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"gpu_count": 99}, "gpu_count", "too_many_gpus"),
        ({"gpu_count": 0}, "gpu_count", "invalid_gpu_count"),
        ({"gpu_model": "V100"}, "gpu_model", "unknown_model"),
        ({"min_runtime": "48h"}, "min_runtime", "min_runtime_too_long"),
        ({"max_runtime": "1h"}, "max_runtime", "max_runtime_below_min_runtime"),
        ({"cpus": 100000}, "cpus", "invalid_cpus"),
        ({"retries": 99}, "retries", "invalid_retries"),
        ({"name": " "}, "name", "invalid_name"),
        ({"budget": "vision/sam"}, "budget", "not_a_member"),
        ({"budget": "nope"}, "budget", "unknown_budget"),
        ({"image": "other:1"}, "image", "not_updatable"),
        ({"command": ["true"]}, "command", "not_updatable"),
        ({"hold": True}, "hold", "not_updatable"),
        ({"gpus": 8}, "gpus", "unknown_field"),
    ],
)
def test_a_bad_value_is_refused_with_the_submissions_code_and_changes_nothing(
    researcher_client, pending, body, field, code
) -> None:
    r = _patch(researcher_client, pending.pk, body)

    assert r.status_code == 400, r.json()
    assert r.json()["code"] == code and field in r.json(), r.json()
    row = Workload.objects.get(pk=pending.pk)
    assert (row.gpu_count, row.min_runtime_s, row.spec_version, row.name) == (4, 7200, 0, "pretrain")
    assert not WorkloadEvent.objects.filter(workload=pending, kind="updated").exists()


def test_who_may_change_it_is_who_may_cancel_it(pending, teammate_client, outsider_client, manager_client) -> None:
    for client in (teammate_client, outsider_client):
        r = _patch(client, pending.pk, {"gpu_count": 2})
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    assert Workload.objects.get(pk=pending.pk).gpu_count == 4

    r = _patch(manager_client, pending.pk, {"gpu_count": 2})

    assert r.status_code == 200, r.json()
    assert WorkloadEvent.objects.get(workload=pending, kind="updated").actor.username == "manager"


def test_anonymous_is_refused(pending) -> None:
    assert _patch(APIClient(), pending.pk, {"gpu_count": 2}).status_code == 401


def test_only_a_pending_workload_changes(researcher_client, pending) -> None:
    run_tick(pending.cluster_id)
    assert Workload.objects.get(pk=pending.pk).state == Workload.State.STARTING

    r = _patch(researcher_client, pending.pk, {"gpu_count": 8})

    assert (r.status_code, r.json()["code"]) == (409, "not_pending")
    assert "pending" in r.json()["detail"] or "pending" in str(r.json())
    assert Workload.objects.get(pk=pending.pk).gpu_count == 4


def test_a_move_to_another_budget_checks_the_owners_membership(
    researcher, researcher_client, org_tree, pending
) -> None:
    do_add_membership(researcher, org_tree["nlp"])
    r = _patch(researcher_client, pending.pk, {"budget": "nlp"})
    assert (r.status_code, r.json()["code"]) == (400, "not_a_leaf")

    r = _patch(researcher_client, pending.pk, {"budget": "nlp/tulu"})

    assert r.status_code == 200, r.json()
    assert r.json()["budget"] == "nlp/tulu"
    assert WorkloadEvent.objects.get(workload=pending, kind="updated").data["changes"]["budget"] == [
        "nlp/olmo",
        "nlp/tulu",
    ]


def test_a_workload_that_has_run_keeps_its_budget(researcher, researcher_client, org_tree, pending) -> None:
    """Its past attempts are charged to its budget (the usage reads the workload's budget)."""
    do_add_membership(researcher, org_tree["nlp/tulu"])
    run_tick(pending.cluster_id)
    attempt = Attempt.objects.get(workload=pending)
    from django.utils import timezone

    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now(), ended_at=timezone.now(), end_reason="lost")
    Workload.objects.filter(pk=pending.pk).update(state=Workload.State.PENDING)

    r = _patch(researcher_client, pending.pk, {"budget": "nlp/tulu"})

    assert (r.status_code, r.json()["code"]) == (409, "budget_charged")
    assert _patch(researcher_client, pending.pk, {"gpu_count": 8}).status_code == 200


def test_nominations_for_the_old_request_are_cleared(researcher_client, pending) -> None:
    GPU.objects.filter(pk__in=list(GPU.objects.values_list("pk", flat=True)[:4])).update(nominated_for=pending)

    assert _patch(researcher_client, pending.pk, {"gpu_count": 8}).status_code == 200

    assert not GPU.objects.filter(nominated_for=pending).exists()


def test_an_array_group_changes_its_pending_members(researcher, researcher_client, submit_kwargs) -> None:
    first = do_submit_workload(researcher, **submit_kwargs(array="0-2", gpu_count=1))
    group = ArrayGroup.objects.get(pk=first.group_id)

    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"gpu_count": 2}, format="json")

    assert r.status_code == 200, r.json()
    assert r.json()["updated"] == 3
    assert set(Workload.objects.filter(group=group).values_list("gpu_count", flat=True)) == {2}
    names = sorted(Workload.objects.filter(group=group).values_list("name", flat=True))
    assert names == ["pretrain[0]", "pretrain[1]", "pretrain[2]"]
    again = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"gpu_count": 2}, format="json")
    assert again.json()["updated"] == 0  # already as asked: nothing changed, no event
    assert WorkloadEvent.objects.filter(workload__group=group, kind="updated").count() == 3
    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"name": "x"}, format="json")
    assert (r.status_code, r.json()["code"]) == (400, "not_updatable")


def test_an_array_member_changes_alone(researcher, researcher_client, submit_kwargs) -> None:
    first = do_submit_workload(researcher, **submit_kwargs(array="0-1", gpu_count=1))

    assert _patch(researcher_client, first.pk, {"gpu_count": 2}).status_code == 200

    assert sorted(Workload.objects.filter(group_id=first.group_id).values_list("gpu_count", flat=True)) == [1, 2]


def test_the_schema_documents_the_patch(db) -> None:
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)

    patch = schema["paths"]["/api/v1/workloads/{id}/"]["patch"]
    assert patch["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("WorkloadUpdateRequest")
    assert "patch" in schema["paths"]["/api/v1/groups/{id}/"]


def test_the_group_patch_has_no_name_and_refuses_it_as_before(researcher, researcher_client, submit_kwargs):
    """api48: the groups' PATCH documented ``name`` (it reused the workload's update body) though
    a group's members keep their names; the body is its own, and ``name`` is refused with the
    service's code and message, nothing changed."""
    from scheduler.services import GROUP_NAME_NOT_UPDATABLE

    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    ref = schema["paths"]["/api/v1/groups/{id}/"]["patch"]["requestBody"]["content"]["application/json"]["schema"]
    body = schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
    assert "name" not in body["properties"] and "gpu_count" in body["properties"]
    first = do_submit_workload(researcher, **submit_kwargs(array="0-1", gpu_count=1))
    r = researcher_client.patch(f"/api/v1/groups/{first.group_id}/", {"name": "x", "gpu_count": 2}, format="json")
    assert (r.status_code, r.json()["code"], r.json()["name"]) == (400, "not_updatable", [GROUP_NAME_NOT_UPDATABLE])
    assert set(Workload.objects.values_list("gpu_count", flat=True)) == {1}
    r = researcher_client.patch(f"/api/v1/groups/{first.group_id}/", {"gpus": 2}, format="json")
    assert (r.status_code, r.json()["code"]) == (400, "unknown_field")
