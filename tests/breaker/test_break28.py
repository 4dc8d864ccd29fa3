"""break28: faults found trying Fairway as a new user and with hostile input; each case names what it was."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("param", ["state", "budget", "cluster"])
@pytest.mark.parametrize("value", ["%00", "50%", "%(x)s", "%s"])
def test_a_workload_filter_with_a_percent_sign_is_a_400_that_names_it(researcher_client, cluster, param, value):
    """``GET workloads/?state=%25s`` (any unknown state, budget or cluster holding ``%``) was a 500:
    django-filter formats every message with ``%`` and the message quoted the value."""
    response = researcher_client.get("/api/v1/workloads/", {param: value})
    assert response.status_code == 400, response.content
    assert value in response.json()[param][0]
