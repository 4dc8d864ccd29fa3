"""pages46 (tryout46): ``/budgets/?cluster=nope`` and ``/budgets/?foo=1`` were the whole page, 200,
while ``GET /api/v1/budgets/tree/?cluster=nope`` is a 400 naming the parameter. The page reads its
parameters as the API does (``scheduler.api.params.cluster_only_params``): one cluster, or a 400
page saying what is wrong over every cluster; the clusters page (occupancy and hosts, the API's
``metrics/``) the same."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.services import do_create_cluster


def _page(user):
    web = Client()
    web.force_login(user)
    return web


def test_the_budgets_page_shows_the_cluster_asked(researcher, cluster):
    do_create_cluster("h100")
    web = _page(researcher)
    text = web.get("/budgets/", {"cluster": "h100"}).content.decode()
    assert "h100: " in text and "default: " not in text
    assert '<option value="h100" selected>' in text
    every = web.get("/budgets/").content.decode()
    assert "h100: " in every and "default: " in every


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"cluster": "nope"}, "cluster: No cluster &#x27;nope&#x27;."),
        ({"foo": "1"}, "foo: no such parameter (the parameters are: cluster)"),  # the page's own: no format (words47)
        ({"cluster": ["default", "h100"]}, "cluster: give it once"),
    ],
)
def test_a_bad_parameter_is_a_400_page_saying_it_as_the_api_does(researcher, cluster, query, words):
    do_create_cluster("h100")
    response = _page(researcher).get("/budgets/", query)
    assert response.status_code == 400
    text = response.content.decode()
    assert words in text
    assert "default: " in text and "h100: " in text  # every cluster's standing under the error
    api = Client()
    api.force_login(researcher)
    refused = api.get("/api/v1/budgets/tree/", query)
    assert refused.status_code == 400 and words.split(":")[0] in refused.json()


@pytest.mark.parametrize(
    ("path", "query", "words"),
    [
        ("/clusters/", {"cluster": "nope"}, "cluster: No cluster &#x27;nope&#x27;."),
        ("/clusters/", {"state": "draining"}, "state: no such parameter"),
        ("/clusters/default/", {"cluster": "default"}, "cluster: no such parameter (there are none)"),
    ],
)
def test_the_clusters_page_refuses_a_parameter_it_does_not_read(researcher, cluster, path, query, words):
    response = _page(researcher).get(path, query)
    assert response.status_code == 400
    assert words in response.content.decode()


def test_the_clusters_page_shows_the_cluster_asked(researcher, cluster):
    do_create_cluster("h100")
    web = _page(researcher)
    response = web.get("/clusters/", {"cluster": "h100"})
    assert response.status_code == 200
    text = response.content.decode()
    assert 'href="/clusters/h100/"' in text and 'href="/clusters/default/"' not in text


def test_the_budgets_cluster_form_in_a_browser(new_page, researcher, cluster):
    """The form under the heading picks one cluster; a bad one says so, on the clusters page too
    (tests/browser.py; skipped without Chromium)."""
    from tests.browser import log_in

    do_create_cluster("h100")
    page = new_page()
    log_in(page, researcher.username)
    page.goto("/budgets/?cluster=nope")
    assert "No cluster 'nope'." in page.locator(".param-errors").inner_text()
    page.select_option(".budgets-cluster select[name=cluster]", "h100")
    page.click(".budgets-cluster button[type=submit]")
    page.wait_for_url("**/budgets/?cluster=h100")
    assert page.locator("h2").all_inner_texts()[0].startswith("h100")
    assert page.locator(".param-errors").count() == 0
    page.goto("/clusters/?cluster=nope")  # the clusters page's list of them, over every cluster
    assert page.locator(".param-errors").inner_text() == "cluster: No cluster 'nope'."
    assert page.locator("h2 a[href='/clusters/default/']").count() == 1
