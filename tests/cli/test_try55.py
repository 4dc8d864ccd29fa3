"""try55, a new user's walk through the README: ``fairway cancel`` of several ids as ``scancel 3 8``,
and the log of a workload that ended without ever starting."""

from __future__ import annotations

import json

from fairway_cli.cli import EXIT_API, EXIT_USAGE
from scheduler.models import Workload
from scheduler.services import do_cancel_workload, do_submit_workload
from tests.cli.inprocess import run_cli


def test_cancel_takes_several_ids_as_scancel(monkeypatch, researcher, submit_kwargs):
    """``fairway cancel 3 8`` was a usage error ("unrecognized arguments: 8") though hold and
    release take several ids, and Slurm's ``scancel 3 8`` cancels both."""
    a, b = (do_submit_workload(researcher, **submit_kwargs(name=f"w{i}")) for i in range(2))

    out = run_cli(monkeypatch, researcher, "cancel", str(a.pk), f"#{b.pk}")

    assert out == f"#{a.pk} w0 canceled\n#{b.pk} w1 canceled\n"
    assert set(Workload.objects.values_list("state", flat=True)) == {"canceled"}


def test_one_refused_id_does_not_stop_the_others(monkeypatch, researcher, admin, submit_kwargs):
    a, b = (do_submit_workload(researcher, **submit_kwargs(name=f"w{i}")) for i in range(2))
    do_cancel_workload(admin, a)

    err = run_cli(monkeypatch, researcher, "cancel", str(a.pk), str(b.pk), expect=EXIT_API)

    assert err.startswith(f"fairway: #{a.pk}: ")
    assert Workload.objects.get(pk=b.pk).state == "canceled"


def test_cancel_of_one_id_answers_as_before_and_several_a_list_in_json(monkeypatch, researcher, submit_kwargs):
    a, b, c = (do_submit_workload(researcher, **submit_kwargs(name=f"w{i}")) for i in range(3))
    assert json.loads(run_cli(monkeypatch, researcher, "cancel", str(a.pk), "--json"))["id"] == a.pk
    answer = json.loads(run_cli(monkeypatch, researcher, "cancel", str(b.pk), str(c.pk), "--json"))
    assert [w["id"] for w in answer] == [b.pk, c.pk]


def test_bad_ids_change_nothing(monkeypatch, researcher, submit_kwargs):
    a = do_submit_workload(researcher, **submit_kwargs())
    assert "not a workload id" in run_cli(monkeypatch, researcher, "cancel", str(a.pk), "12x", expect=EXIT_USAGE)
    assert "not both" in run_cli(monkeypatch, researcher, "cancel", str(a.pk), "--mine", expect=EXIT_USAGE)
    assert "not both" in run_cli(monkeypatch, researcher, "cancel", str(a.pk), "--group", "1", expect=EXIT_USAGE)
    assert Workload.objects.get().state == "pending"


def test_logs_of_a_workload_canceled_before_it_started_says_it_never_ran(monkeypatch, researcher, submit_kwargs):
    """It said "This workload has no attempt yet.": there never will be one."""
    w = do_submit_workload(researcher, **submit_kwargs())
    do_cancel_workload(researcher, w)

    err = run_cli(monkeypatch, researcher, "logs", str(w.pk), expect=EXIT_API)

    assert "yet" not in err
    assert "This workload ended canceled without an attempt: it never ran." in err


def test_a_quote_needs_no_command(monkeypatch, researcher, cluster, researcher_client):
    """``fairway submit -g 2 --quote`` said "missing: the command": a quote runs nothing, and the
    answer (start, charge, ratio) does not depend on what would run."""
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-g", "2", "--quote")
    assert out.startswith(f"quote (nothing submitted): 2 × A100 on {cluster.name}, budget nlp/olmo\n")
    answer = researcher_client.post(
        "/api/v1/workloads/quote/", {"budget": "nlp/olmo", "gpu_model": "A100", "gpu_count": 2}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    assert Workload.objects.count() == 0
    # a submission still needs one, and a quote's bad command is still refused
    assert "the command" in run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-M", "1h", expect=EXIT_USAGE)
    bad = researcher_client.post(
        "/api/v1/workloads/quote/", {"budget": "nlp/olmo", "gpu_count": 1, "command": []}, format="json"
    )
    assert bad.status_code == 400 and "command" in str(bad.json())


def test_state_filters_take_any_case_as_squeue_t(monkeypatch, researcher, submit_kwargs):
    """``fairway ls --state RUNNING`` (squeue -t RUNNING) was refused "No state 'RUNNING'"."""
    w = do_submit_workload(researcher, **submit_kwargs())

    assert f"\n{w.pk:>2} " in "\n" + run_cli(monkeypatch, researcher, "ls", "--state", "Pending,RUNNING")
    out = run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "PENDING", "--dry-run")
    assert out.startswith("1 workload match: 1 to cancel")


def test_quotes_help_names_the_runtimes_as_its_table_writes_them():
    """The help said "24h" where the quote's table writes "1d"."""
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "fairway_cli", "submit", "--help"], capture_output=True, text=True)
    help_text = " ".join(shown.stdout.split())

    assert "(0, 30m, 2h, 8h, 1d, as its table writes them" in help_text and "24h" not in help_text


def test_not_logged_in_names_the_server_and_how_to_name_another(tmp_path, monkeypatch):
    """A first `fairway ls` said "not logged in: run `fairway login`", and `fairway login` then
    went to the default http://127.0.0.1:8000, which the message never named."""
    import io

    from fairway_cli import cli as fairway_cli

    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    err = io.StringIO()

    assert fairway_cli.main(["ls"], out=io.StringIO(), err=err) == fairway_cli.EXIT_AUTH
    assert err.getvalue() == (
        f"fairway: not logged in to {fairway_cli.DEFAULT_SERVER}: run `fairway login`, "
        "or `fairway login --server URL` for another server\n"
    )
