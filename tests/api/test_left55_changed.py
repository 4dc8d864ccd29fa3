"""left55: every answer of an action that may change nothing says whether it changed anything,
``changed``, as ``PATCH workloads/{id}/`` does (left52): a workload's release (as its hold,
left53) and a group's update, hold, release and cancel (one shape with it: left50)."""

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


def test_a_release_says_it_changed_the_workload(researcher_client, submission):
    pk = researcher_client.post(URL, submission(hold=True), format="json").json()["id"]
    body = researcher_client.post(f"{URL}{pk}/release/").json()
    assert (body["hold"], body["changed"]) == ("", True)


def test_a_groups_actions_say_whether_they_changed_anything(researcher_client, submission):
    created = researcher_client.post(URL, submission(array="0-1", gpu_count=1), format="json").json()
    group, members = created["group"], created["array"]["members"]
    at = f"/api/v1/groups/{group}/"

    def answer(method: str, path: str, **body: Any) -> dict[str, Any]:
        r = getattr(researcher_client, method)(f"{at}{path}", body, format="json")
        assert r.status_code == 200, r.json()
        return r.json()

    assert answer("patch", "", gpu_count=2) == {"group": group, "updated": 2, "members": members, "changed": True}
    assert answer("patch", "", gpu_count=2) == {"group": group, "updated": 0, "members": [], "changed": False}
    assert answer("post", "release/") == {"group": group, "released": 0, "members": [], "changed": False}
    assert answer("post", "hold/") == {"group": group, "held": 2, "members": members, "changed": True}
    assert answer("post", "hold/") == {"group": group, "held": 0, "members": [], "changed": False}
    assert answer("post", "release/") == {"group": group, "released": 2, "members": members, "changed": True}
    assert answer("post", "cancel/") == {"group": group, "canceled": 2, "members": members, "changed": True}
    assert answer("post", "cancel/") == {"group": group, "canceled": 0, "members": [], "changed": False}
    assert set(Workload.objects.values_list("state", flat=True)) == {"canceled"}


def test_the_schema_describes_changed_in_every_such_answer(db):
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)

    def properties(path: str, method: str = "post") -> set[str]:
        ok = schema["paths"][path][method]["responses"]["200"]
        ref = ok["content"]["application/json"]["schema"]["$ref"]
        return set(schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"])

    for path, method in [
        ("/api/v1/workloads/{id}/", "patch"),
        ("/api/v1/workloads/{id}/hold/", "post"),
        ("/api/v1/workloads/{id}/release/", "post"),
        ("/api/v1/groups/{id}/", "patch"),
        ("/api/v1/groups/{id}/hold/", "post"),
        ("/api/v1/groups/{id}/release/", "post"),
        ("/api/v1/groups/{id}/cancel/", "post"),
    ]:
        assert "changed" in properties(path, method), path
