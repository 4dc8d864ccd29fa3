"""brk45: "Submit again" attacked (docs/jobs.md "Submit again"). An ``env`` override that is no
mapping is refused as a submission's (``[]`` emptied the whole env, secrets and all, without a
word), and ``env: null`` clears the env as ``null`` clears any optional field (it kept every
variable, so another member who dropped the env was still asked for the owner's secret)."""

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


@pytest.mark.parametrize("env", [[], "", 0, False])
def test_an_env_that_is_no_mapping_is_refused_and_nothing_is_created(researcher_client, submission, env):
    old = _submit(researcher_client, submission())
    before = Workload.objects.count()
    again = researcher_client.post(f"/api/v1/workloads/{old['id']}/resubmit/", {"env": env}, format="json")
    assert again.status_code == 400 and again.json()["code"] == "invalid_env", again.json()
    plain = researcher_client.post("/api/v1/workloads/", submission(env=env), format="json")
    assert plain.status_code == 400 and plain.json()["code"] == "invalid_env", plain.json()
    assert Workload.objects.count() == before


def test_env_null_clears_the_env_for_anyone(researcher_client, teammate_client, submission):
    old = _submit(researcher_client, submission())
    for client in (researcher_client, teammate_client):
        again = client.post(f"/api/v1/workloads/{old['id']}/resubmit/", {"env": None}, format="json")
        assert again.status_code == 201, again.json()
        assert Workload.objects.get(pk=again.json()["id"]).env == {}
