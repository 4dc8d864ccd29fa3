"""``fairway exec ID [--timeout S] [--attempt N] -- CMD...`` (docs/jobs.md, "Run a command in a
running workload"): the command's streams to ours, its exit code ours, 124 at the timeout, --json;
the agent's side answered in-process (the whole path: tests/e2e/test_exec_e2e.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fairway_cli.cli import EXIT_API, EXIT_USAGE
from scheduler import gateway
from tests.cli.inprocess import run_cli, run_cli_streams


@pytest.fixture
def running(started_workload: tuple[Any, Any]) -> Any:
    return started_workload[0]


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    said: dict[str, Any] = {"answer": {}, "asked": []}

    def fake(host_id: int, wire_id: int, command: list[str], timeout_s: int, max_output: int) -> dict:
        said["asked"].append((command, timeout_s))
        return dict(said["answer"])

    monkeypatch.setattr(gateway, "request_exec", fake)
    return said


def test_exec_prints_both_streams_and_passes_the_exit_code(monkeypatch, researcher, running, agent):
    agent["answer"] = {"exit_code": 3, "stdout": "GPU 0: H100\n", "stderr": "warn\n", "truncated": False,
                       "timed_out": False}  # fmt: skip
    code, out, err = run_cli_streams(monkeypatch, researcher, "exec", str(running.pk), "--", "nvidia-smi", "-L")
    assert (code, out, err) == (3, "GPU 0: H100\n", "warn\n")
    assert agent["asked"] == [(["nvidia-smi", "-L"], 60)]


def test_exec_timeout_attempt_and_json(monkeypatch, researcher, running, agent):
    agent["answer"] = {"exit_code": 124, "stdout": "", "stderr": "", "truncated": True, "timed_out": True}
    code, out, err = run_cli_streams(
        monkeypatch, researcher, "exec", str(running.pk), "--timeout", "5", "--attempt", "1", "--", "sleep", "9"
    )
    assert code == 124 and "killed after 5 s" in err and "cut at 1 MiB" in err
    # try59: the cut said nothing of how to read the rest
    assert f"fairway exec {running.pk} -- tail" in err and "> /tmp/out" in err, err  # noqa: S108 -- the words
    assert agent["asked"] == [(["sleep", "9"], 5)]
    code, out, _err = run_cli_streams(monkeypatch, researcher, "exec", str(running.pk), "--json", "--", "id", "-u")
    assert code == 124 and json.loads(out)["timed_out"] is True


def test_exec_refusals(monkeypatch, researcher, teammate, running, agent):
    assert "after --" in run_cli(monkeypatch, researcher, "exec", str(running.pk), expect=EXIT_USAGE)
    err = run_cli(monkeypatch, teammate, "exec", str(running.pk), "--", "id", expect=EXIT_API)
    assert "owner" in err and f"ask its owner, {researcher.username}" in err, err  # try59: whom to ask
    err = run_cli(monkeypatch, researcher, "exec", str(running.pk), "--attempt", "2", "--", "id", expect=EXIT_API)
    assert "has no attempt 2: its running attempt is 1" in err, err  # try59: which one runs
    assert agent["asked"] == []


def test_a_terminal_session_needs_both_flags_and_a_terminal(monkeypatch, researcher, running, agent):
    # (the session itself, on a terminal: tests/e2e/test_exec_tty_e2e.py)
    wid = str(running.pk)
    assert "-i and -t" in run_cli(monkeypatch, researcher, "exec", "-t", wid, "--", "bash", expect=EXIT_USAGE)
    assert "--json" in run_cli(monkeypatch, researcher, "exec", "-it", "--json", wid, "--", "bash", expect=EXIT_USAGE)
    err = run_cli(monkeypatch, researcher, "exec", "-it", wid, "--", "bash", expect=EXIT_USAGE)
    assert "needs a terminal" in err and "-i alone pipes it" in err  # the test's stdin is not one
    assert agent["asked"] == []


def test_try60_an_interactive_session_without_a_command_shows_the_interactive_example(
    monkeypatch, researcher, running, agent
):
    err = run_cli(monkeypatch, researcher, "exec", "-it", str(running.pk), expect=EXIT_USAGE)
    assert "give the command after --: fairway exec -it ID -- bash" in err, err
    err = run_cli(monkeypatch, researcher, "exec", str(running.pk), expect=EXIT_USAGE)
    assert "give the command after --: fairway exec ID -- nvidia-smi" in err, err


def test_try60_an_interactive_sessions_refusal_names_the_flag_typed(monkeypatch, researcher, running, agent):
    """try60: the -it refusal of a wrong --attempt said "leave out the attempt" (left60 fixed the one-shot's)."""
    from fairway_cli import cli, session
    from scheduler.execs import not_running_words

    words = not_running_words(running, running.attempts.all(), None, 5)
    assert "leave out the attempt" in words  # the API's field, as the server says it

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise session.SessionRefused("not_running", words)

    monkeypatch.setattr(session, "open_session", refuse)
    monkeypatch.setattr(cli.os, "isatty", lambda _fd: True)
    monkeypatch.setattr(cli.sys.stdin, "fileno", lambda: 0, raising=False)
    monkeypatch.setattr(session, "terminal_size", lambda _fd: (24, 80))
    err = run_cli(
        monkeypatch, researcher, "exec", "-it", "--attempt", "5", str(running.pk), "--", "bash", expect=EXIT_API
    )
    assert "its running attempt is 1 (leave out --attempt to run in it)" in err, err
    assert "leave out the attempt" not in err


def test_try60_the_timeout_help_says_it_is_not_for_a_session(monkeypatch, researcher, capsys):
    run_cli(monkeypatch, researcher, "exec", "--help", expect=0)  # argparse writes it to sys.stdout
    out = capsys.readouterr().out
    assert "not with -it" in " ".join(out.split()), out
