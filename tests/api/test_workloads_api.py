"""The workload API: submission, errors, queue transparency, env hiding, cancel."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.services import create_api_token
from scheduler.models import Workload
from scheduler.services import do_submit_workload

URL = "/api/v1/workloads/"


def _submit(client, payload):
    return client.post(URL, payload, format="json")


def test_researcher_submits_a_workload(researcher_client, submission, cluster, researcher):
    response = _submit(researcher_client, submission())

    assert response.status_code == 201, response.json()
    body = response.json()
    workload = Workload.objects.get()
    assert body["id"] == workload.pk
    assert body["seq"] == workload.pk
    assert (body["budget"], body["cluster"], body["owner"]) == ("nlp/olmo", "default", "researcher")
    assert (body["gpu_model"], body["gpu_count"], body["min_runtime_s"]) == ("A100", 4, 7200)
    assert body["state"] == "pending"
    assert body["env"] == {
        "HF_TOKEN": {"value": "********", "secret": True},
        "WANDB_PROJECT": {"value": "olmo", "secret": False},
    }
    assert [e["kind"] for e in body["events"]] == ["submitted"]
    assert body["attempts"] == []
    assert body["can_cancel"] is True
    assert workload.env["HF_TOKEN"] == {"value": "hf_secret", "secret": True}


def test_command_string_is_split_like_a_shell_and_duration_parsed(researcher_client, submission, cluster):
    response = _submit(
        researcher_client, submission(command="python train.py --msg 'hello world'", min_runtime="1h30m", name=None)
    )
    assert response.status_code == 201, response.json()
    workload = Workload.objects.get()
    assert workload.command == ["python", "train.py", "--msg", "hello world"]
    assert workload.min_runtime_s == 5400


def test_name_defaults_to_the_program(researcher_client, submission, cluster):
    payload = submission(command=["/usr/bin/python3", "x.py"])
    del payload["name"]
    assert _submit(researcher_client, payload).json()["name"] == "python3"


@pytest.mark.parametrize(
    ("overrides", "field", "code"),
    [
        ({"budget": "nlp/nope"}, "budget", "unknown_budget"),
        ({"budget": "nlp"}, "budget", "not_a_member"),
        ({"cluster": "nowhere"}, "cluster", "unknown_cluster"),
        ({"gpu_model": "V100"}, "gpu_model", "unknown_model"),
        ({"gpu_count": 12}, "gpu_count", "too_many_gpus"),
        ({"gpu_count": 24}, "gpu_count", "too_many_gpus"),
        ({"gpu_count": 0}, "gpu_count", "invalid_gpu_count"),
        ({"gpu_count": "many"}, "gpu_count", "invalid_gpu_count"),
        ({"min_runtime": -5}, "min_runtime", "invalid_min_runtime"),
        ({"min_runtime": "soon"}, "min_runtime", "invalid_min_runtime"),
        ({"min_runtime": "25h"}, "min_runtime", "min_runtime_too_long"),
        ({"command": []}, "command", "invalid_command"),
        ({"command": ""}, "command", "invalid_command"),
        ({"command": "python 'unclosed"}, "command", "invalid_command"),
        ({"env": {"FAIRWAY_X": "1"}}, "env", "invalid_env"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env", "invalid_env"),
        ({"env": "A=1"}, "env", "invalid_env"),
        ({"name": ""}, "name", "invalid_name"),
    ],
)
def test_invalid_submission_returns_400_with_field_and_creates_nothing(
    researcher_client, submission, cluster, overrides, field, code
):
    response = _submit(researcher_client, submission(**overrides))

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == code
    assert isinstance(body[field], list) and body[field]
    assert all(isinstance(message, str) for message in body[field])
    assert Workload.objects.count() == 0


def test_missing_required_fields_are_all_reported(researcher_client, cluster):
    response = _submit(researcher_client, {"name": "x"})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "required"
    assert {"gpu_count", "command", "min_runtime"} <= set(body)
    assert "budget" not in body  # num42: optional, the requester's one submit budget (the service's rule)
    assert Workload.objects.count() == 0


def test_outsider_cannot_submit_to_foreign_budget(outsider_client, submission, cluster):
    response = _submit(outsider_client, submission())
    assert response.status_code == 400
    assert response.json() == {"budget": [response.json()["budget"][0]], "code": "not_a_member"}
    assert Workload.objects.count() == 0


def test_anonymous_request_is_refused(api_client_for, submission, cluster):
    response = _submit(api_client_for(None), submission())
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert Workload.objects.count() == 0


@pytest.fixture
def olmo_workload(researcher, submit_kwargs) -> Workload:
    return do_submit_workload(
        researcher,
        **submit_kwargs(env={"WANDB_PROJECT": "olmo", "HF_TOKEN": {"value": "hf_secret", "secret": True}}),
    )


def test_outsider_sees_the_queue_but_not_the_env(outsider_client, olmo_workload):
    listing = outsider_client.get(URL).json()
    assert [row["id"] for row in listing["results"]] == [olmo_workload.pk]
    assert listing["results"][0]["budget"] == "nlp/olmo"
    assert listing["results"][0]["gpu_count"] == 4

    detail = outsider_client.get(f"{URL}{olmo_workload.pk}/").json()
    assert (detail["name"], detail["state"], detail["gpu_count"]) == ("pretrain", "pending", 4)
    assert detail["env"] is None
    assert detail["env_visible"] is False
    assert detail["can_cancel"] is False
    assert "hf_secret" not in str(detail)


def test_teammate_sees_env_values_but_never_secrets(teammate_client, olmo_workload):
    detail = teammate_client.get(f"{URL}{olmo_workload.pk}/").json()
    assert detail["env"] == {
        "HF_TOKEN": {"value": "********", "secret": True},
        "WANDB_PROJECT": {"value": "olmo", "secret": False},
    }


def test_list_filters(researcher_client, olmo_workload, outsider, submit_kwargs, org_tree):
    other = do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=1))

    def ids(query: str) -> list[int]:
        response = researcher_client.get(f"{URL}?{query}")
        assert response.status_code == 200
        return [row["id"] for row in response.json()["results"]]

    assert ids("budget=nlp") == [olmo_workload.pk]
    assert ids("budget=vision/sam") == [other.pk]
    assert ids("owner=outsider") == [other.pk]
    assert ids("owner=me") == [olmo_workload.pk]
    assert ids("cluster=default") == [other.pk, olmo_workload.pk]
    assert ids("state=pending,running") == [other.pk, olmo_workload.pk]
    assert ids("state=running") == []
    # An unknown budget is a 400 naming it, not an empty list (tryout24; test_malformed_input.py).
    assert researcher_client.get(f"{URL}?budget=unknown").status_code == 400


def test_list_is_paginated_with_constant_queries(
    researcher_client, researcher, submit_kwargs, django_assert_max_num_queries
):
    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs())
    with django_assert_max_num_queries(8) as captured:
        body = researcher_client.get(f"{URL}?limit=2").json()
    few = len(captured.captured_queries)
    assert body["count"] == 3
    assert len(body["results"]) == 2
    assert body["next"] is not None
    for _ in range(20):
        do_submit_workload(researcher, **submit_kwargs())
    with django_assert_max_num_queries(few):
        researcher_client.get(f"{URL}?limit=50")


def test_cancel_pending_workload(researcher_client, olmo_workload):
    response = researcher_client.post(f"{URL}{olmo_workload.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "canceled"
    olmo_workload.refresh_from_db()
    assert olmo_workload.state == Workload.State.CANCELED


def test_manager_may_cancel_a_members_workload(manager_client, olmo_workload):
    assert manager_client.post(f"{URL}{olmo_workload.pk}/cancel/").status_code == 200


def test_outsider_cannot_cancel(outsider_client, olmo_workload):
    response = outsider_client.post(f"{URL}{olmo_workload.pk}/cancel/")
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    olmo_workload.refresh_from_db()
    assert olmo_workload.state == Workload.State.PENDING


def test_cancel_of_canceled_workload_is_a_conflict(researcher_client, olmo_workload):
    researcher_client.post(f"{URL}{olmo_workload.pk}/cancel/")
    response = researcher_client.post(f"{URL}{olmo_workload.pk}/cancel/")
    assert response.status_code == 409
    assert response.json()["code"] == "already_final"


def test_unknown_workload_is_404_in_the_error_format(researcher_client, db):
    response = researcher_client.get(f"{URL}999999/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_clusters_list_their_hardware(researcher_client, cluster):
    body = researcher_client.get("/api/v1/clusters/").json()
    assert body["results"][0]["name"] == "default"
    assert body["results"][0]["models"] == {
        "A100": {"hosts": 2, "gpus": 16, "largest_host": 8},
        "H100": {"hosts": 1, "gpus": 4, "largest_host": 4},
    }


def test_submission_and_detail_use_a_bounded_number_of_queries(
    researcher_client, submission, cluster, django_assert_max_num_queries
):
    with django_assert_max_num_queries(20):
        response = researcher_client.post(URL, submission(), format="json")
    assert response.status_code == 201
    with django_assert_max_num_queries(9):
        assert researcher_client.get(f"{URL}{response.json()['id']}/").status_code == 200


def test_a_request_without_a_usable_token_is_told_how_to_authenticate(api_client_for, researcher):
    # A first-time user's GET /api/v1/ answered only "Authentication credentials were not
    # provided.", and the same when they had sent the usual guess, 'Authorization: Bearer <token>'.
    anonymous = api_client_for(None).get("/api/v1/")
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "not_authenticated"
    assert "'Authorization: Token <token>'" in anonymous.json()["detail"]
    assert "POST /api/v1/auth/login/" in anonymous.json()["detail"]
    _instance, token = create_api_token(researcher)
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    refused = bearer.get("/api/v1/")
    assert refused.status_code == 401
    assert refused.json()["detail"].startswith("Authorization scheme 'Bearer' is not accepted.")
    assert "'Authorization: Token <token>'" in refused.json()["detail"]


def test_a_list_filtered_by_a_leaf_name_names_the_path_to_type(api_client_for, researcher, org_tree):
    # `fairway ls --budget olmo` / ?budget=olmo: the 400 said only "No budget 'olmo'."
    response = api_client_for(researcher).get(URL, {"budget": "olmo"})
    assert response.status_code == 400
    assert "did you mean nlp/olmo?" in response.json()["budget"][0]
