"""lim42: the most pending + running workloads one user may hold (Slurm's MaxSubmitJobs,
``FAIRWAY_MAX_SUBMITTED_PER_USER``), refused alike by the service, the API, the page and the CLI."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from scheduler.models import Workload
from scheduler.services import (
    SUBMIT_LIMIT_CODE,
    SubmissionError,
    do_cancel_workload,
    do_submit_workload,
    submitted_count,
    submitted_count_oracle,
)
from tests.cli.inprocess import run_cli


@pytest.fixture
def limit(settings: Any) -> Any:
    def set_to(n: int) -> None:
        settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": n}

    return set_to


def test_the_default_is_ten_thousand(settings):
    assert settings.FAIRWAY["MAX_SUBMITTED_PER_USER"] == 10_000


def test_a_submission_past_the_limit_is_refused_and_creates_nothing(researcher, submit_kwargs, limit):
    limit(3)
    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs())
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs())
    assert refused.value.code == SUBMIT_LIMIT_CODE and refused.value.status == 429
    assert "3 workloads pending or running" in refused.value.message
    assert "at most 3" in refused.value.message
    assert Workload.objects.count() == 3


def test_array_members_count_one_by_one(researcher, submit_kwargs, limit):
    limit(5)
    do_submit_workload(researcher, **submit_kwargs(array="0-2"))
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(array="0-2"))  # 3 + 3 > 5
    assert refused.value.code == SUBMIT_LIMIT_CODE and "array of 3" in refused.value.message
    assert Workload.objects.count() == 3
    do_submit_workload(researcher, **submit_kwargs(array="0-1"))  # 3 + 2 = 5: allowed
    assert Workload.objects.count() == 5


def test_ended_work_and_other_users_work_do_not_count(researcher, teammate, submit_kwargs, limit):
    limit(2)
    first = do_submit_workload(researcher, **submit_kwargs())
    do_submit_workload(researcher, **submit_kwargs())
    do_submit_workload(teammate, **submit_kwargs())  # the teammate's own count: 1
    do_cancel_workload(researcher, first)
    do_submit_workload(researcher, **submit_kwargs())  # the canceled one no longer counts
    assert Workload.objects.filter(owner=researcher).exclude(state=Workload.State.CANCELED).count() == 2


def test_zero_is_unlimited_and_a_quote_is_not_refused(researcher, submit_kwargs, limit):
    limit(1)
    do_submit_workload(researcher, **submit_kwargs())
    assert do_submit_workload(researcher, dry_run=True, **submit_kwargs()).pk is None  # a quote: no refusal
    limit(0)
    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs())


SPEC = "budget: nlp/olmo\ncluster: default\ngpu_model: A100\ngpu_count: 1\nmin_runtime: 0\ncommand: [x]\n"


def test_the_api_the_page_and_the_cli_refuse_in_one_wording(
    researcher, researcher_client, submission, submit_kwargs, limit, monkeypatch, tmp_path
):
    limit(1)
    do_submit_workload(researcher, **submit_kwargs())
    api = researcher_client.post("/api/v1/workloads/", submission(), format="json")
    assert api.status_code == 429, api.json()
    body = api.json()
    assert body["code"] == SUBMIT_LIMIT_CODE and "Retry-After" not in api.headers

    from tests.web.test_pages import _form

    browser = Client()
    browser.force_login(researcher)
    page = browser.post("/submit/", _form())
    assert page.status_code == 429  # as the API: a limit, not a bad form (left44; it was 400)
    assert body["detail"] in page.context["form"].non_field_errors()
    pasted = browser.post("/submit/", {"spec": SPEC})
    assert pasted.status_code == 429
    assert body["detail"] in pasted.context["spec_errors"]

    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    err = run_cli(monkeypatch, researcher, "submit", "-f", str(spec), expect=1)
    assert body["detail"] in err and SUBMIT_LIMIT_CODE in err
    assert Workload.objects.count() == 1


def test_the_count_is_one_indexed_statement(researcher, submit_kwargs):
    """The count reads (owner, state) of the index ``workload_owner_state`` (migration 0017)."""
    names = {index.name for index in Workload._meta.indexes}
    assert "workload_owner_state" in names
    fields = next(i.fields for i in Workload._meta.indexes if i.name == "workload_owner_state")
    assert fields == ["owner", "state"]


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    states=st.lists(st.sampled_from([s.value for s in Workload.State]), max_size=12),
    cap=st.integers(min_value=1, max_value=15),
)
def test_the_bounded_count_equals_a_plain_count_capped(researcher, teammate, submit_kwargs, states, cap):
    """Oracle: count the user's live workloads in Python, then cap; the service counts at most
    ``cap`` index entries (``submitted_count``)."""
    Workload.objects.all().delete()
    made = [do_submit_workload(researcher, **submit_kwargs()) for _ in states]
    do_submit_workload(teammate, **submit_kwargs())
    for w, state in zip(made, states, strict=True):
        Workload.objects.filter(pk=w.pk).update(state=state)
    live = [w for w in Workload.objects.filter(owner=researcher) if w.state not in Workload.FINAL_STATES]
    assert submitted_count(researcher.pk, cap) == submitted_count_oracle(researcher.pk, cap) == min(len(live), cap)
    assert connection.vendor in ("sqlite", "postgresql")
