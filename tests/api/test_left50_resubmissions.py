"""left50: a resubmission's origin was worded three ways ("again from" by ``fairway resubmit``,
"submitted again from" on the page and in ``fairway show``, "resubmitted from" in its event): one
function words it now (``fairway_cli.words.resubmitted_from_text``, and ``resubmitted_as_text`` for
the other way), called by every surface. And resubmissions are listable: ``?resubmitted_from=ID``
on the workload list (``fairway ls --resubmitted-from ID``), and a workload's detail names the ids it
was resubmitted as (``resubmissions``), as its page does (docs/jobs.md "Submit again")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from fairway_cli.words import resubmitted_as_text, resubmitted_from_text
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli
from tests.conftest import PASSWORD

URL = "/api/v1/workloads/"


@pytest.fixture
def old(researcher: Any, submit_kwargs: Any) -> Workload:
    return do_submit_workload(researcher, **submit_kwargs())


def _again(client: Any, pk: int) -> int:
    r = client.post(f"{URL}{pk}/resubmit/", {}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def test_the_words_come_from_one_function():
    assert resubmitted_from_text(12) == "resubmitted from #12"
    assert resubmitted_as_text([13, 14]) == "resubmitted as #13, #14"


def test_every_surface_words_the_origin_alike(monkeypatch, researcher, researcher_client, old):
    out = run_cli(monkeypatch, researcher, "resubmit", str(old.pk))
    new = Workload.objects.exclude(pk=old.pk).get()
    words = resubmitted_from_text(old.pk)
    assert f"submitted #{new.pk} pretrain ({words}):" in out
    assert researcher_client.get(f"{URL}{new.pk}/").json()["events"][0]["message"].startswith(f"{words}; ")
    assert words in run_cli(monkeypatch, researcher, "show", str(new.pk))
    assert resubmitted_as_text([new.pk]) in run_cli(monkeypatch, researcher, "show", str(old.pk))
    client = Client()
    assert client.login(username="researcher", password=PASSWORD)
    page = client.get(f"/workloads/{new.pk}/").content.decode()
    assert f'<dt>resubmitted from</dt><dd><a href="/workloads/{old.pk}/" id="resubmitted-from">#{old.pk}</a>' in page
    assert "<dt>resubmitted as</dt>" in client.get(f"/workloads/{old.pk}/").content.decode()
    for text in (page, out):
        assert "again from" not in text and "submitted again as" not in text


def test_the_list_filters_by_origin(researcher_client, old, submit_kwargs, researcher):
    first, second = _again(researcher_client, old.pk), _again(researcher_client, old.pk)
    _again(researcher_client, first)  # a resubmission of a resubmission is not old's
    do_submit_workload(researcher, **submit_kwargs(name="other"))
    r = researcher_client.get(URL, {"resubmitted_from": old.pk})
    assert r.status_code == 200, r.json()
    assert [w["id"] for w in r.json()["results"]] == [second, first]
    assert r.json()["count"] == 2


@pytest.mark.parametrize("value", ["abc", "0", "-1", "99999"])
def test_a_bad_origin_is_refused_naming_it(researcher_client, old, value):
    r = researcher_client.get(URL, {"resubmitted_from": value})
    assert r.status_code == 400, r.json()
    assert "resubmitted_from" in r.json()


def test_the_detail_names_its_resubmissions(researcher_client, old):
    assert researcher_client.get(f"{URL}{old.pk}/").json()["resubmissions"] == []
    first, second = _again(researcher_client, old.pk), _again(researcher_client, old.pk)
    assert researcher_client.get(f"{URL}{old.pk}/").json()["resubmissions"] == [first, second]
    assert researcher_client.get(f"{URL}{first}/").json()["resubmissions"] == []


def test_fairway_ls_lists_the_resubmissions(monkeypatch, researcher, researcher_client, old):
    new = _again(researcher_client, old.pk)
    out = run_cli(monkeypatch, researcher, "ls", "--all", "--json", "--resubmitted-from", str(old.pk))
    assert [w["id"] for w in json.loads(out)] == [new]
