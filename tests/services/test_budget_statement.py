"""Accounting statement: GPU-hours by UTC day, allocated vs unallocated, by project and user (issue 6, point 4)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime

import pytest
from django.core.management import call_command
from django.urls import reverse

from budgets.models import UsageEntry
from budgets.statement import StatementError, budget_statement, parse_range, statement_csv
from scheduler.models import GPU, Attempt, AttemptGPU, Workload
from tests.conftest import PASSWORD

D1, D2 = date(2026, 3, 1), date(2026, 3, 2)


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def ledger(org_tree, researcher, teammate, hosts):
    gpus = list(GPU.objects.filter(host__name="a100-1").order_by("index"))
    free = iter(gpus)

    def run(owner, budget, n, start, end, *, allocated=True, unfunded=False):
        w = Workload.objects.create(
            name="w",
            owner=owner,
            budget=org_tree[budget],
            cluster=hosts["a100-1"].cluster,
            gpu_model="A100",
            gpu_count=n,
            command=["true"],
            min_runtime_s=3600 if allocated else 0,
            submitted_at=start,
            state=Workload.State.SUCCEEDED,
        )
        a = Attempt.objects.create(
            workload=w,
            number=1,
            host=hosts["a100-1"],
            allocated=allocated,
            unfunded=unfunded,
            placed_at=start,
            started_at=start,
            ended_at=end,
            end_reason="succeeded" if end else "",
        )
        AttemptGPU.objects.bulk_create([AttemptGPU(attempt=a, gpu=next(free), open=end is None) for _ in range(n)])

    run(researcher, "nlp/olmo", 2, at(1, 22), at(2, 1, 30))  # across midnight: 2×2 h, then 2×1.5 h
    run(teammate, "nlp/olmo", 1, at(2, 10), at(2, 12), allocated=False)  # unallocated 2 h
    run(researcher, "nlp/tulu", 1, at(2, 0), at(2, 6), unfunded=True)  # capped: unallocated 6 h
    run(researcher, "vision/sam", 1, at(1, 0), at(1, 5))  # another subtree: not in nlp's statement
    run(researcher, "nlp/olmo", 1, datetime(2026, 2, 28, 23, tzinfo=UTC), at(1, 1))  # 1 h of it on Mar 1
    run(researcher, "nlp/olmo", 1, at(3, 0), at(3, 5))  # after the range
    cluster = hosts["a100-1"].cluster
    UsageEntry.objects.create(budget=org_tree["nlp/olmo"], cluster=cluster, start=at(2, 23), end=at(3, 1), gpus=4)
    UsageEntry.objects.create(
        budget=org_tree["nlp/olmo"], cluster=cluster, start=at(1, 12), end=at(1, 12), gpu_seconds=7200
    )
    return org_tree


EXPECTED = [
    ("2026-03-01", "nlp/olmo", "(usage entry)", 2.0, 0.0),
    ("2026-03-01", "nlp/olmo", "researcher", 5.0, 0.0),
    ("2026-03-02", "nlp/olmo", "(usage entry)", 4.0, 0.0),
    ("2026-03-02", "nlp/olmo", "researcher", 3.0, 0.0),
    ("2026-03-02", "nlp/olmo", "teammate", 0.0, 2.0),
    ("2026-03-02", "nlp/tulu", "researcher", 0.0, 6.0),
]


def _plain(rows):
    return [
        (r.day.isoformat(), r.project, r.user, round(r.allocated_gpu_hours, 6), round(r.unallocated_gpu_hours, 6))
        for r in rows
    ]


def test_statement_splits_at_midnight_and_separates_unallocated(ledger):
    assert _plain(budget_statement(ledger["nlp"], D1, D2)) == EXPECTED
    assert _plain(budget_statement(ledger["nlp/tulu"], D1, D2)) == [EXPECTED[-1]]
    assert _plain(budget_statement(ledger["vision"], D2, D2)) == []


def test_open_attempts_count_until_now(ledger, researcher):
    a = Attempt.objects.get(started_at=at(3, 0))
    Attempt.objects.filter(pk=a.pk).update(ended_at=None)
    rows = budget_statement(ledger["nlp/olmo"], date(2026, 3, 3), date(2026, 3, 3), now=at(3, 2))
    assert [(r.user, r.allocated_gpu_hours) for r in rows] == [("(usage entry)", 4.0), ("researcher", 2.0)]


def test_csv_and_the_management_command(ledger, tmp_path):
    text = statement_csv(ledger["nlp"], budget_statement(ledger["nlp"], D1, D2))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == [
        "budget",
        "day",
        "project",
        "user",
        "allocated_gpu_hours",
        "unallocated_gpu_hours",
        "total_gpu_hours",
    ]
    assert rows[2] == ["nlp", "2026-03-01", "nlp/olmo", "researcher", "5.0000", "0.0000", "5.0000"]
    assert len(rows) == 1 + len(EXPECTED)
    out = tmp_path / "s.csv"
    call_command("budget_statement", "nlp", "--since", "2026-03-01", "--until", "2026-03-02", "--out", str(out))
    assert out.read_text() == text
    buffer = io.StringIO()
    call_command(
        "budget_statement", str(ledger["nlp"].pk), "--since", "2026-03-01", "--until", "2026-03-02", stdout=buffer
    )
    assert buffer.getvalue() == text


@pytest.mark.parametrize(
    ("since", "until", "field", "code"),
    [
        ("2026-13-01", "", "since", "invalid_date"),
        ("", "yesterday", "until", "invalid_date"),
        ("2026-03-05", "2026-03-01", "since", "invalid_range"),
        ("2024-01-01", "2026-03-01", "since", "range_too_long"),
    ],
)
def test_bad_ranges_are_refused(since, until, field, code):
    with pytest.raises(StatementError) as err:
        parse_range(since, until)
    assert (err.value.field, err.value.code) == (field, code)


def test_an_until_in_the_first_days_a_date_holds_defaults_since_to_the_first_day():
    # brk31: ``until=0001-01-01`` without ``since`` took 30 days off the first date (OverflowError, a 500)
    assert parse_range(None, "0001-01-01") == (date.min, date.min)
    assert parse_range("", "0001-01-10") == (date.min, date(1, 1, 10))


def test_default_range_is_the_last_30_days():
    assert parse_range(None, "", today=date(2026, 3, 30)) == (date(2026, 3, 1), date(2026, 3, 30))


def test_api_statement_for_members_and_admins(ledger, researcher, outsider, admin, api_client_for):
    nlp = ledger["nlp/olmo"]
    url = f"/api/v1/budgets/{nlp.pk}/statement.csv?since=2026-03-01&until=2026-03-02"
    answer = api_client_for(researcher).get(url)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    lines = answer.content.decode().splitlines()
    assert lines[0].startswith("budget,day,project,user") and len(lines) == 1 + 5
    assert api_client_for(admin).get(url).status_code == 200
    assert api_client_for(outsider).get(url).status_code == 403
    assert api_client_for(None).get(url).status_code in (401, 403)
    bad = api_client_for(researcher).get(f"/api/v1/budgets/{nlp.pk}/statement.csv?since=2026-03-05&until=2026-03-01")
    assert bad.status_code == 400
    assert bad.json() == {"since": ["since (2026-03-05) is after until (2026-03-01)."], "code": "invalid_range"}
    assert api_client_for(researcher).get(reverse("budget-statement-csv", args=[nlp.pk])).status_code == 200


def test_admin_action_downloads_the_statement(ledger, admin, client):
    client.login(username="admin", password=PASSWORD)
    answer = client.post(
        reverse("admin:budgets_budget_changelist"),
        {"action": "download_statement", "_selected_action": [ledger["nlp"].pk, ledger["vision"].pk]},
    )
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    assert answer.content.decode().startswith("budget,day,project,user")


def test_a_statement_range_reads_durations_as_history_and_the_pyramid_do():
    """left36: ``statement.csv?since=7d`` was refused ("is not a date (YYYY-MM-DD)") where history
    and the pyramid read ``7d``; each bound is read by their parser and covers its UTC day."""
    from datetime import UTC, datetime

    now = datetime(2026, 3, 30, 1, 30, tzinfo=UTC)
    assert parse_range("7d", None, now=now) == (date(2026, 3, 23), date(2026, 3, 30))
    assert parse_range("2w", "36h", now=now) == (date(2026, 3, 16), date(2026, 3, 28))
    assert parse_range("2026-03-01T23:30Z", "2026-03-02", now=now) == (date(2026, 3, 1), date(2026, 3, 2))
    with pytest.raises(StatementError) as err:
        parse_range("7 days", None, now=now)
    assert (err.value.field, err.value.code) == ("since", "invalid_date")
    assert "a duration back from now (e.g. 7d, 36h, 2w)" in err.value.message


def test_api_statement_takes_a_duration(ledger, researcher, api_client_for):
    url = f"/api/v1/budgets/{ledger['nlp/olmo'].pk}/statement.csv?since=7d&until=1d"
    response = api_client_for(researcher).get(url)
    assert response.status_code == 200, response.content
