"""left52: a quote without a minimum runtime (DESIGN.md §3.8: "for a workload not yet submitted and
several minimum runtimes") prices the default ladder, ``scheduler.estimates.QUOTE_RUNTIMES_S``, up
to the site's longest minimum runtime; a submission still needs one."""

from __future__ import annotations

from scheduler.estimates import QUOTE_RUNTIMES_S, quote_runtimes
from scheduler.models import Workload

URL = "/api/v1/workloads/quote/"


def _without_m(submission, **overrides):
    body = submission(**overrides)
    del body["min_runtime"]
    return body


def test_a_quote_without_a_minimum_runtime_prices_the_ladder_none_of_them_yours(researcher_client, submission, cluster):
    response = researcher_client.post(URL, _without_m(submission), format="json")

    assert response.status_code == 200, response.json()
    lines = response.json()["quotes"]
    assert [q["min_runtime_s"] for q in lines] == list(QUOTE_RUNTIMES_S) == [0, 1800, 7200, 28800, 86400]
    assert not any(q["yours"] for q in lines)
    assert [q["charge_gpu_hours"] for q in lines] == [0.0, 2.0, 8.0, 32.0, 96.0]
    assert Workload.objects.count() == 0
    # a submission without one is refused as before
    refused = researcher_client.post("/api/v1/workloads/", _without_m(submission), format="json")
    assert refused.status_code == 400 and "min_runtime" in refused.json()


def test_the_ladder_stops_at_the_sites_longest_minimum_runtime(settings, researcher_client, submission, cluster):
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_MINIMUM_RUNTIME_S": 4 * 3600}

    assert quote_runtimes(None) == [0, 1800, 7200]
    assert quote_runtimes(3600) == [0, 1800, 3600, 7200]
    lines = researcher_client.post(URL, _without_m(submission), format="json").json()["quotes"]
    assert [q["min_runtime_s"] for q in lines] == [0, 1800, 7200]


def test_an_array_quote_without_a_minimum_runtime_says_why_it_has_no_whole_array_answer(
    researcher_client, submission, cluster
):
    body = researcher_client.post(URL, _without_m(submission, array="0-3"), format="json").json()

    assert body["array"] is None
    assert "The whole array is quoted at its own minimum runtime: give one to see it." in body["notes"]
