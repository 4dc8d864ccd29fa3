"""left56: ``?state=,`` listed nothing where ``?id=,`` is a 400: the state filter reads its list as
the id filter does (``scheduler.api.filters.workload_states``)."""

from __future__ import annotations

import pytest

from scheduler.services import do_submit_workload

URL = "/api/v1/workloads/"


@pytest.mark.parametrize("value", [",", " , ,", ",,"])
def test_a_state_list_of_nothing_is_refused(researcher_client, researcher, submit_kwargs, cluster, value):
    do_submit_workload(researcher, **submit_kwargs())
    r = researcher_client.get(URL, {"state": value})
    assert r.status_code == 400, r.json()
    assert r.json()["state"] == ["Give at least one state."]


def test_blank_parts_beside_a_state_are_skipped_and_absent_is_no_filter(
    researcher_client, researcher, submit_kwargs, cluster
):
    w = do_submit_workload(researcher, **submit_kwargs())
    for query in ({"state": "pending,"}, {"state": " , pending"}, {"state": ""}, {}):
        r = researcher_client.get(URL, query)
        assert r.status_code == 200, (query, r.json())
        assert [row["id"] for row in r.json()["results"]] == [w.pk], query
    r = researcher_client.get(URL, {"state": "pending,runing"})
    assert r.status_code == 400 and "'runing'" in r.json()["state"][0]


def test_a_bulk_action_refuses_it_alike(researcher_client, researcher, submit_kwargs, cluster):
    w = do_submit_workload(researcher, **submit_kwargs())
    r = researcher_client.post(f"{URL}bulk/?owner=me&state=,", {"action": "cancel"}, format="json")
    assert r.status_code == 400, r.json()
    w.refresh_from_db()
    assert w.state == "pending"
