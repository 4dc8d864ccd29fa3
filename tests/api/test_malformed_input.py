"""Malformed input gets the API's one error format, never a 500 or an HTML page (issue 14, finding 10).

NUL in a path or a query parameter, huge integers, lone surrogates, oversize bodies. Each
case also checks that nothing was created. NUL matters most on PostgreSQL (it cannot compare
text holding one); the tests run on both.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.conftest import PASSWORD


def _json(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    data = response.json()
    assert "code" in data
    return data


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/clusters/%00/",
        "/api/v1/clusters/a%00b/",
        "/api/v1/budgets/%00/",
        "/api/v1/workloads/%00/",
        "/api/v1/hosts/%00/",
    ],
)
def test_nul_in_an_api_path_is_a_404_in_the_error_format(researcher_client, cluster, url):
    response = researcher_client.get(url)
    assert response.status_code == 404
    assert _json(response)["code"] == "not_found"


@pytest.mark.parametrize("param", ["owner", "cluster", "budget", "state"])
def test_nul_in_a_query_parameter_is_a_400_in_the_error_format(researcher_client, cluster, param):
    response = researcher_client.get(f"/api/v1/workloads/?{param}=a%00b")
    assert response.status_code == 400
    assert _json(response)["code"] == "null_characters_not_allowed"


def test_nul_in_a_web_path_is_a_404_page(researcher, cluster):
    client = Client(raise_request_exception=False)
    assert client.login(username="researcher", password=PASSWORD)
    assert client.get("/clusters/%00/").status_code == 404


def test_an_oversize_api_body_is_a_413_in_the_error_format(researcher_client, cluster, submission, settings):
    body = json.dumps(submission(name="x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)))
    response = researcher_client.post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 413
    assert _json(response)["code"] == "too_large"
    assert not Workload.objects.exists()


def test_an_oversize_login_body_is_a_413_in_the_error_format(db, settings):
    body = json.dumps({"username": "u" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1), "password": "p"})
    response = Client().post("/api/v1/auth/login/", body, content_type="application/json")
    assert response.status_code == 413
    assert _json(response)["code"] == "too_large"


@pytest.mark.parametrize(
    "overrides",
    [
        {"gpu_count": 10**4000},  # under the JSON parser's 4,300 digits
        {"gpu_count": 2**64},
        {"budget": 10**4000},  # an id no database integer holds: was a 500
        {"cluster": 10**4000},
        {"budget": 2**63},
        {"cluster": 2**63},
        {"min_runtime": 10**4000},
        {"min_runtime": "9" * 4000},
        {"array": "9" * 20},  # an index SQLite cannot hold: was a 500 (tryout22)
        {"array": "0-1%" + "9" * 20},
    ],
)
def test_huge_integers_are_field_errors(researcher_client, cluster, submission, overrides):
    response = researcher_client.post(
        "/api/v1/workloads/", json.dumps(submission(**overrides)), content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    data = _json(response)
    assert len(response.content) < 2000  # no 4,000-digit number quoted back
    assert list(overrides)[0] in data
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": "\ud800"},
        {"budget": "\udfff"},
        {"cluster": "a\ud800"},
        {"command": ["python", "\ud800"]},
        {"env": {"A": "\ud800"}},
        {"name": "a\x00b"},
        {"budget": "nlp/olmo\x00"},
        {"cluster": "\x00"},
        {"gpu_model": "A100\x00"},
        {"image": "x\x00"},
        {"env": {"A\x00": "x"}},
    ],
)
def test_surrogates_and_nul_in_a_body_are_400s(researcher_client, cluster, submission, overrides):
    body = json.dumps(submission(**overrides))  # ensure_ascii: the surrogate travels as \\ud800
    response = researcher_client.post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 400
    _json(response)
    assert not Workload.objects.exists()


def test_a_huge_budget_string_is_not_quoted_back(researcher_client, cluster, submission):
    body = json.dumps(submission(budget="b" * 1_000_000))
    response = researcher_client.post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 400
    assert _json(response)["code"] == "unknown_budget"
    assert len(response.content) < 1000


@pytest.mark.parametrize(
    "overrides",
    [
        {"min_runtime": "\u0663\u0660m"},  # Arabic-Indic 30m
        {"max_runtime": "\uff11h"},  # fullwidth 1h
        {"memory": "\uff11G"},
        {"shared_memory": "\u0663G"},
    ],
)
def test_digits_other_than_ascii_are_field_errors(researcher_client, cluster, submission, overrides):
    """tryout22: durations and sizes took any Unicode digit (``\\d``): "٣٠m" was 30 minutes,
    while plain numbers are ASCII only (``serializers._PLAIN_INT``). One rule: ASCII digits."""
    response = researcher_client.post(
        "/api/v1/workloads/", json.dumps(submission(**overrides)), content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    assert list(overrides)[0] in _json(response)
    assert not Workload.objects.exists()


@pytest.mark.parametrize("group", [str(2**64), str(2**63), "0", "-1", "1.5"])
def test_a_group_filter_no_database_holds_is_a_400_on_the_api_and_no_500_on_the_page(
    researcher, researcher_client, cluster, group
):
    """tryout22: ``GET /api/v1/workloads/?group=99999999999999999999`` (and the workloads page
    with it) overflowed SQLite's integer: a 500."""
    response = researcher_client.get("/api/v1/workloads/", {"group": group})
    assert response.status_code == 400, response.content[:300]
    assert "group" in _json(response)
    # a group that does not exist is a 400 too, not an empty list (brk31; docs/jobs.md)
    assert "No group" in _json(researcher_client.get("/api/v1/workloads/", {"group": str(2**63 - 1)}))["group"][0]
    page = Client()
    page.force_login(researcher)
    assert page.get("/workloads/", {"group": group}).status_code in (200, 400)


@pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/workloads/quote/"])
def test_an_unknown_field_is_refused_not_dropped(researcher_client, cluster, submission, url):
    """tryout22: ``{"max_runtme": "1h"}`` (a typo) was accepted and dropped, so the workload ran
    without a wall-time limit; the web's spec refused it ("Unknown fields: max_runtme."), and
    ``fairway submit -f`` sends its YAML to the API as is."""
    response = researcher_client.post(url, json.dumps(submission(max_runtme="1h")), content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    data = _json(response)
    assert data["code"] == "unknown_field"
    assert "max_runtime" in data["max_runtme"][0]  # names the fields it may have meant
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"budget": ["nlp/olmo"]}, "budget", "budget must be a budget path or id, not a list."),
        ({"budget": {"path": "nlp/olmo"}}, "budget", "budget must be a budget path or id, not a mapping."),
        ({"mounts": [None]}, "mounts", "mounts: each entry is a mount name, not null"),
        ({"cluster": ["c1"]}, "cluster", "cluster must be a cluster name or id, not a list."),
    ],
)
def test_a_value_of_the_wrong_kind_is_named_in_words(researcher_client, cluster, submission, overrides, field, message):
    """tryout: "No budget a list." and "'None' is not a mount name" (Python's words) for JSON values."""
    body = json.dumps(submission(**overrides))
    response = researcher_client.post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 400
    assert message in _json(response)[field][0]
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("state", "runing", "No state 'runing' (the states are: pending, "),
        ("state", "pending,bogus", "No state 'bogus'"),
        ("budget", "nope", "No budget 'nope'."),
        ("cluster", "nope", "No cluster 'nope'."),
    ],
)
def test_an_unknown_filter_value_is_a_400_not_an_empty_list(
    researcher, researcher_client, cluster, param, value, message
):
    """tryout24: ``?state=runing`` (and ``fairway ls --state runing``) listed nothing with exit 0,
    as if nothing ran; an unknown budget or cluster likewise. Submitting to one is refused with
    its name: so is listing by one. The web page names it too and lists nothing (break29: it
    ignored it and listed every workload)."""
    response = researcher_client.get("/api/v1/workloads/", {param: value})
    assert response.status_code == 400, response.content[:300]
    assert message in _json(response)[param][0]
    ok = {"state": "pending,running", "budget": "nlp/olmo", "cluster": cluster.name}[param]
    assert researcher_client.get("/api/v1/workloads/", {param: ok}).status_code == 200
    page = Client()
    page.force_login(researcher)
    shown = page.get("/workloads/", {param: value})
    assert shown.status_code == 400 and message.replace("'", "&#x27;") in shown.content.decode()


@pytest.mark.parametrize(
    ("url", "param", "message"),
    [
        ("/api/v1/hosts/?cluster=nope", "cluster", "No cluster 'nope'."),
        ("/api/v1/hosts/?state=bogus", "state", "No host state 'bogus' (the states are: active, "),
        ("/api/v1/metrics/?cluster=nope", "cluster", "No cluster 'nope'."),
        ("/api/v1/metrics/pyramid/?cluster=nope", "cluster", "No cluster 'nope'."),
        ("/api/v1/budgets/tree/?cluster=nope", "cluster", "No cluster 'nope'."),
        ("/api/v1/workloads/history/?cluster=nope", "cluster", "No cluster 'nope'."),
    ],
)
def test_a_cluster_or_host_state_that_does_not_exist_is_a_400(researcher_client, cluster, url, param, message):
    """tryout24: these lists answered ``[]`` (``fairway share -c typo`` printed nothing, exit 0)."""
    response = researcher_client.get(url)
    assert response.status_code == 400, response.content[:300]
    assert message in _json(response)[param][0]
    fixed = url.replace("nope", cluster.name).replace("bogus", "active")
    assert researcher_client.get(fixed).status_code == 200
