"""The submit page's "Quote first" button: a quote table beside the filled form, nothing submitted."""

from __future__ import annotations

import re

from scheduler.models import Workload, WorkloadEvent
from tests.web.test_pages import _form


def test_quote_first_shows_the_quote_and_submits_nothing(browser):
    response = browser.post("/submit/", {**_form(min_runtime="1h"), "quote": "1"})

    assert response.status_code == 200
    page = response.content.decode()
    table = page[page.index('id="quote-table"') :]
    rows = re.findall(r"<tr(?: class=\"yours\")?><td>(.*?)</td>", table)
    assert [re.sub("<.*?>", "", r).strip() for r in rows] == ["0 (unallocated)", "30m", "1h (yours)", "2h", "8h", "1d"]
    assert "2.00 GPU-h" in table and "32.00 GPU-h" in table  # 4 GPUs × 30 min, × 8 h
    assert 'value="pretrain"' in page  # the form keeps what was typed
    assert Workload.objects.count() == 0 and WorkloadEvent.objects.count() == 0


def test_quote_first_shows_the_submissions_errors(browser):
    response = browser.post("/submit/", {**_form(min_runtime="48h"), "quote": "1"})
    assert response.status_code == 400
    assert "at most" in response.content.decode()
    assert 'id="quote-table"' not in response.content.decode()
    assert Workload.objects.count() == 0


def test_the_quote_prints_each_ratio_after_as_the_api_and_the_cli_write_it(browser, researcher, monkeypatch):
    # The form and the CLI printed the same quote with 4 decimals and 4 significant digits
    # ("0.0538×" beside "0.05379×"). Both now print the API's ratio_after_text.
    import json

    from tests.cli.inprocess import run_cli

    page = browser.post("/submit/", {**_form(min_runtime="1h"), "quote": "1"}).content.decode()
    table = page[page.index('id="quote-table"') :]
    shown = re.findall(r"<td>([^<]*)×</td></tr>", table)
    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "1h", "--", "python")
    cli_ratios = [
        line.split()[-1].removesuffix("×") for line in run_cli(monkeypatch, researcher, *argv).splitlines()[2:8]
    ]
    api = [q["ratio_after_text"] for q in json.loads(run_cli(monkeypatch, researcher, "--json", *argv))["quotes"]]

    assert len(shown) == 6 and len(set(shown)) == 6
    assert shown == cli_ratios == api
