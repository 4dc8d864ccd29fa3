"""left51: a pending workload in an archived budget may still be changed in ways that add no
demand (docs/jobs.md "Changing a pending workload": archiving refuses new work only, DESIGN.md
§3.7): fewer GPUs, CPUs, memory or shm, a shorter minimum runtime or wall-time limit, fewer retries,
a new name, a hold or release, a move to a live budget. Growing it stays refused ``budget_archived``."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.services import do_add_membership
from budgets.services import do_archive_budget
from scheduler.models import Workload, WorkloadEvent
from scheduler.services import do_submit_workload


@pytest.fixture
def archived(researcher, submit_kwargs, org_tree) -> Workload:
    w = do_submit_workload(
        researcher,
        **submit_kwargs(
            gpu_count=4, min_runtime_s=7200, max_runtime_s=4 * 3600, retries=2, cpus=16,
            memory_bytes=64 << 30, shared_memory_bytes=8 << 30,
        ),
    )  # fmt: skip
    do_archive_budget(org_tree["nlp/olmo"])
    return w


def _patch(client: Any, pk: int, body: dict[str, Any]) -> Any:
    return client.patch(f"/api/v1/workloads/{pk}/", body, format="json")


def _request(pk: int) -> tuple[Any, ...]:
    w = Workload.objects.get(pk=pk)
    return (w.name, w.gpu_count, w.min_runtime_s, w.max_runtime_s, w.retries, w.cpus, w.memory_bytes,
            w.shared_memory_bytes, w.gpu_model)  # fmt: skip


def test_shrinking_it_is_allowed(researcher_client, archived):
    body = {
        "name": "smaller", "gpu_count": 2, "min_runtime": "1h", "max_runtime": "2h", "retries": 0, "cpus": 8,
        "memory": "32G", "shared_memory": "4G",
    }  # fmt: skip
    response = _patch(researcher_client, archived.pk, body)
    assert response.status_code == 200, response.json()
    assert _request(archived.pk) == ("smaller", 2, 3600, 7200, 0, 8, 32 << 30, 4 << 30, "A100")
    assert WorkloadEvent.objects.filter(workload=archived, kind="updated").count() == 1


@pytest.mark.parametrize(
    ("body", "grows"),
    [
        ({"gpu_count": 8}, "GPUs 4 → 8"),
        ({"min_runtime": "3h"}, "minimum runtime 2h → 3h"),
        ({"max_runtime": "8h"}, "wall-time limit 4h → 8h"),
        ({"max_runtime": None}, "wall-time limit 4h → none"),
        ({"retries": 3}, "retries 2 → 3"),
        ({"cpus": 32}, "CPUs 16 → 32"),
        ({"memory": None}, "memory 64G → default"),
        ({"shared_memory": "16G"}, "shared memory 8G → 16G"),
        ({"gpu_model": "H100", "gpu_count": 2}, "GPU model A100 → H100"),
        ({"gpu_count": 2, "cpus": 64}, "CPUs 16 → 64"),
    ],
)
def test_growing_it_is_refused_and_changes_nothing(researcher_client, archived, body, grows):
    before = _request(archived.pk)
    response = _patch(researcher_client, archived.pk, body)
    assert response.status_code == 400, response.json()
    answer = response.json()
    assert answer["code"] == "budget_archived"
    assert grows in answer["budget"][0] and "nlp/olmo is archived" in answer["budget"][0]
    assert _request(archived.pk) == before
    assert not WorkloadEvent.objects.filter(workload=archived, kind="updated").exists()


def test_hold_release_and_a_move_to_a_live_budget(researcher, researcher_client, archived, org_tree):
    assert researcher_client.post(f"/api/v1/workloads/{archived.pk}/hold/", {}, format="json").status_code == 200
    assert researcher_client.post(f"/api/v1/workloads/{archived.pk}/release/", {}, format="json").status_code == 200
    response = _patch(researcher_client, archived.pk, {"budget": "nlp/tulu", "gpu_count": 8})
    assert response.status_code == 400 and response.json()["code"] == "not_a_member"  # the live budget's own rule
    do_add_membership(researcher, org_tree["nlp/tulu"])
    response = _patch(researcher_client, archived.pk, {"budget": "nlp/tulu", "gpu_count": 8})  # a live budget's
    assert response.status_code == 200, response.json()
    assert (response.json()["budget"], response.json()["gpu_count"]) == ("nlp/tulu", 8)


def test_a_group_in_an_archived_budget_shrinks_too(researcher, researcher_client, submit_kwargs, org_tree):
    first = do_submit_workload(researcher, **submit_kwargs(gpu_count=4), array="0-1")
    do_archive_budget(org_tree["nlp/olmo"])
    group = first.group_id
    assert researcher_client.patch(f"/api/v1/groups/{group}/", {"gpu_count": 8}, format="json").status_code == 400
    response = researcher_client.patch(f"/api/v1/groups/{group}/", {"gpu_count": 2}, format="json")
    assert response.status_code == 200, response.json()
    assert set(Workload.objects.values_list("gpu_count", flat=True)) == {2}


def test_a_new_submission_is_still_refused(researcher_client, submission, archived):
    response = researcher_client.post("/api/v1/workloads/", submission(), format="json")
    assert response.status_code == 400 and response.json()["code"] == "budget_archived"
