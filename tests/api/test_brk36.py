"""Break session 36: inputs a researcher writes that were refused or taken wrongly."""

from __future__ import annotations

import json

import pytest

from scheduler.models import Workload


@pytest.mark.parametrize(("text", "seconds"), [("1.1h", 3960), ("2.3h", 8280), ("1h 2.5m", 3750), ("0.7m", 42)])
def test_a_decimal_duration_of_whole_seconds_is_taken(researcher_client, submission, cluster, text, seconds):
    # Given a wall-time limit and a minimum runtime written as decimals of whole seconds
    body = submission(min_runtime=text, max_runtime=text)
    # When submitted
    r = researcher_client.post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    # Then they are those seconds (in floats 1.1 × 3600 is 3960.0000000000005: refused as a fraction)
    assert r.status_code == 201, r.content
    assert (r.json()["min_runtime_s"], r.json()["max_runtime_s"]) == (seconds, seconds)


def test_a_duration_with_a_fraction_of_a_second_is_still_refused(researcher_client, submission, cluster):
    body = submission(max_runtime="1.0000001h")
    r = researcher_client.post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    assert r.status_code == 400 and r.json()["code"] == "invalid_max_runtime"
    assert not Workload.objects.exists()
