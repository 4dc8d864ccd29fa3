"""left51: ``hold`` of a submission is a JSON/YAML ``true`` or ``false`` only, the submission
service's one rule (``invalid_hold``), on the API (submit, resubmit), a YAML spec (the submit
page's, ``fairway submit -f``) alike: DRF's BooleanField read ``"yes"``, ``"on"``, ``1`` and
``"true"`` as true before the service saw them, as the API reads no other boolean (``dry_run``,
an env entry's ``secret``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.cli.inprocess import run_cli
from tests.conftest import PASSWORD

NOT_BOOLEANS = ["yes", "true", "on", 1, 0, "false", "1", [], {}]


@pytest.mark.parametrize("hold", NOT_BOOLEANS)
def test_the_api_refuses_a_hold_that_is_no_boolean(researcher_client, submission, cluster, hold):
    response = researcher_client.post("/api/v1/workloads/", submission(hold=hold), format="json")
    assert response.status_code == 400, response.json()
    assert response.json() == {"hold": ["hold is true or false."], "code": "invalid_hold"}
    assert not Workload.objects.exists()


@pytest.mark.parametrize("hold", [True, False])
def test_true_and_false_are_taken(researcher_client, submission, cluster, hold):
    response = researcher_client.post("/api/v1/workloads/", submission(hold=hold), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["hold"] == ("user" if hold else "")


def test_a_resubmission_and_a_quote_refuse_it_too(researcher_client, submission, cluster):
    old = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()
    again = researcher_client.post(f"/api/v1/workloads/{old['id']}/resubmit/", {"hold": "yes"}, format="json")
    assert again.status_code == 400 and again.json()["code"] == "invalid_hold"
    assert Workload.objects.count() == 1


def test_the_submit_pages_yaml_spec_refuses_hold_yes(researcher, cluster):
    browser = Client()
    assert browser.login(username="researcher", password=PASSWORD)
    spec = (
        "budget: nlp/olmo\ncluster: default\ngpu_model: A100\ngpu_count: 1\ncommand: [python]\n"
        "min_runtime: 1h\nhold: yes\n"
    )
    response = browser.post("/submit/", {"spec": spec})
    assert response.status_code == 400
    assert "hold is true or false" in response.content.decode()
    assert not Workload.objects.exists()
    response = browser.post("/submit/", {"spec": spec.replace("hold: yes", "hold: true")})
    assert response.status_code in (200, 302)
    assert Workload.objects.get().hold == "user"


def test_fairway_submit_f_refuses_hold_yes(monkeypatch, tmp_path, researcher, cluster):
    path = tmp_path / "job.yaml"
    path.write_text("budget: nlp/olmo\ngpu_model: A100\ncommand: [python]\nmin_runtime: 1h\nhold: yes\n")
    err = run_cli(monkeypatch, researcher, "submit", "-f", str(path), expect=1)
    assert "hold is true or false" in err
    assert not Workload.objects.exists()


def test_the_api_answer_names_the_field_and_code(researcher_client, submission, cluster):
    body: dict[str, Any] = submission(hold="yes")
    response = researcher_client.post("/api/v1/workloads/quote/", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_hold"
