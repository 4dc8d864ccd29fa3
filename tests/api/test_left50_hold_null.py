"""left50: ``hold: null`` was refused ("This field may not be null.") in a submission, a spec and a
resubmission's overrides, and in a PATCH (``not_updatable``), where the API reads ``null`` as "not
given" everywhere else (in49: ``mounts``, ``after``, ``array``, ``retries``). Now it is "not given"
everywhere: a submission is not held (as without the key), a PATCH changes no hold; ``true`` and
``false`` in a PATCH are still refused ``not_updatable`` (hold and release have their actions).
docs/jobs.md "Hold and release"."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Workload

URL = "/api/v1/workloads/"


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


def test_a_submission_with_hold_null_is_not_held(researcher_client, submission):
    r = researcher_client.post(URL, submission(hold=None), format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["hold"] == "" and Workload.objects.get(pk=r.json()["id"]).hold == ""


def test_a_resubmission_with_hold_null_is_not_held(researcher_client, submission):
    old = researcher_client.post(URL, submission(hold=True), format="json").json()
    r = researcher_client.post(f"{URL}{old['id']}/resubmit/", {"hold": None}, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["hold"] == ""


def test_a_patch_with_hold_null_changes_no_hold(researcher_client, submission):
    held = researcher_client.post(URL, submission(hold=True), format="json").json()
    r = researcher_client.patch(f"{URL}{held['id']}/", {"hold": None, "gpu_count": 2}, format="json")
    assert r.status_code == 200, r.json()
    row = Workload.objects.get(pk=held["id"])
    assert (row.hold, row.gpu_count) == ("user", 2)
    r = researcher_client.patch(f"{URL}{held['id']}/", {"hold": None}, format="json")
    assert r.status_code == 200, r.json()
    assert Workload.objects.get(pk=held["id"]).hold == "user"


@pytest.mark.parametrize("value", [True, False])
def test_a_patch_with_a_hold_value_is_still_refused(researcher_client, submission, value):
    w = researcher_client.post(URL, submission(), format="json").json()
    r = researcher_client.patch(f"{URL}{w['id']}/", {"hold": value, "gpu_count": 2}, format="json")
    assert r.status_code == 400 and r.json()["code"] == "not_updatable", r.json()
    row = Workload.objects.get(pk=w["id"])
    assert (row.hold, row.gpu_count) == ("", 4)


def test_a_group_patch_with_hold_null_changes_no_hold(researcher_client, submission):
    sub = researcher_client.post(URL, submission(array="0-1", gpu_count=1), format="json").json()
    r = researcher_client.patch(f"/api/v1/groups/{sub['group']}/", {"hold": None, "gpu_count": 2}, format="json")
    assert r.status_code == 200, r.json()
    assert r.json()["updated"] == 2
