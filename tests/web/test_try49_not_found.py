"""tryout49: a mistyped workload number on the web (/workloads/99/) answered Django's bare "Not
Found — The requested resource was not found on this server.", without the site's navigation, where
the API and `fairway show 99` say "No workload 99.". The pages' 404 is now the site's page naming
what was looked for in the API's words (``config.api.no_such``)."""

from __future__ import annotations

import html

from django.test import Client

from tests.browser import log_in


def test_a_missing_workload_page_names_it_inside_the_site(new_page, researcher):
    page = new_page()
    log_in(page, "researcher")
    answer = page.goto("/workloads/99/")
    assert answer is not None and answer.status == 404
    assert page.locator("#not-found").inner_text() == "No workload 99."
    assert page.locator("header.top nav a", has_text="Workloads").is_visible()


def test_actions_on_a_missing_workload_and_unknown_pages_say_so(researcher):
    client = Client()
    client.force_login(researcher)
    answer = client.post("/workloads/99/cancel/")
    assert answer.status_code == 404 and b"No workload 99." in answer.content
    answer = client.get("/clusters/nope/")
    assert answer.status_code == 404 and "No cluster 'nope'." in html.unescape(answer.content.decode())
    answer = client.get("/no/such/page/")
    assert answer.status_code == 404 and b"Nothing at /no/such/page/." in answer.content


def test_the_api_keeps_its_json_404(researcher_client):
    answer = researcher_client.get("/api/v1/workloads/99/")
    assert answer.status_code == 404 and answer.json() == {"detail": "No workload 99.", "code": "not_found"}
