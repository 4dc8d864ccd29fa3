"""in49: falsy values of the wrong type for ``mounts``, ``after``, ``array`` and ``retries``
(``{}``, ``""``, ``0``, ``false``) were read as "none given" by the parser's ``or`` defaults and
accepted silently. Not given is absent or ``null`` (``retries: 0`` is a real value); the rest is
refused with the field's code and nothing is created (docs/jobs.md)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Workload


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


CASES = [
    ("mounts", {}, "invalid_mount"),
    ("mounts", "", "invalid_mount"),
    ("mounts", 0, "invalid_mount"),
    ("mounts", False, "invalid_mount"),
    ("after", {}, "invalid_after"),
    ("after", "", "invalid_after"),
    ("after", " , ", "invalid_after"),
    ("after", 0, "invalid_after"),
    ("after", False, "invalid_after"),
    ("array", {}, "invalid_array"),
    ("array", "", "invalid_array"),
    ("array", False, "invalid_array"),
    ("array", [], "invalid_array"),
    ("retries", {}, "invalid_retries"),
    ("retries", "", "invalid_retries"),
    ("retries", False, "invalid_retries"),
    ("retries", [], "invalid_retries"),
]


@pytest.mark.parametrize(("field", "value", "code"), CASES)
def test_a_falsy_value_of_the_wrong_type_is_refused(researcher_client, submission, field, value, code):
    before = Workload.objects.count()
    response = researcher_client.post("/api/v1/workloads/", submission(**{field: value}), format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == code, response.json()
    assert field in str(response.json()), response.json()
    assert Workload.objects.count() == before


@pytest.mark.parametrize("field", ["mounts", "after", "array", "retries"])
def test_null_is_not_given(researcher_client, submission, field):
    response = researcher_client.post("/api/v1/workloads/", submission(**{field: None}), format="json")
    assert response.status_code == 201, response.json()


def test_retries_zero_is_a_real_value(researcher_client, submission):
    response = researcher_client.post("/api/v1/workloads/", submission(retries=0), format="json")
    assert response.status_code == 201, response.json()
    assert Workload.objects.get(pk=response.json()["id"]).retries == 0


@pytest.mark.parametrize(("field", "value", "code"), [c for c in CASES if c[1] in ({}, "", False)])
def test_resubmit_refuses_them_too(researcher_client, submission, field, value, code):
    old = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()
    before = Workload.objects.count()
    again = researcher_client.post(f"/api/v1/workloads/{old['id']}/resubmit/", {field: value}, format="json")
    assert again.status_code == 400 and again.json()["code"] == code, again.json()
    assert Workload.objects.count() == before
