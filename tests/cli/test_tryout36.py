"""tryout36: faults of the CLI found by a new lab's walk through the README; each test names what it was."""

from __future__ import annotations

from typing import Any

from budgets.statement import STATEMENT_REFUSAL
from fairway_cli import cli as fairway_cli
from scheduler.models import Workload
from scheduler.services import do_cancel_workload, do_submit_workload
from tests.cli.inprocess import run_cli


def test_logs_follow_of_a_pending_workload_waits_for_its_start(researcher, hosts, submit_kwargs, monkeypatch):
    """``fairway submit … && fairway logs ID -f`` stopped at once with "This workload has no attempt
    yet. (no_attempt)": following a pending workload waits for its first attempt, and says so once;
    one that ends without an attempt (canceled while pending) stops the wait with exit 1."""
    workload = do_submit_workload(researcher, **submit_kwargs())
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:  # the second poll finds it still pending; then its owner cancels it
            do_cancel_workload(researcher, Workload.objects.get(pk=workload.pk))

    monkeypatch.setattr(fairway_cli.time, "sleep", sleep)
    err = run_cli(monkeypatch, researcher, "logs", str(workload.pk), "-f", expect=fairway_cli.EXIT_API)
    assert f"#{workload.pk} ended canceled without an attempt: no log" in err
    assert len(sleeps) == 2


def test_logs_follow_says_once_that_it_waits(researcher, hosts, submit_kwargs, monkeypatch):
    workload = do_submit_workload(researcher, **submit_kwargs())
    polls: list[Any] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            do_cancel_workload(researcher, Workload.objects.get(pk=workload.pk))

    monkeypatch.setattr(fairway_cli.time, "sleep", sleep)
    out_and_err: list[str] = []
    original = fairway_cli.main

    def main(argv: list[str], out: Any, err: Any) -> int:
        code = original(argv, out=out, err=err)
        out_and_err.append(out.getvalue())
        return code

    monkeypatch.setattr(fairway_cli, "main", main)
    run_cli(monkeypatch, researcher, "logs", str(workload.pk), "-f", expect=fairway_cli.EXIT_API)
    assert out_and_err == [f"[#{workload.pk} is pending: waiting for its first attempt to start]\n"]


def test_logs_without_follow_of_a_pending_workload_still_exits_1(researcher, hosts, submit_kwargs, monkeypatch):
    workload = do_submit_workload(researcher, **submit_kwargs())
    err = run_cli(monkeypatch, researcher, "logs", str(workload.pk), expect=fairway_cli.EXIT_API)
    assert "has no attempt yet" in err and "(no_attempt)" in err


def test_statement_prints_a_budget_s_csv_by_its_path(researcher, outsider, hosts, monkeypatch):
    """The statement (README: members of the budget, admins) had no CLI: a researcher needed the
    budget's id and a token for ``GET /api/v1/budgets/{id}/statement.csv``. ``fairway statement
    nlp/olmo`` prints it, refused as the API refuses it."""
    out = run_cli(monkeypatch, researcher, "statement", "nlp/olmo", "--since", "7d")
    assert out.splitlines()[0] == "budget,day,project,user,allocated_gpu_hours,unallocated_gpu_hours,total_gpu_hours"
    err = run_cli(monkeypatch, researcher, "statement", "nlp/gpt", expect=fairway_cli.EXIT_API)
    assert "No budget 'nlp/gpt'. `fairway budgets` lists them." in err
    err = run_cli(monkeypatch, outsider, "statement", "nlp/olmo", expect=fairway_cli.EXIT_API)
    assert f"{STATEMENT_REFUSAL} (forbidden)" in err
