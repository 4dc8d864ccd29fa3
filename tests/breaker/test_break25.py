"""break25: hostile or careless input that answered 500; each case names what it was."""

from __future__ import annotations

import pytest

from scheduler.models import Workload


@pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/groups/"])
def test_a_limit_beyond_any_database_integer_lists_everything(researcher_client, researcher, submit_kwargs, url):
    # ?limit=10**30 reached SQL as is: "datatype mismatch" on SQLite, out of range on PostgreSQL (500)
    from scheduler.services import do_submit_workload

    do_submit_workload(researcher, **submit_kwargs())
    researcher_client.raise_request_exception = False
    response = researcher_client.get(url, {"limit": "9" * 30, "offset": "0"})
    assert response.status_code == 200, response.content[:300]
    if url.startswith("/api/v1/workloads"):
        assert [w["id"] for w in response.json()["results"]] == list(Workload.objects.values_list("id", flat=True))


def test_a_statement_until_the_last_representable_day_is_a_400(researcher_client, org_tree):
    # the statement reads to the midnight after ``until``: date.max + 1 day was an OverflowError (500)
    researcher_client.raise_request_exception = False
    budget = org_tree["nlp/olmo"]
    response = researcher_client.get(
        f"/api/v1/budgets/{budget.pk}/statement.csv", {"since": "9999-12-01", "until": "9999-12-31"}
    )
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid_date"
    assert "until" in response.json()
