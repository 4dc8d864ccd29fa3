"""left37: the workload list's ``?page=`` by the API's rule for ``limit`` and ``offset``."""

from __future__ import annotations

import pytest

from config.pagination import whole_number_problem
from scheduler.services import do_submit_workload


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "1_0", "\u0661", "2.0", " 1"])
def test_a_page_that_is_no_whole_number_is_a_400_naming_it_and_lists_none(browser, researcher, submit_kwargs, raw):
    """``Paginator.get_page`` read ``?page=abc``, ``?page=-1`` or Arabic-Indic digits as page 1:
    a link built wrong showed the first 50 workloads as its answer. The API refuses such a
    ``limit`` or ``offset`` (400, ``config.pagination``); the page names it as it names a filter."""
    do_submit_workload(researcher, **submit_kwargs(name="mine"))

    response = browser.get("/workloads/", {"page": raw})

    assert response.status_code == 400
    assert f"page: {whole_number_problem('page', raw, 1)}".replace(">", "&gt;") in response.content.decode()
    assert list(response.context["page"]) == []


def test_a_page_past_the_last_redirects_and_page_one_of_nothing_is_empty(browser, researcher, submit_kwargs):
    """``?page=999`` answered the last page as if it were page 999; it redirects there now (left52:
    tests/web/test_left52.py), its address saying which page it is."""
    do_submit_workload(researcher, **submit_kwargs(name="mine"))

    assert browser.get("/workloads/", {"page": "2"})["Location"] == "/workloads/"
    assert [w.name for w in browser.get("/workloads/", {"page": "1"}).context["page"]] == ["mine"]
    assert browser.get("/workloads/", {"page": ""}).status_code == 200
    assert browser.get("/workloads/", {"page": "1", "state": "running"}).status_code == 200
    assert browser.get("/workloads/", {"page": "9" * 100}).status_code == 302
