"""words46: ``fairway resubmit 6 -- echo again`` submitted "#12 sh": the name the old command gave
by default stayed with the new command. A name that was the default follows the new command, as a
submission's default does (``scheduler.api.serializers.default_name``); a name given stays."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Workload


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


def _submit(client: Any, payload: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/workloads/", payload, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _again(client: Any, old: int, body: dict[str, Any]) -> Workload:
    response = client.post(f"/api/v1/workloads/{old}/resubmit/", body, format="json")
    assert response.status_code == 201, response.json()
    return Workload.objects.get(pk=response.json()["id"])


def _unnamed(submission: Any, **fields: Any) -> dict[str, Any]:
    data = submission(env={}, command=["/bin/sh", "-c", "sleep 60"], **fields)
    del data["name"]
    return data


def test_a_default_name_follows_the_new_command(researcher_client, submission):
    old = _submit(researcher_client, _unnamed(submission))
    assert old["name"] == "sh"
    assert _again(researcher_client, old["id"], {"command": ["echo", "again"]}).name == "echo"
    assert _again(researcher_client, old["id"], {"command": "/usr/bin/python3 x.py"}).name == "python3"


def test_a_default_name_stays_without_a_new_command(researcher_client, submission):
    old = _submit(researcher_client, _unnamed(submission))
    assert _again(researcher_client, old["id"], {"gpu_count": 1}).name == "sh"


def test_a_name_given_stays_with_a_new_command(researcher_client, submission):
    old = _submit(researcher_client, submission(env={}))  # named "pretrain"
    assert _again(researcher_client, old["id"], {"command": ["echo", "again"]}).name == "pretrain"
    named_sh = _submit(researcher_client, submission(env={}, name="sh", command=["python", "x.py"]))
    assert _again(researcher_client, named_sh["id"], {"command": ["echo"]}).name == "sh"  # not python's default
    assert _again(researcher_client, old["id"], {"command": ["echo"], "name": "mine"}).name == "mine"


def test_an_array_members_default_name_follows_the_new_command(researcher_client, submission):
    first = _submit(researcher_client, _unnamed(submission, gpu_count=1, array="0-3"))
    member = Workload.objects.get(group_id=first["group"], array_index=2)
    assert member.name == "sh[2]"
    assert _again(researcher_client, member.pk, {"command": ["echo", "again"]}).name == "echo[2]"
