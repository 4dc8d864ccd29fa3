"""num42: one rule for a submission without a budget, in the service, for the API, the page and the CLI.

The CLI picked the requester's one submit budget; the API answered "This field is required." and
the page's form required a choice. The service now takes the one live leaf the requester may
submit to, and with several (or none) refuses in words that list them; the GPU model's blank
choice no longer says "any (the cluster's only model)" on a cluster of several models."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.services import do_add_membership
from scheduler.models import Workload
from scheduler.services import SubmissionError, do_submit_workload
from tests.cli.inprocess import run_cli

SEVERAL = "Name a budget: you may submit to several: nlp/olmo, nlp/tulu, vision/sam."


def test_the_service_takes_the_one_budget_the_owner_may_submit_to(researcher, submit_kwargs):
    for missing in (None, ""):
        workload = do_submit_workload(researcher, **submit_kwargs(budget=missing))
        assert workload.budget.path == "nlp/olmo"


def test_the_service_lists_the_budgets_when_there_are_several_or_says_there_are_none(
    researcher, admin, org_tree, submit_kwargs
):
    with pytest.raises(SubmissionError) as error:
        do_submit_workload(admin, **submit_kwargs(budget=None))
    assert [(p.code, p.field, p.message) for p in error.value.problems] == [("unknown_budget", "budget", SEVERAL)]
    do_add_membership(researcher, org_tree["vision/sam"])
    with pytest.raises(SubmissionError) as error:
        do_submit_workload(researcher, **submit_kwargs(budget=None))
    assert error.value.problems[0].message == "Name a budget: you may submit to several: nlp/olmo, vision/sam."
    from accounts.models import User

    nobody = User.objects.create_user("nobody", password="x")
    with pytest.raises(SubmissionError) as error:
        do_submit_workload(nobody, **submit_kwargs(budget=None))
    assert error.value.problems[0].message == "Name a budget: you may submit to no budget yet."
    assert not Workload.objects.exists()


def test_the_api_submits_without_a_budget_to_the_only_one(
    researcher_client, admin, api_client_for, submission, cluster
):
    body = submission()
    del body["budget"]
    answer = researcher_client.post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["budget"] == "nlp/olmo"
    assert researcher_client.post("/api/v1/workloads/", {**body, "budget": None}, format="json").status_code == 201
    refused = api_client_for(admin).post("/api/v1/workloads/", body, format="json")
    assert refused.status_code == 400
    assert SEVERAL in refused.content.decode()
    quote = researcher_client.post("/api/v1/workloads/quote/", body, format="json")
    assert quote.status_code == 200, quote.content


def _form(**overrides):
    data = {
        "name": "pretrain",
        "image": "ghcr.io/lab/train:1",
        "command": "python train.py",
        "cluster": "default",
        "gpu_model": "A100",
        "gpu_count": "4",
        "min_runtime": "2h",
    }
    data.update(overrides)
    return data


def test_the_page_submits_without_a_budget_to_the_only_one(researcher, admin, cluster):
    browser = Client()
    browser.force_login(researcher)
    answer = browser.post("/submit/", _form())
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert Workload.objects.get().budget.path == "nlp/olmo"
    # several: a blank first choice, and the refusal lists them beside the field
    staff = Client()
    staff.force_login(admin)
    page = staff.get("/submit/").content.decode()
    assert '<option value="" selected>choose one</option>' in page
    refused = staff.post("/submit/", _form(budget=""))
    assert refused.status_code == 400
    assert refused.context["form"].errors["budget"] == [SEVERAL]


def test_the_cli_leaves_the_choice_to_the_server(researcher, admin, org_tree, hosts, monkeypatch):
    out = run_cli(monkeypatch, researcher, "submit", "-m", "A100", "-M", "1h", "--", "python", "train.py")
    workload = Workload.objects.get()
    assert f"submitted #{workload.pk} python: 1 × A100 on default, budget nlp/olmo" in out
    err = run_cli(monkeypatch, admin, "submit", "-m", "A100", "-M", "1h", "--", "python", expect=1)
    assert SEVERAL in err


def test_the_gpu_model_blank_choice_says_what_it_means(researcher, cluster):
    """The hosts fixture's cluster has A100 and H100 hosts: the blank choice said "any (the
    cluster's only model)", which the service refuses there."""
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/submit/").content.decode()
    assert "any (the cluster's only model)" not in page
    assert '<option value="" selected>the cluster&#x27;s only model (name one where it has several)</option>' in page


def test_a_member_of_archived_budgets_only_is_told_they_are_archived(researcher, org_tree, submit_kwargs):
    """try56: once leadership archived bob's only budget, `fairway submit` told him "Name a budget:
    you may submit to no budget yet." as if he had never been given one."""
    from accounts.models import Membership
    from budgets.services import do_archive_budget

    assert {m.budget.path for m in Membership.objects.filter(user=researcher)} == {"nlp/olmo"}
    do_archive_budget(org_tree["nlp/olmo"])

    with pytest.raises(SubmissionError) as error:
        do_submit_workload(researcher, **submit_kwargs(budget=None))

    assert error.value.problems[0].message == (
        "Name a budget: you may submit to no budget (archived: nlp/olmo; "
        "ask leadership for a membership of a live one)."
    )
    assert not Workload.objects.exists()
