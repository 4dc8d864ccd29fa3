"""brk35: the API's pagination parameters (``config.pagination``)."""

from __future__ import annotations

import pytest

from scheduler.models import Workload


@pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/groups/"])
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("limit", "abc"),
        ("limit", "-5"),
        ("limit", "0"),
        ("limit", "1e3"),
        ("limit", "1_0"),
        ("limit", "\uff15"),  # a fullwidth 5
        ("limit", " 5"),
        ("limit", "9" * 5000),
        ("offset", "-3"),
        ("offset", "abc"),
        ("offset", "2.5"),
    ],
)
def test_a_malformed_limit_or_offset_is_refused_naming_it(researcher_client, cluster, url, name, value):
    """DRF read a ``limit`` or ``offset`` it could not use as if it were absent: ``?limit=-5``
    answered 100 rows and ``?offset=abc`` the first page, as if asked for; a 400 names it."""
    response = researcher_client.get(url, {name: value})
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid"
    assert name in response.json()


@pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/groups/"])
def test_good_limits_and_offsets_still_page(researcher_client, researcher, submit_kwargs, url):
    from scheduler.services import do_submit_workload

    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs())
    body = researcher_client.get(url, {"limit": "2", "offset": "1"}).json()
    if url.startswith("/api/v1/workloads"):
        ids = list(Workload.objects.order_by("-id").values_list("id", flat=True))
        assert [w["id"] for w in body["results"]] == ids[1:3] and body["count"] == 3
    assert researcher_client.get(url, {"limit": "", "offset": ""}).status_code == 200
    assert researcher_client.get(url, {"limit": "9" * 30, "offset": "0"}).status_code == 200


@pytest.mark.parametrize("pk", ["\u00b2", "\u0661", "\uff11"])
def test_the_logs_of_an_id_of_other_digits_are_no_workload(researcher_client, cluster, pk):
    """``GET workloads/²/logs/`` was a 500: ``"²".isdigit()`` is true, so the id reached the
    query, whose ``int("²")`` failed. It is no workload (404), as on the detail."""
    researcher_client.raise_request_exception = False
    for path in (f"/api/v1/workloads/{pk}/logs/", f"/api/v1/workloads/{pk}/"):
        response = researcher_client.get(path)
        assert response.status_code == 404, (path, response.content[:200])
        assert response.json()["code"] == "not_found"


@pytest.mark.parametrize(
    "params",
    [{"until": "9999-12-31"}, {"since": "2999-01-01", "until": "2999-01-02"}, {"until": "2999-06-01T12:00Z"}],
)
def test_a_pyramid_of_a_range_that_starts_in_the_future_is_a_400(researcher_client, cluster, params):
    """``metrics/pyramid/?until=9999-12-31`` answered 200 for 9999-12-30 with 0 registered GPU-hours
    and every fraction 0, as if the GPUs had been unavailable, where history refuses an instant
    that is not past. Nothing is counted after now: a range starting there is refused."""
    response = researcher_client.get("/api/v1/metrics/pyramid/", params)
    assert response.status_code == 400, response.content[:300]
    wrong = "since" if "since" in params else "until"  # until alone: its 7 days before are the wrong ones (admin47)
    assert list(response.json()) == [wrong, "code"] and "future" in response.json()[wrong][0]


def test_a_pyramid_range_ending_in_the_future_still_counts_up_to_now(researcher_client, cluster):
    from datetime import timedelta

    from django.utils import timezone

    tomorrow = (timezone.now() + timedelta(days=1)).date().isoformat()
    response = researcher_client.get("/api/v1/metrics/pyramid/", {"since": "2h", "until": tomorrow})
    assert response.status_code == 200, response.content[:300]
    assert response.json()[0]["range"]["partial_hour_until"] is not None


@pytest.mark.parametrize("value", ["1_0", "\u0661", "\uff15", " 5", "5 ", "+5", "9" * 5000])
def test_history_limit_and_log_parameters_are_ascii_integers(researcher_client, submission, cluster, value):
    """``history/?limit=1_0`` listed 10, ``logs/?tail=١٠٠`` read 100 bytes (``int()`` takes
    underscores, blanks and any script's digits): as the pages' ``limit``, a 400 naming it."""
    response = researcher_client.get("/api/v1/workloads/history/", {"limit": value})
    assert response.status_code == 400 and "limit" in response.json(), response.content[:200]
    wid = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    for param in ("tail", "attempt"):
        response = researcher_client.get(f"/api/v1/workloads/{wid}/logs/", {param: value})
        assert response.status_code == 400, (param, response.content[:200])
        assert response.json() == {param: [f"{param} is an integer."], "code": "invalid"}
