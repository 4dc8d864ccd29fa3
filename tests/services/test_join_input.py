"""``POST /agent/join`` with malformed input (issue 14, finding 10): NUL, lone surrogates, numbers
no column holds. Each is answered in the API's error format (config/api.py: 400
``{"<field>": ["message"], "code"}``, other statuses ``{"detail", "code"}``) and changes nothing:
no host, no GPU, no event, and the join token is not spent."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from scheduler.models import GPU, Cluster, Host, HostEvent, JoinToken
from scheduler.services import do_create_join_token

pytestmark = pytest.mark.django_db

GPU0 = {"index": 0, "uuid": "GPU-join-0", "model": "H100", "memory_mb": 81920}


@pytest.fixture
def join_token() -> str:
    cluster = Cluster.objects.create(name="join")
    return do_create_join_token(None, cluster, timedelta(hours=1))[1]


def _post(client: Client, raw: str) -> tuple[int, dict[str, Any]]:
    response = client.post("/agent/join", data=raw.encode("utf-8"), content_type="application/json")
    return response.status_code, response.json()


def _body(token: str, **change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"token": token, "host": "h-join", "gpus": [dict(GPU0)], "labels": {"rack": "r1"}}
    for key, value in change.items():
        if key.startswith("gpu_"):
            body["gpus"][0][key[4:]] = value
        else:
            body[key] = value
    return body


def _raw(body: dict[str, Any]) -> str:
    # json.dumps writes a lone surrogate as the escape \udXXX, as an attacker's client would
    return json.dumps(body)


CASES = {
    "nul-in-host": (dict(host="h\x00x"), "host"),
    "newline-after-host": (dict(host="h-join\n"), "host"),
    "surrogate-in-host": (dict(host="h\ud800"), "host"),
    "nul-in-uuid": (dict(gpu_uuid="GPU-\x00"), "gpus"),
    "surrogate-in-uuid": (dict(gpu_uuid="GPU-\udfff"), "gpus"),
    "nul-in-model": (dict(gpu_model="H100\x00"), "gpus"),
    "surrogate-in-model": (dict(gpu_model="H\ud83d"), "gpus"),
    "memory-2^40": (dict(gpu_memory_mb=2**40), "gpus"),
    "index-2^40": (dict(gpu_index=2**40), "gpus"),
    "negative-memory": (dict(gpu_memory_mb=-1), "gpus"),
    "surrogate-label-value": (dict(labels={"rack": "r\ud800"}), "labels"),
    "surrogate-label-key": (dict(labels={"r\udc00": "r1"}), "labels"),
    "nul-label": (dict(labels={"rack": "r\x00"}), "labels"),
    # ops35: invisible and control characters (a model that prints like another is another model)
    "zero-width-space-in-model": (dict(gpu_model="H100\u200b"), "gpus"),
    "bell-in-model": (dict(gpu_model="H\x07100"), "gpus"),
    "trailing-blank-in-model": (dict(gpu_model="H100 "), "gpus"),
    "escape-in-uuid": (dict(gpu_uuid="GPU-\x1b[2Jx"), "gpus"),
    "bom-in-uuid": (dict(gpu_uuid="\ufeffGPU-join-0"), "gpus"),
    "rtl-override-in-uuid": (dict(gpu_uuid="GPU-\u202e0-nioj"), "gpus"),
    "empty-label-key": (dict(labels={"": "r1"}), "labels"),
    # and in labels: an escape sequence, a line break, a zero-width space
    "escape-in-label-value": (dict(labels={"rack": "r1\x1b[2J"}), "labels"),
    "newline-in-label-value": (dict(labels={"rack": "r1\nr2"}), "labels"),
    "zero-width-space-in-label-key": (dict(labels={"ra\u200bck": "r1"}), "labels"),
}


def _nothing_changed() -> None:
    assert not Host.objects.exists()
    assert not GPU.objects.exists()
    assert not HostEvent.objects.exists()
    assert JoinToken.objects.get().used_at is None


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_join_facts_get_a_field_error_and_change_nothing(client: Client, join_token: str, case: str):
    change, field = CASES[case]

    status, answer = _post(client, _raw(_body(join_token, **change)))

    assert status == 400, answer
    assert isinstance(answer.pop("code"), str)
    assert list(answer) == [field], answer
    assert all(isinstance(m, str) and m for m in answer[field])
    _nothing_changed()


@pytest.mark.parametrize(
    "raw",
    ['{"token": "\\ud800", "host": "h-join", "gpus": []}', '{"token": "fwj_\\u0000", "host": "h-join", "gpus": []}'],
    ids=["surrogate-token", "nul-token"],
)
def test_a_malformed_join_token_is_refused_like_any_bad_token(client: Client, join_token: str, raw: str):
    status, answer = _post(client, raw)

    assert (status, answer) == (403, {"detail": answer["detail"], "code": "invalid_join_token"})
    _nothing_changed()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("[" * 100_000, "non_field_errors"),  # nesting deeper than the JSON parser's recursion
        ('{"token": 1, "host": "h", "gpus": []}', "token"),
        ('{"token": "t", "host": "h", "gpus": [{"index": 0}]}', "gpus"),
        ('{"token": "t", "host": "h", "gpus": [], "labels": [1]}', "labels"),
    ],
    ids=["deep-nesting", "token-not-a-string", "gpu-missing-fields", "labels-not-an-object"],
)
def test_malformed_join_bodies_get_the_documented_error_format(client: Client, join_token: str, raw: str, field: str):
    status, answer = _post(client, raw)

    assert status == 400
    assert set(answer) == {field, "code"} and isinstance(answer[field], list)
    _nothing_changed()


def test_a_valid_join_still_works(client: Client, join_token: str):
    status, answer = _post(client, _raw(_body(join_token)))

    assert status == 201, answer
    assert Host.objects.get().name == "h-join"
    assert list(GPU.objects.values_list("uuid", "model", "memory_mb")) == [("GPU-join-0", "H100", 81920)]


def test_a_join_with_more_gpus_than_a_hello_carries_is_refused(client: Client, join_token: str):
    # brk31: 300 GPUs joined (index ≤ 1023 was the only bound); the agent's hello carries at most
    # 256, so the host could never say hello, and its 300 registered GPUs swelled every budget's
    # entitlement (DESIGN.md: registered GPUs × W) while it stayed offline.
    from agent.protocol import MAX_HOST_GPUS

    gpus = [dict(GPU0, index=i, uuid=f"GPU-join-{i}") for i in range(MAX_HOST_GPUS + 1)]
    status, answer = _post(client, _raw(_body(join_token, gpus=gpus)))

    assert status == 400 and list(answer) == ["gpus", "code"], answer
    assert str(MAX_HOST_GPUS) in answer["gpus"][0]
    _nothing_changed()
    status, answer = _post(client, _raw(_body(join_token, gpus=gpus[:MAX_HOST_GPUS])))
    assert status == 201, answer


def test_an_invisible_character_is_named_in_the_refusal(client: Client, join_token: str):
    """ops35: the message says which character, and what a model or UUID may hold."""
    status, answer = _post(client, _raw(_body(join_token, gpu_model="H100\u200b")))
    assert status == 400, answer
    assert "U+200B" in answer["gpus"][0] and "model" in answer["gpus"][0], answer
    status, answer = _post(client, _raw(_body(join_token, labels={"": "r1"})))
    assert status == 400 and "empty" in answer["labels"][0], answer
    _nothing_changed()


def test_a_hello_reporting_an_invisible_character_in_a_model_is_refused_by_the_same_rule():
    from dataclasses import replace

    from scheduler.lifecycle import GpuReport, hello_gpu_problem

    ok = GpuReport(0, "GPU-a", "NVIDIA H100 80GB HBM3", 81920, "healthy")
    assert hello_gpu_problem([ok]) is None
    problem = hello_gpu_problem([replace(ok, model="H100\u200b")])
    assert problem is not None and "U+200B" in problem, problem
    problem = hello_gpu_problem([replace(ok, uuid="GPU-\x07")])
    assert problem is not None and "U+0007" in problem, problem
