"""Adversarial input to ``/api/v1/``: every refusal is a 400 in the API's JSON error format and
creates nothing; nothing answers 500 (on SQLite or PostgreSQL)."""

from __future__ import annotations

import json

import pytest

from scheduler.models import Workload, WorkloadEvent

URL = "/api/v1/workloads/"


def _post(client, payload):
    client.raise_request_exception = False
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return client.post(URL, body, content_type="application/json")


def _assert_refused(response, code=None, field=None):
    assert response.status_code == 400, (response.status_code, response.content[:300])
    body = response.json()
    assert "code" in body
    if code is not None:
        assert body["code"] == code, body
    if field is not None:
        assert field in body, body
    assert not Workload.objects.exists()
    assert not WorkloadEvent.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "code"),
    [
        # "²".isdigit() is True but int("²") raises: was a 500
        ({"gpu_count": "²"}, "gpu_count", "invalid_gpu_count"),
        # int() refuses more than 4300 digits: was a 500
        ({"gpu_count": "1" * 5000}, "gpu_count", "invalid_gpu_count"),
        ({"budget": "²"}, "budget", "unknown_budget"),
        ({"budget": "1" * 5000}, "budget", "unknown_budget"),
        # float("1" * 400) is inf, int(inf) raises OverflowError: was a 500
        ({"min_runtime": "1" * 400 + "d"}, "min_runtime", "invalid_min_runtime"),
        # NUL: stored on SQLite, a 500 on PostgreSQL (text cannot hold NUL)
        ({"name": "a\x00b"}, "name", "invalid_name"),
        ({"image": "img\x00"}, "image", "invalid_image"),
        ({"gpu_model": "A\x00100"}, "gpu_model", "unknown_model"),
        ({"cluster": "def\x00ault"}, "cluster", "unknown_cluster"),
        # "^...$" matched before a trailing newline: "FOO\n" was accepted as a variable name
        ({"env": {"FOO\n": "x"}}, "env", "invalid_env"),
        ({"env": {"A" * 2000: "x"}}, "env", "invalid_env"),
    ],
)
def test_bad_fields_are_refused_with_400(researcher_client, submission, cluster, overrides, field, code):
    _assert_refused(_post(researcher_client, submission(**overrides)), code, field)


@pytest.mark.parametrize(
    "raw",
    [
        # unpaired surrogates are valid JSON but unstorable and unencodable: were 500s
        '{"name": "\\ud800"}',
        '{"command": ["python", "a\\udfff"]}',
        '{"env": {"A": "\\ud800"}}',
        # nesting deeper than the recursion limit: RecursionError was a 500
        '{"a":' * 10000 + "1" + "}" * 10000,
    ],
)
def test_unparseable_bodies_are_a_parse_error(researcher_client, submission, cluster, raw):
    # json.dumps writes a lone surrogate as the escape "\ud800", as a client would send it
    body = raw if raw.startswith('{"a"') else json.dumps({**submission(), **json.loads(raw)}, ensure_ascii=True)
    response = _post(researcher_client, body)
    _assert_refused(response, "parse_error")
    assert "JSON parse error" in response.json()["detail"]


def test_a_workload_whose_start_message_cannot_reach_the_agent_is_refused(researcher_client, submission, cluster):
    """Each limit alone fits the agent protocol, together they did not: 10 × 30 KiB of env was
    accepted, placed, and its ``start`` (over 256 KiB) was never sent — it held its GPUs until
    the start timeout, four times over, then failed."""
    from scheduler.services import MAX_START_PAYLOAD_BYTES

    env = {f"BLOB_{i}": "x" * 30_000 for i in range(10)}
    response = _post(researcher_client, submission(env=env))
    _assert_refused(response, "invalid_env", "env")
    assert str(MAX_START_PAYLOAD_BYTES) in response.json()["env"][0]


def test_multibyte_command_that_overflows_the_start_message_is_refused(researcher_client, submission, cluster):
    command = ["python", "🎉" * 65_000]  # 65,006 characters: under the 64 Ki-character limit, ~260 KB of UTF-8
    _assert_refused(_post(researcher_client, submission(command=command, env={})), "invalid_command", "command")


def test_a_large_but_deliverable_env_is_still_accepted(researcher_client, submission, cluster):
    env = {f"BLOB_{i}": "x" * 30_000 for i in range(6)}
    response = _post(researcher_client, submission(env=env))
    assert response.status_code == 201, response.content[:300]


@pytest.mark.parametrize("query", ["budget=²", "budget=" + "1" * 5000])
def test_list_filter_garbage_is_not_a_500(researcher_client, cluster, query):
    """Garbage in a filter is the client's error, named (an unknown budget is a 400 since tryout24,
    not an empty list), never a 500."""
    researcher_client.raise_request_exception = False
    response = researcher_client.get(f"{URL}?{query}")
    assert response.status_code == 400, response.content[:300]
    assert "budget" in response.json()


@pytest.mark.parametrize("body", ["[]", '"x"', "1", "null"])
def test_logout_with_a_non_object_body_logs_out(researcher_client, body):
    researcher_client.raise_request_exception = False
    response = researcher_client.post("/api/v1/auth/logout/", body, content_type="application/json")
    assert response.status_code == 204, response.content[:300]
    assert researcher_client.get("/api/v1/me/").status_code == 401


def test_digit_strings_still_work(researcher_client, submission, cluster, org_tree):
    response = _post(
        researcher_client, submission(gpu_count="2", budget=str(org_tree["nlp/olmo"].pk), min_runtime="3600")
    )
    assert response.status_code == 201, response.content[:300]
    assert (response.json()["gpu_count"], response.json()["min_runtime_s"]) == (2, 3600)
