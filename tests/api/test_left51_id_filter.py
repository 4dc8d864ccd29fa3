"""left51: the workload list's ``id`` filter (``?id=12,13,14``, at most ``MAX_IDS`` ids): what
``fairway wait ID ID …`` reads in one request per poll (docs/jobs.md "Wait for workloads")."""

from __future__ import annotations

import pytest

from fairway_cli.cli import LIST_MAX_IDS
from scheduler.api.filters import MAX_IDS
from scheduler.services import do_submit_workload


@pytest.fixture
def three(researcher, submit_kwargs) -> list[int]:
    return [do_submit_workload(researcher, **submit_kwargs(name=f"w{i}")).pk for i in range(3)]


def test_the_list_filters_by_ids_and_leaves_unknown_ones_out(researcher_client, three):
    a, b, c = three
    response = researcher_client.get("/api/v1/workloads/", {"id": f"{a}, #{c},999999"})
    assert response.status_code == 200, response.json()
    assert (response.json()["count"], [w["id"] for w in response.json()["results"]]) == (2, [c, a])


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("x1", "'x1' is not a workload id"),
        ("1,0", "'0' is not a workload id"),
        ("9" * 20, "is not a workload id"),
        (",".join(str(i) for i in range(1, MAX_IDS + 2)), f"At most {MAX_IDS} ids"),
    ],
)
def test_a_bad_id_list_is_a_400_naming_it(researcher_client, three, value, says):
    response = researcher_client.get("/api/v1/workloads/", {"id": value})
    assert response.status_code == 400, response.json()
    assert says in str(response.json()["id"])


def test_the_cap_is_the_clis(researcher_client, three):
    """The CLI imports nothing of the server: its copy of the cap is kept equal here."""
    assert LIST_MAX_IDS == MAX_IDS == 500
    every = ",".join(str(i) for i in range(1, MAX_IDS + 1))
    assert researcher_client.get("/api/v1/workloads/", {"id": every}).status_code == 200
