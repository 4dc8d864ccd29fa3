"""left55: a forged ``again`` (the submit page's "Submit again": ``?again=N`` and the form's hidden
field). Not a workload id, none such, or too long: the page says so in words, the form empty on a
GET (404) and as typed on a POST (400), nothing submitted or quoted (it answered Django's bare "Not
Found", the typed form lost). Another's workload whose spec the person may not read: sent to its
page with the reason (brk45), nothing submitted. A Playwright browser test of the GET."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.web.test_pages import _form


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("x", "'x' is not a workload id: nothing to submit again."),
        ("-1", "'-1' is not a workload id: nothing to submit again."),
        ("9" * 40, f"'{'9' * 40}' is not a workload id: nothing to submit again."),
        ("999999", "No workload #999999: nothing to submit again."),
        ("0", "No workload #0: nothing to submit again."),
    ],
)
def test_a_forged_again_on_the_page_is_said_and_the_form_is_a_new_one(researcher, cluster, raw, said):
    response = _client(researcher).get("/submit/", {"again": raw})

    page = html.unescape(response.content.decode())
    assert response.status_code == 404
    assert said in page and 'id="submit-form"' in page
    assert 'name="again"' not in page and "Submit a workload" in page


@pytest.mark.parametrize("raw", ["x", "9" * 19, "999999"])
@pytest.mark.parametrize("quote", [False, True])
def test_a_forged_again_in_a_post_keeps_the_form_and_submits_nothing(researcher, cluster, raw, quote):
    data = {**_form(), "again": raw, **({"quote": "1"} if quote else {})}
    response = _client(researcher).post("/submit/", data)

    page = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert "nothing to submit again" in page and 'id="quote-table"' not in page
    assert 'value="pretrain"' in page  # the form as typed
    assert Workload.objects.count() == 0


def test_another_users_private_spec_is_not_submitted_again_by_a_post(researcher, outsider, cluster, submit_kwargs):
    old = do_submit_workload(researcher, **submit_kwargs())
    response = _client(outsider).post("/submit/", {**_form(), "again": str(old.pk), "keep_secrets": "1"})

    assert (response.status_code, response.url) == (302, f"/workloads/{old.pk}/")
    assert Workload.objects.count() == 1


def test_the_browser_shows_why_the_form_is_empty(new_page, researcher, cluster):
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/?again=abc")

    assert "'abc' is not a workload id: nothing to submit again." in page.inner_text("main, body")
    assert page.input_value("#id_name") == ""
    assert not page.locator("#again-note").count()
