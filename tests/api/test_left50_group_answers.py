"""left50: a group's cancel answered ``{"group", "canceled"}`` while its hold, release and update
answer ``{"group", <what was done>, "members"}`` (the ids changed). One shape now: the cancel keeps
``canceled`` (the count: ``fairway cancel --group`` reads it) and adds ``members``; the schema
describes each answer (docs/jobs.md)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from scheduler.models import Workload

URL = "/api/v1/workloads/"


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


def _group(client: Any, submission: Any) -> tuple[int, list[int]]:
    body = client.post(URL, submission(array="0-2", gpu_count=1), format="json").json()
    return body["group"], body["array"]["members"]


def test_every_group_action_answers_one_shape(researcher_client, submission):
    group, members = _group(researcher_client, submission)
    Workload.objects.filter(pk=members[2]).update(state=Workload.State.SUCCEEDED)  # final: no action takes it
    live = members[:2]
    answers = {
        "updated": researcher_client.patch(f"/api/v1/groups/{group}/", {"gpu_count": 2}, format="json"),
        "held": researcher_client.post(f"/api/v1/groups/{group}/hold/"),
        "released": researcher_client.post(f"/api/v1/groups/{group}/release/"),
        "canceled": researcher_client.post(f"/api/v1/groups/{group}/cancel/"),
    }
    for done, r in answers.items():
        assert r.status_code == 200, (done, r.json())
        assert r.json() == {"group": group, done: 2, "members": live, "changed": True}, done


def test_the_schema_describes_the_group_cancel_as_the_others(db):
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)

    def properties(path: str, method: str = "post") -> set[str]:
        ok = schema["paths"][path][method]["responses"]["200"]
        ref = ok["content"]["application/json"]["schema"]["$ref"]
        return set(schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"])

    assert properties("/api/v1/groups/{id}/cancel/") == {"group", "canceled", "members", "changed"}
    assert properties("/api/v1/groups/{id}/hold/") == {"group", "held", "members", "changed"}
    assert properties("/api/v1/groups/{id}/", "patch") == {"group", "updated", "members", "changed"}
