"""Job options in the API (docs/jobs.md): submit fields, their errors, array groups, notification
settings, the mount catalog on clusters, and the OpenAPI schema."""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from scheduler.models import Mount, Workload


def _submit(client, payload):
    return client.post("/api/v1/workloads/", payload, format="json")


@pytest.fixture
def datasets(cluster):
    return Mount.objects.create(cluster=cluster, name="datasets", host_path="/data/sets", container_path="/datasets")


def test_an_array_with_options_is_submitted_and_listed_as_a_group(
    researcher_client, teammate_client, outsider_client, submission, datasets
):
    response = _submit(
        researcher_client,
        submission(mounts=["datasets"], max_runtime="3h", retries=2, array="0-2%1", gpu_count=1),
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["mounts"] == [
        {"name": "datasets", "host_path": "/data/sets", "container_path": "/datasets", "read_only": True}
    ]
    assert (body["max_runtime_s"], body["retries"], body["retries_used"]) == (3 * 3600, 2, 0)
    assert body["group"] and body["array_index"] == 0

    group = researcher_client.get(f"/api/v1/groups/{body['group']}/").json()
    assert (group["spec"], group["limit"], group["states"]) == ("0-2%1", 1, {"pending": 3})
    listed = researcher_client.get("/api/v1/workloads/", {"group": body["group"]}).json()
    assert sorted(w["array_index"] for w in listed["results"]) == [0, 1, 2]

    # host paths are private like env values: members of the budget see them, others do not
    assert "host_path" in teammate_client.get(f"/api/v1/workloads/{body['id']}/").json()["mounts"][0]
    outside = outsider_client.get(f"/api/v1/workloads/{body['id']}/").json()["mounts"][0]
    assert outside == {"name": "datasets", "container_path": "/datasets", "read_only": True}


def test_an_array_submission_answers_with_every_member(researcher_client, submission, cluster):
    """tryout: the answer to an array submission named only its first member (the CLI printed
    "submitted #964 sweep[0]" for 4 members); ``array`` lists what the submission created."""
    body = _submit(researcher_client, submission(name="sweep", array="0-3%2", gpu_count=1)).json()
    ids = list(Workload.objects.order_by("array_index").values_list("pk", flat=True))
    assert body["id"] == ids[0] and body["name"] == "sweep[0]"
    assert body["array"] == {
        "group": body["group"],
        "name": "sweep",
        "spec": "0-3%2",
        "limit": 2,
        "count": 4,
        "members": ids,
        "indices": [0, 1, 2, 3],
    }
    single = _submit(researcher_client, submission(gpu_count=1)).json()
    assert single["array"] is None and single["group"] is None
    assert "array" not in researcher_client.get(f"/api/v1/workloads/{body['id']}/").json()  # the answer only


def test_only_the_owner_or_a_manager_cancels_a_group(researcher_client, outsider_client, submission, cluster):
    body = _submit(researcher_client, submission(array="0-1", gpu_count=1)).json()
    refused = outsider_client.post(f"/api/v1/groups/{body['group']}/cancel/")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    done = researcher_client.post(f"/api/v1/groups/{body['group']}/cancel/")
    assert done.json() == {"group": body["group"], "canceled": 2, "members": body["array"]["members"], "changed": True}
    assert set(Workload.objects.values_list("state", flat=True)) == {"canceled"}


def test_a_foreign_group_whose_members_all_finished_is_refused_too(
    researcher_client, outsider_client, submission, cluster
):
    """tryout: cancelling someone else's finished group answered 200 "0 canceled"; the same
    permission as a group with live members decides (403), and its owner still gets 200 with 0."""
    body = _submit(researcher_client, submission(array="0-1", gpu_count=1)).json()
    Workload.objects.update(state=Workload.State.SUCCEEDED)
    refused = outsider_client.post(f"/api/v1/groups/{body['group']}/cancel/")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    done = researcher_client.post(f"/api/v1/groups/{body['group']}/cancel/")
    assert done.status_code == 200 and done.json() == {
        "group": body["group"],
        "canceled": 0,
        "members": [],
        "changed": False,
    }


@pytest.mark.parametrize(
    ("overrides", "field", "code"),
    [
        ({"max_runtime": "1h"}, "max_runtime", "max_runtime_below_min_runtime"),
        ({"max_runtime": "soon"}, "max_runtime", "invalid_max_runtime"),
        ({"max_runtime": "30d"}, "max_runtime", "max_runtime_too_long"),
        ({"retries": 99}, "retries", "invalid_retries"),
        ({"mounts": ["nope"]}, "mounts", "invalid_mount"),
        ({"array": "9-1"}, "array", "invalid_array"),
        ({"after": "abc"}, "after", "invalid_after"),
        ({"after": ["123456"]}, "after", "invalid_after"),
    ],
)
def test_bad_job_options_are_400_with_their_field(researcher_client, submission, cluster, overrides, field, code):
    response = _submit(researcher_client, submission(**overrides))
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == code and body[field]
    assert Workload.objects.count() == 0


def test_after_is_shown_with_the_state_it_waits_for(researcher_client, submission, cluster):
    first = _submit(researcher_client, submission()).json()
    second = _submit(researcher_client, submission(after=f"{first['id']}:any")).json()
    assert second["after"] == [{"workload": first["id"], "condition": "any", "state": "pending"}]


def test_notification_settings_are_the_requesters_own_and_validated(researcher_client, outsider_client, db):
    assert researcher_client.get("/api/v1/notifications/").json() == {
        "email_kinds": [],
        "webhook_kinds": [],
        "webhook_url": "",
    }
    saved = researcher_client.put(
        "/api/v1/notifications/", {"email_kinds": ["failed", "started"], "webhook_kinds": []}, format="json"
    )
    assert saved.status_code == 200 and saved.json()["email_kinds"] == ["started", "failed"]
    assert outsider_client.get("/api/v1/notifications/").json()["email_kinds"] == []
    bad_kind = researcher_client.put("/api/v1/notifications/", {"email_kinds": ["exploded"]}, format="json")
    assert bad_kind.status_code == 400 and bad_kind.json()["code"] == "invalid_kind"
    local = researcher_client.put("/api/v1/notifications/", {"webhook_url": "http://127.0.0.1:8000/x"}, format="json")
    assert local.status_code == 400 and local.json()["code"] == "invalid_webhook"


def test_clusters_list_their_mount_catalog_without_host_paths(researcher_client, datasets):
    (c,) = researcher_client.get("/api/v1/clusters/").json()["results"]
    assert c["mounts"] == [
        {"name": "datasets", "container_path": "/datasets", "read_only": True, "access": "all", "description": ""}
    ]


def test_the_schema_describes_the_job_options(db):
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    assert {"/api/v1/groups/", "/api/v1/groups/{id}/", "/api/v1/groups/{id}/cancel/", "/api/v1/notifications/"} <= set(
        schema["paths"]
    )
    submit = schema["components"]["schemas"]["WorkloadSubmitRequest"]["properties"]
    assert {"mounts", "max_runtime", "retries", "after", "array"} <= set(submit)
    detail = schema["components"]["schemas"]["WorkloadDetail"]["properties"]
    assert {"mounts", "max_runtime_s", "retries", "retries_used", "after", "group", "array_index"} <= set(detail)
    submitted = schema["components"]["schemas"]["WorkloadSubmitted"]["properties"]
    assert set(detail) < set(submitted) and "array" in submitted


@pytest.mark.parametrize("body", [{"email": "x"}, {"unknown": 1}, {"email_kinds": ["failed"], "emails": ["started"]}])
def test_notification_settings_refuse_an_unknown_field(researcher_client, db, body):
    """tryout: ``PUT {"email": "x"}`` answered 200 and changed nothing; refused like a
    submission's unknown field (the same rule), naming the field."""
    response = researcher_client.put("/api/v1/notifications/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    data = response.json()
    assert data["code"] == "unknown_field"
    (name,) = set(body) - {"email_kinds"}
    assert "email_kinds" in data[name][0]
    assert researcher_client.get("/api/v1/notifications/").json()["email_kinds"] == []


def test_webhook_kinds_without_a_url_are_refused(researcher_client, db, settings):
    """tryout: webhook kinds were saved with no URL (the CLI then printed "webhook: - -> (no URL)")."""
    bare = researcher_client.put("/api/v1/notifications/", {"webhook_kinds": ["failed"]}, format="json")
    assert bare.status_code == 400 and bare.json()["code"] == "webhook_url_required"
    assert "webhook URL" in bare.json()["webhook_url"][0]
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["hooks.example"]}
    url = researcher_client.put("/api/v1/notifications/", {"webhook_url": "https://hooks.example/x"}, format="json")
    assert url.status_code == 200
    kinds = researcher_client.put("/api/v1/notifications/", {"webhook_kinds": ["failed"]}, format="json")
    assert kinds.status_code == 200 and kinds.json()["webhook_kinds"] == ["failed"]  # the saved URL counts
    removed = researcher_client.put("/api/v1/notifications/", {"webhook_url": ""}, format="json")
    assert removed.status_code == 400 and removed.json()["code"] == "webhook_url_required"


def test_an_array_member_waiting_on_its_limit_names_the_limit(researcher_client, submission, cluster):
    """tryout: the words said "its %N limit" literally (and "runs 1 members")."""
    from scheduler.tick import run_tick

    body = _submit(researcher_client, submission(array="0-2%1", gpu_count=1)).json()
    run_tick(cluster.pk)
    waiting = [
        w
        for w in researcher_client.get("/api/v1/workloads/", {"group": body["group"]}).json()["results"]
        if w["pending_reason"] == "dependency"
    ]
    assert waiting
    detail = researcher_client.get(f"/api/v1/workloads/{waiting[0]['id']}/").json()
    assert detail["why_pending"][0] == (
        "Its array group already runs 1 member, its limit (%1): it starts when one of them ends."
    )
