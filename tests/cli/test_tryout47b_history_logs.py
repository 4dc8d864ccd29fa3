"""tryout47b: ``fairway history``'s UTIL cell held a whole sentence ("not measured (its GPUs were
shared …)"), stretching the table to about 200 columns: the cell is short, the words once under
the table (``--json`` and ``fairway show`` keep them). ``fairway logs -f`` ended with exit 0 and
no word of how the workload ended: it says so on stderr, in ``fairway wait``'s words, and exits
as ``fairway wait`` would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fairway_cli import cli as fairway_cli
from fairway_cli.words import NOT_MEASURED_CELL, utilization_words
from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli import inprocess
from tests.cli.inprocess import run_cli, run_cli_streams

SHARED = utilization_words(None, "no_own_minute")


def _ended(researcher, submit_kwargs, cluster, code: int | None, name: str = "pretrain") -> Workload:
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name=name))
    run_tick(cluster.pk)
    attempt = Attempt.objects.get(workload=w)
    assert lifecycle.attempt_started(attempt.host, attempt.pk)
    assert lifecycle.attempt_exited(attempt.host, attempt.pk, exit_code=code)
    run_tick(cluster.pk)
    w.refresh_from_db()
    return w


def _rewrite(monkeypatch, user, path: str, change) -> None:
    """The CLI's calls answered in-process as ``user``, ``change(answer)`` applied to those of ``path``."""
    inprocess.answer_in_process(monkeypatch, user)
    answered = fairway_cli.Api.call

    def call(self: Any, method: str, p: str, **kwargs: Any) -> Any:
        data = answered(self, method, p, **kwargs)
        return change(data) if p == path else data

    monkeypatch.setattr(fairway_cli.Api, "call", call)
    monkeypatch.setattr(inprocess, "answer_in_process", lambda *a: None)  # run_cli: as set here


def test_history_shows_a_short_cell_and_the_words_once_under_the_table(monkeypatch, researcher, submit_kwargs, cluster):
    for i in range(3):
        _ended(researcher, submit_kwargs, cluster, 0, name=f"run{i}")
    whys = ["no_own_minute", "no_own_minute", "never_started"]

    def unmeasured(page: dict[str, Any]) -> dict[str, Any]:
        for row, why in zip(page["results"], whys, strict=True):
            row["utilization"], row["utilization_why"] = None, why
        return page

    _rewrite(monkeypatch, researcher, "workloads/history/", unmeasured)
    out = run_cli(monkeypatch, researcher, "history")
    lines = out.splitlines()
    table, notes = lines[:4], lines[4:]
    # the UTIL column no wider than its short cell (was 195 columns wide in all: the sentence);
    # the other columns' widths move with the ids and names the database gives
    assert max(len(line) - len(line.rstrip().rsplit(None, 1)[0]) for line in table) <= len("  UTIL "), out
    assert max(len(line) for line in table) < 150, out
    assert SHARED not in "\n".join(table)
    assert [line.split()[-1] for line in table[1:]] == [
        f"{NOT_MEASURED_CELL}*",
        f"{NOT_MEASURED_CELL}*",
        f"{NOT_MEASURED_CELL}**",
    ]
    assert notes == [
        f"{NOT_MEASURED_CELL}*: {SHARED}",
        f"{NOT_MEASURED_CELL}**: {utilization_words(None, 'never_started')}",
    ]
    rows = json.loads(run_cli(monkeypatch, researcher, "history", "--json"))
    assert [utilization_words(r["utilization"], r["utilization_why"]) for r in rows][0] == SHARED


def test_history_of_measured_attempts_has_no_note(monkeypatch, researcher, submit_kwargs, cluster):
    _ended(researcher, submit_kwargs, cluster, 0)

    def measured(page: dict[str, Any]) -> dict[str, Any]:
        page["results"][0]["utilization"] = 0.63
        return page

    _rewrite(monkeypatch, researcher, "workloads/history/", measured)
    out = run_cli(monkeypatch, researcher, "history")
    assert len(out.splitlines()) == 2 and out.splitlines()[1].endswith("63%")


@pytest.mark.parametrize(("exit_code", "said", "code"), [(5, "failed (exit 5)", 1), (0, "succeeded (exit 0)", 0)])
def test_logs_follow_says_how_the_workload_ended_and_exits_as_wait(
    monkeypatch, researcher, submit_kwargs, cluster, exit_code, said, code
):
    w = _ended(researcher, submit_kwargs, cluster, exit_code)
    monkeypatch.setattr(fairway_cli.time, "sleep", lambda s: None)
    followed = run_cli_streams(monkeypatch, researcher, "logs", str(w.pk), "-f")
    waited = run_cli_streams(monkeypatch, researcher, "wait", str(w.pk))
    assert followed[0] == waited[0] == code
    assert followed[2].splitlines()[-1] == f"[#{w.pk} {w.name}: {said}]"
    assert waited[1].splitlines()[0] == f"#{w.pk} {w.name}: {said}"
    assert f"[#{w.pk}" not in followed[1]  # stdout keeps only the log


def test_logs_follow_waits_for_the_end_the_log_ended_before(monkeypatch, researcher, submit_kwargs, cluster):
    # the agent's end of the log comes before its report of the exit: not "running", not exit 0
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    assert lifecycle.attempt_started(attempt.host, attempt.pk)
    part = {"rank": 0, "host": attempt.host.name, "data": "done\n", "offset": 0, "eof": True}
    _rewrite(
        monkeypatch, researcher, f"workloads/{w.pk}/logs/", lambda t: {"attempt": 1, "ended": False, "parts": [part]}
    )
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the exit is reported while the CLI waits for it
        sleeps.append(seconds)
        lifecycle.attempt_exited(attempt.host, attempt.pk, exit_code=7)
        run_tick(cluster.pk)

    monkeypatch.setattr(fairway_cli.time, "sleep", sleep)
    code, out, err = run_cli_streams(monkeypatch, researcher, "logs", str(w.pk), "-f")
    assert (code, out) == (1, "done\n")
    assert err.splitlines()[-1] == f"[#{w.pk} {w.name}: failed (exit 7)]"
    assert len(sleeps) == 1
