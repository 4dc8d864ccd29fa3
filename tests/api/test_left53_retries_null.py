"""left53: ``retries: null`` is 0 (no re-runs) in a submission and a resubmission's overrides, but a
PATCH refused it. One rule now, as ``max_runtime: null`` is "no limit" in all three: null is none,
0 retries."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Workload

URL = "/api/v1/workloads/"


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


def test_retries_null_is_zero_in_a_patch_as_in_a_resubmission(researcher_client, submission):
    w = researcher_client.post(URL, submission(retries=3), format="json").json()
    again = researcher_client.post(f"{URL}{w['id']}/resubmit/", {"retries": None}, format="json")
    assert again.status_code == 201, again.json()
    assert Workload.objects.get(pk=again.json()["id"]).retries == 0
    r = researcher_client.patch(f"{URL}{w['id']}/", {"retries": None}, format="json")
    assert r.status_code == 200, r.json()
    assert Workload.objects.get(pk=w["id"]).retries == 0


def test_retries_null_in_a_submission_is_zero(researcher_client, submission):
    r = researcher_client.post(URL, submission(retries=None), format="json")
    assert r.status_code == 201, r.json()
    assert Workload.objects.get(pk=r.json()["id"]).retries == 0
