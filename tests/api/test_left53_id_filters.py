"""left53: the workload list's id filters read ids one way (``scheduler.api.filters.parse_id``):
``?resubmitted_from=#12`` was "Enter a whole number." while ``?id=#12`` worked; ``?group=0`` said two
things at once ("No group 0." and the range); ``?id=,`` listed nothing while ``?id=`` listed everything
(both are now ``id: Give at least one id.``)."""

from __future__ import annotations

from typing import Any

import pytest

URL = "/api/v1/workloads/"


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


@pytest.fixture
def group(researcher_client, submission) -> tuple[int, list[int]]:
    body = researcher_client.post(URL, submission(array="0-1", gpu_count=1), format="json").json()
    return body["group"], body["array"]["members"]


def test_every_id_filter_takes_a_hash(researcher_client, group, submission):
    gid, members = group
    again = researcher_client.post(f"{URL}{members[0]}/resubmit/", {}, format="json")
    assert again.status_code == 201, again.json()
    for name, value, ids in (
        ("group", f"#{gid}", sorted(members, reverse=True)),
        ("resubmitted_from", f"#{members[0]}", [again.json()["id"]]),
        ("id", f"#{members[1]}", [members[1]]),
    ):
        r = researcher_client.get(URL, {name: value})
        assert r.status_code == 200, (name, r.json())
        assert [w["id"] for w in r.json()["results"]] == ids, name


@pytest.mark.parametrize("name", ["group", "resubmitted_from"])
@pytest.mark.parametrize("value", ["0", "-1", "9" * 20, "x"])
def test_a_bad_id_is_one_message(researcher_client, group, name, value):
    r = researcher_client.get(URL, {name: value})
    assert r.status_code == 400, r.json()
    noun = "group" if name == "group" else "workload"
    assert r.json()[name] == [f"{value.removeprefix('#')[:40]!r} is not a {noun} id (a whole number from 1)."]


@pytest.mark.parametrize("name", ["group", "resubmitted_from"])
def test_an_id_of_nothing_is_one_message(researcher_client, group, name):
    r = researcher_client.get(URL, {name: "#999999"})
    assert r.status_code == 400, r.json()
    assert r.json()[name] == [f"No {'group' if name == 'group' else 'workload'} 999999."]


@pytest.mark.parametrize("value", ["", ",", " , ,"])
def test_an_empty_id_list_is_refused_alike(researcher_client, group, value):
    r = researcher_client.get(URL, {"id": value})
    assert r.status_code == 400, r.json()
    assert r.json()["id"] == ["Give at least one id."]
