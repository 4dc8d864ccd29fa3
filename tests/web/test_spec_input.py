"""The submit page's YAML spec against hostile input (issue 14, findings 5 and 10).

Aliases are refused before they expand, numbers beyond a bigint before Python converts them,
lone surrogates before they reach the database or the template; error messages never quote
the input, and nothing is created.
"""

from __future__ import annotations

import time

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.conftest import PASSWORD

SPEC = {
    "name": "x",
    "budget": "nlp/olmo",
    "cluster": "default",
    "gpu_model": "A100",
    "gpu_count": "1",
    "image": '""',
    "command": '["python"]',
    "min_runtime": "1h",
}


def _spec(**fields: str) -> str:
    return "\n".join(f"{k}: {v}" for k, v in {**SPEC, **fields}.items()) + "\n"


def _laughs(levels: int) -> str:
    """A flow list of nested aliases expanding to 10 ** (levels + 1) strings of 10 characters."""
    parts = ["&a [" + ", ".join(['"xxxxxxxxxx"'] * 10) + "]"]
    for i in range(levels):
        name, prev = chr(ord("b") + i), chr(ord("a") + i)
        parts.append(f"&{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "[" + ", ".join(parts) + "]"


@pytest.fixture
def browser(researcher, cluster) -> Client:
    client = Client(raise_request_exception=False)
    assert client.login(username="researcher", password=PASSWORD)
    return client


def _post(browser: Client, spec: str):
    began = time.monotonic()
    response = browser.post("/submit/", {"spec": spec})
    return response, time.monotonic() - began


def test_a_yaml_alias_bomb_is_refused_without_expanding(browser):
    # 4 levels: 10^5 strings, 2.7 MB echoed back by the budget's "No budget ..." before the fix
    response, seconds = _post(browser, _spec(budget=_laughs(4)))
    assert response.status_code == 400
    assert len(response.content) < 50_000
    assert "Aliases" in _errors(response)
    assert seconds < 2
    assert not Workload.objects.exists()


def test_a_big_alias_bomb_costs_nothing(browser):
    # 8 levels (10^9 strings: what killed a worker) answered at once
    response, seconds = _post(browser, _spec(cluster=_laughs(8)))
    assert response.status_code == 400
    assert seconds < 2


@pytest.mark.parametrize(
    "fields",
    [
        {"gpu_count": "1" * 5000},  # over Python's 4,300-digit int() limit: was a 500
        {"min_runtime": "9" * 4000},  # under it, but overflowing a float: was a 500
        {"gpu_count": "9" * 30},  # beyond any database integer
        {"name": '"\\ud800"'},  # lone surrogates: were 500s (UTF-8 cannot encode them)
        {"budget": '"\\ud800"'},
        {"gpu_model": '"\\udfff"'},
        {"image": '"\\ud800"'},
        {"command": '["\\ud800"]'},
        {"min_runtime": '"\\ud800"'},
        {"env": '{"A\\ud800": "x"}'},
        {"env": '{"A": "\\ud800"}'},
        {"name": '"a\\0b"'},  # NUL
        {"cluster": '"\\0"'},
        {"budget": '"nlp/olmo\\0"'},
    ],
)
def test_hostile_scalars_get_a_field_error_and_create_nothing(browser, fields):
    response, _seconds = _post(browser, _spec(**fields))
    assert response.status_code == 400
    assert b"errorlist" in response.content or b"alert" in response.content
    assert not Workload.objects.exists()


def _errors(response) -> str:
    page = response.content.decode()
    start = page.index('id="spec-errors"')
    return page[start : page.index("</ul>", start)]


def test_error_messages_do_not_quote_long_input(browser):
    # (the textarea shows the spec back, as typed: the error list must not repeat it)
    response, _seconds = _post(browser, _spec(budget="b" * 100_000))
    assert response.status_code == 400
    assert "No budget" in _errors(response)
    assert len(_errors(response)) < 500


def test_an_oversize_spec_is_refused(browser):
    response, _seconds = _post(browser, _spec(name="n" * 300_000))
    assert response.status_code == 400
    assert not Workload.objects.exists()
