"""quote46: a quote's edge inputs answered alike on the submit form, by the API and by ``fairway
submit --quote``: a minimum runtime past the site's longest, more GPUs than any host (or than the
cluster's hosts together), a user without a budget, a budget the user may not submit to. Each is
one refusal, in the service's words on all three (the form's budget choice said "Select a valid
choice. nlp/olmo is not one of the available choices." where the others named the membership)."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.cli.inprocess import run_cli
from tests.conftest import _user
from tests.web.test_pages import _form

URL = "/api/v1/workloads/quote/"


def _three(user: Any, api_client_for: Any, monkeypatch: Any, **fields: str) -> tuple[str, str, str]:
    """The API's refusal, the page as the form posts the same quote, and the CLI's stderr."""
    body = {"cluster": "default", "gpu_model": "A100", "gpu_count": 4, "min_runtime": "2h", "budget": "nlp/olmo"}
    body.update({k: (int(v) if k == "gpu_count" else v) for k, v in fields.items()})
    body = {k: v for k, v in body.items() if v != ""}
    response = api_client_for(user).post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    problems = [m for k, v in response.json().items() if k != "code" for m in v]
    assert len(problems) == 1, problems
    browser = Client()
    browser.force_login(user)
    form = {**_form(), **{k: str(v) for k, v in body.items()}, "quote": "1"}
    if "budget" not in body:
        form["budget"] = ""
    page = browser.post("/submit/", form)
    assert page.status_code == 400
    argv = ["submit", "--quote", "-c", "default", "-m", "A100", "-g", str(body["gpu_count"]), "-M", body["min_runtime"]]
    if "budget" in body:
        argv += ["-b", body["budget"]]
    err = run_cli(monkeypatch, user, *argv, expect=1)
    return problems[0], page.content.decode(), err


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"min_runtime": "8d"}, "The minimum runtime is at most 1d"),
        ({"gpu_count": "9"}, "9 GPUs is more than the largest A100 host (8) and not a multiple of it."),
        ({"gpu_count": "24"}, "24 GPUs need 3 whole 8-GPU A100 hosts; cluster default has 2."),
        ({"budget": "vision/sam"}, "You are not a member of budget vision/sam"),
    ],
)
def test_an_edge_quote_is_refused_alike_everywhere(
    researcher, cluster, api_client_for, monkeypatch, fields: dict[str, str], words: str
):
    problem, page, err = _three(researcher, api_client_for, monkeypatch, **fields)

    assert problem.startswith(words)
    assert f"<li>{html.escape(problem)}</li>" in page
    assert problem in err
    assert Workload.objects.count() == 0


@pytest.mark.parametrize("budget", ["nlp/olmo", ""])
def test_a_user_without_a_budget_gets_one_refusal_everywhere(cluster, org_tree, api_client_for, monkeypatch, budget):
    nobody = _user("nobody")

    problem, page, err = _three(nobody, api_client_for, monkeypatch, budget=budget)

    assert problem.lower().endswith("you may submit to no budget yet.")
    assert f"<li>{html.escape(problem)}</li>" in page
    assert "Select a valid choice" not in page
    assert problem in err
