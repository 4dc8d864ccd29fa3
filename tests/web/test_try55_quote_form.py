"""try55: "Quote first" on the submit page asked for a command and a minimum runtime ("This field
is required." twice) where ``fairway submit --quote`` and the API ask for neither: the quote runs
nothing, and without a minimum runtime it prices the usual ones."""

from __future__ import annotations

import re

from scheduler.models import Workload
from tests.web.test_pages import _form


def test_quote_first_needs_no_command_nor_minimum_runtime(browser):
    response = browser.post("/submit/", {**_form(command="", min_runtime=""), "quote": "1"})

    page = response.content.decode()
    assert response.status_code == 200, re.findall(r'class="errorlist[^"]*">(.*?)</ul>', page)
    table = page[page.index('id="quote-table"') :]
    rows = re.findall(r"<tr(?: class=\"yours\")?><td>(.*?)</td>", table)
    assert [re.sub("<.*?>", "", r).strip() for r in rows] == ["0 (unallocated)", "30m", "2h", "8h", "1d"]
    assert Workload.objects.count() == 0


def test_submitting_still_needs_both(browser):
    response = browser.post("/submit/", _form(command="", min_runtime=""))
    assert response.status_code == 400
    assert response.content.decode().count("This field is required.") == 2
    assert Workload.objects.count() == 0


def test_a_quotes_bad_command_is_still_refused(browser):
    response = browser.post("/submit/", {**_form(command="python 'unclosed", min_runtime=""), "quote": "1"})
    assert response.status_code == 400
    assert "Cannot split the command" in response.content.decode()
