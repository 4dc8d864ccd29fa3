"""sec63: ``?limit=`` has an upper bound (config.pagination.MAX_LIMIT): no user reads every row of a
list in one answer; the bound is said in the API's schema."""

from __future__ import annotations

import pytest

from config.pagination import MAX_LIMIT, FairwayLimitOffsetPagination


def test_the_bound_is_a_thousand_rows():
    assert MAX_LIMIT == 1000 == FairwayLimitOffsetPagination.max_limit


@pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/groups/"])
def test_a_larger_limit_is_read_as_the_bound_and_next_leads_on(
    researcher_client, researcher, submit_kwargs, monkeypatch, url
):
    from scheduler.services import do_submit_workload

    monkeypatch.setattr(FairwayLimitOffsetPagination, "max_limit", 2)  # the bound, small
    for i in range(3):
        do_submit_workload(researcher, **submit_kwargs(name=f"w{i}", array="0-1" if "groups" in url else None))
    body = researcher_client.get(url, {"limit": "1000000"}).json()
    assert body["count"] == 3 and len(body["results"]) == 2
    assert "limit=2" in body["next"]
    rest = researcher_client.get(body["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None


def test_the_schema_says_the_bound():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    limit = next(p for p in schema["paths"]["/api/v1/workloads/"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == 1000 and "at most 1000" in limit["description"]
