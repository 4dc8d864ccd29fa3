"""Live answers match the served OpenAPI schema for the everyday states the fuzzer's fixtures never
reach (tryout35, schemathesis against a day-one server): a user created in the admin without an
email (``me/``'s ``email`` was ``format: email`` and the answer ``""``), a running attempt (its
``end_reason`` and ``stop_reason`` ``""``, outside ``EndReasonEnum``) and an event no person
caused (``actor`` null, typed a plain string). A client generated from the schema refused them."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml
from rest_framework.test import APIClient

from accounts.models import User
from accounts.services import do_add_membership
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable`` as JSON Schema: ``anyOf`` the schema and ``null``."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@pytest.fixture
def openapi() -> dict[str, Any]:
    return yaml.safe_load(APIClient().get("/api/schema/").content)


def _check(openapi: dict[str, Any], path: str, body: Any) -> None:
    answer = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    document = {"components": _json_schema(openapi["components"]), **_json_schema(answer)}
    jsonschema.validate(body, document, format_checker=jsonschema.FormatChecker())


def test_answers_of_a_day_one_user_match_the_schema(openapi, org_tree, cluster, submit_kwargs, api_client_for):
    user = User.objects.create_user(username="noemail", password="pw-12345-long")  # the admin's add form
    do_add_membership(user, org_tree["nlp/olmo"])
    workload = do_submit_workload(user, **submit_kwargs(gpu_count=1))
    run_tick(cluster.pk)
    assert Attempt.objects.get(workload=workload).end_reason == ""
    client = api_client_for(user)

    _check(openapi, "/api/v1/me/", client.get("/api/v1/me/").json())
    detail = client.get(f"/api/v1/workloads/{workload.pk}/").json()
    assert detail["attempts"][0]["end_reason"] == "" and detail["attempts"][0]["stop_reason"] == ""
    assert any(e["actor"] is None for e in detail["events"])  # "placed": the tick's, no person's
    _check(openapi, "/api/v1/workloads/{id}/", detail)
