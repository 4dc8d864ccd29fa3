"""words47: the pages' query parameters, refused in one wording.

- The workload list refused a parameter it does not read as "k: no such filter (the filters are
  …)", the API as "no such parameter (the parameters are: …)": one wording now
  (``scheduler.api.params.no_such_parameter_text``), each surface with its own names.
- The dashboard, a workload's page, the submit, notifications and tokens pages read no parameter
  (the submit page its ``again``) and ignored any other: ``/?clustr=a`` showed the page as if it were
  filtered. Each refuses it as the workload list does: said on the page, status 400, the page as
  it is otherwise. A page names only its own parameters (the API's endpoints also read DRF's
  ``format``, which the budgets, clusters and metrics pages listed and took)."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.api.filters import WorkloadFilter
from scheduler.api.params import no_such_parameter_text
from scheduler.services import do_submit_workload


def test_the_workload_list_refuses_a_parameter_in_the_apis_words(browser, researcher_client):
    response = browser.get("/workloads/", {"user": "rita"})
    assert response.status_code == 400
    names = [*WorkloadFilter.base_filters, "page"]
    words = no_such_parameter_text(names)
    assert response.context["filter_errors"] == [f"user: {words}"]
    assert words == f"no such parameter (the parameters are: {', '.join(sorted(names))})"
    assert f"user: {words}" in response.content.decode()
    api = researcher_client.get("/api/v1/workloads/", {"user": "rita"}).json()["user"]
    assert api == [no_such_parameter_text([*WorkloadFilter.base_filters, "format", "limit", "offset"])]
    bulk = browser.get("/workloads/bulk/", {"action": "hold", "user": "rita"})
    assert bulk.status_code == 400
    assert f"user: {no_such_parameter_text([*WorkloadFilter.base_filters, 'action'])}" in bulk.content.decode()


def test_no_parameters_is_said_so():
    assert no_such_parameter_text([]) == "no such parameter (there are none)"


def _pages(researcher, submit_kwargs) -> dict[str, tuple[str, list[str]]]:
    w = do_submit_workload(researcher, **submit_kwargs(name="mine"))
    return {
        "dashboard": ("/", []),
        "workload": (f"/workloads/{w.pk}/", []),
        "submit": ("/submit/", ["again"]),
        "notifications": ("/notifications/", []),
        "tokens": ("/tokens/", []),
        "budgets": ("/budgets/", ["cluster"]),
        "clusters": ("/clusters/", ["cluster"]),
        "cluster": ("/clusters/default/", []),
        "metrics": ("/metrics/", ["cluster", "since", "until"]),
    }


@pytest.mark.parametrize(
    "name", ["dashboard", "workload", "submit", "notifications", "tokens", "budgets", "clusters", "cluster", "metrics"]
)
def test_every_page_refuses_a_parameter_it_does_not_read(browser, researcher, submit_kwargs, name):
    path, names = _pages(researcher, submit_kwargs)[name]
    plain = browser.get(path)
    assert plain.status_code == 200
    assert "param-errors" not in plain.content.decode()
    for typo in ("clustr", "format"):
        refused = browser.get(path, {typo: "a"})
        assert refused.status_code == 400, (path, typo)
        page = refused.content.decode()
        assert f"<li>{typo}: {no_such_parameter_text(names)}</li>" in page, (path, typo)
        # the page as it is without it, the error over it
        assert page.split("<main", 1)[-1].count("<h1") == plain.content.decode().split("<main", 1)[-1].count("<h1")


def test_a_form_posted_from_a_refused_page_still_does_its_work(browser, researcher):
    """A POST's own fields are the form's: the query of the page it came from is not refused."""
    done = browser.post("/tokens/?clustr=a", {"name": "laptop"})
    assert done.status_code == 200 and "secret-once" in done.content.decode()


def test_the_dashboard_and_a_workload_page_in_a_browser(new_page, researcher, submit_kwargs):
    """The error shows over the page (tests/browser.py; skipped without Chromium)."""
    from tests.browser import log_in

    w = do_submit_workload(researcher, **submit_kwargs(name="mine"))
    page = new_page()
    log_in(page, researcher.username)
    answer = page.goto("/?clustr=a")
    assert answer is not None and answer.status == 400
    assert page.locator(".param-errors").inner_text() == "clustr: no such parameter (there are none)"
    assert page.locator("h1").inner_text().startswith("Hello")
    answer = page.goto(f"/workloads/{w.pk}/?tab=logs")
    assert answer is not None and answer.status == 400
    assert page.locator(".param-errors").inner_text() == "tab: no such parameter (there are none)"
    assert "mine" in page.locator("h1").inner_text()
    answer = page.goto("/submit/?agian=1")
    assert answer is not None and answer.status == 400
    assert page.locator(".param-errors").inner_text() == "agian: no such parameter (the parameters are: again)"
    page.goto("/")
    assert page.locator(".param-errors").count() == 0


def test_the_login_redirect_keeps_its_next():
    """The log-in page's ``next`` (and ``sso``) are its own: left as they are."""
    assert Client().get("/login/", {"next": "/workloads/"}).status_code == 200
