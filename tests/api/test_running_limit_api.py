"""ext50: ``PATCH /api/v1/workloads/{id}/`` with ``max_runtime`` on a running workload (Slurm's
``scontrol update TimeLimit=``): lowered by its owner or a budget manager, raised or removed only by
an admin, clear codes, every other field 409 ``not_pending`` as before; the schema says so."""

from __future__ import annotations

import pytest
import yaml
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler import lifecycle
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick

HOUR = 3600


@pytest.fixture
def running(researcher, submit_kwargs) -> Workload:
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR))
    run_tick(w.cluster_id)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=timezone.now())
    return Workload.objects.get(pk=w.pk)


def _patch(client, pk: int, body: dict):
    return client.patch(f"/api/v1/workloads/{pk}/", body, format="json")


def _unchanged(w: Workload) -> None:
    row = Workload.objects.get(pk=w.pk)
    assert (row.max_runtime_s, row.spec_version, row.state) == (w.max_runtime_s, w.spec_version, w.state)
    assert not WorkloadEvent.objects.filter(workload=w, kind="updated").exists()


def test_the_owner_lowers_the_limit_of_a_running_workload(researcher_client, running) -> None:
    r = _patch(researcher_client, running.pk, {"max_runtime": "3h"})

    assert r.status_code == 200, r.json()
    body = r.json()
    assert (body["state"], body["max_runtime_s"]) == ("running", 3 * HOUR)
    updated = [e for e in body["events"] if e["kind"] == "updated"]
    assert updated and updated[0]["message"] == "changed wall-time limit 4h → 3h"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"max_runtime": "30m"}, 400, "max_runtime_below_min_runtime"),
        ({"max_runtime": "5h"}, 403, "raise_needs_admin"),
        ({"max_runtime": None}, 403, "raise_needs_admin"),
        ({"max_runtime": "999d"}, 400, "max_runtime_too_long"),
        ({"max_runtime": "soon"}, 400, "invalid_max_runtime"),
        ({"gpu_count": 2}, 409, "not_pending"),
        ({"max_runtime": "2h", "name": "x"}, 409, "not_pending"),
        ({"image": "other:1"}, 400, "not_updatable"),
    ],
)
def test_what_the_owner_may_not_do_is_refused_with_a_code_and_changes_nothing(
    researcher_client, running, body, status, code
) -> None:
    r = _patch(researcher_client, running.pk, body)

    assert (r.status_code, r.json()["code"]) == (status, code), r.json()
    _unchanged(running)


def test_an_admin_raises_and_removes_it(admin_client_api, running) -> None:
    r = _patch(admin_client_api, running.pk, {"max_runtime": "6h"})
    assert (r.status_code, r.json()["max_runtime_s"]) == (200, 6 * HOUR), r.json()
    r = _patch(admin_client_api, running.pk, {"max_runtime": None})
    assert (r.status_code, r.json()["max_runtime_s"]) == (200, None), r.json()
    assert list(
        WorkloadEvent.objects.filter(workload=running, kind="updated").order_by("pk").values_list("data", flat=True)
    ) == [
        {"changes": {"max_runtime_s": [4 * HOUR, 6 * HOUR]}, "state": "running"},
        {"changes": {"max_runtime_s": [6 * HOUR, None]}, "state": "running"},
    ]


def test_a_manager_lowers_it_and_others_are_forbidden(manager_client, teammate_client, outsider_client, running):
    for client in (teammate_client, outsider_client):
        r = _patch(client, running.pk, {"max_runtime": "2h"})
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    _unchanged(running)
    r = _patch(manager_client, running.pk, {"max_runtime": "2h"})
    assert r.status_code == 200, r.json()


def test_the_schema_documents_the_running_limit(db) -> None:
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    patch = schema["paths"]["/api/v1/workloads/{id}/"]["patch"]
    assert "raise_needs_admin" in patch["description"]
    assert "max_runtime_below_min_runtime" in patch["description"]
