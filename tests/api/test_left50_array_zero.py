"""left50: ``array: 0`` in a resubmission's overrides is read as index 0, as in a submission: one
rule (``scheduler.jobspec``: an integer ``array`` is its index's spec, ``7`` is ``"7"``; only
``null`` or absent is none), which a resubmission reaches through the same parser. Not a falsy
"none" (in49 refused the falsy values of the wrong type; ``0`` is of the right type)."""

from __future__ import annotations

from typing import Any

import pytest

URL = "/api/v1/workloads/"


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


def _made(body: dict[str, Any]) -> tuple[Any, ...]:
    return body["name"], body["array_index"], body["array"]["spec"], body["array"]["count"]


@pytest.mark.parametrize("value", [0, "0"])
def test_array_zero_is_index_zero_in_a_submission_and_a_resubmission_alike(researcher_client, submission, value):
    submitted = researcher_client.post(URL, submission(array=value), format="json")
    assert submitted.status_code == 201, submitted.json()
    plain = researcher_client.post(URL, submission(), format="json").json()
    again = researcher_client.post(f"{URL}{plain['id']}/resubmit/", {"array": value}, format="json")
    assert again.status_code == 201, again.json()

    assert _made(submitted.json()) == _made(again.json()) == ("pretrain[0]", 0, "0", 1)


def test_array_null_in_a_resubmission_is_no_array(researcher_client, submission):
    member = researcher_client.post(URL, submission(array="3"), format="json").json()
    again = researcher_client.post(f"{URL}{member['id']}/resubmit/", {"array": None}, format="json")
    assert again.status_code == 201, again.json()
    assert (again.json()["name"], again.json()["array_index"], again.json()["array"]) == ("pretrain", None, None)
