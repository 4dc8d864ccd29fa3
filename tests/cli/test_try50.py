"""try50: a new researcher's day by the README, in the CLI; each test names what it met."""

from __future__ import annotations

from scheduler.models import Workload
from tests.cli.inprocess import run_cli


def test_submit_without_a_minimum_runtime_names_the_flag(researcher, hosts, monkeypatch):
    """``fairway submit -g 2 -- python train.py`` said "missing: min_runtime (flags or a spec with
    -f)": the API's field, not the flag ``-M`` nor what it means. It names the flag, an example and
    how to compare (its ``--quote`` needs no ``-M`` since left52: tests/cli/test_left52.py)."""
    args = ["submit", "-m", "A100", "--", "python", "train.py"]
    err = run_cli(monkeypatch, researcher, *args, expect=2)
    assert "missing: the minimum runtime: -M DURATION (e.g. -M 2h; -M 0: unallocated" in err
    assert "min_runtime in the -f spec" in err
    assert "`fairway submit --quote ...` without -M" in err and "min_runtime (flags" not in err
    assert not Workload.objects.exists()


def test_submit_without_a_command_names_where_it_goes(researcher, hosts, monkeypatch):
    err = run_cli(monkeypatch, researcher, "submit", "-m", "A100", "-M", "1h", expect=2)
    assert "missing: the command: after -- (e.g. -- python train.py), or command in the -f spec" in err
    assert not Workload.objects.exists()


def test_logs_follow_waits_through_an_attempt_still_starting(monkeypatch, capsys):
    """try50: ``fairway logs 8 -f`` right after a release printed the agent's "no attempt … here"
    and exited 0: a part with an error counted as done. Following, it says the attempt is starting
    once and keeps following until the workload ends."""
    from fairway_cli import cli as fairway_cli

    note = "attempt 1 is starting on gpu1: no log yet"
    starting = {"attempt": 1, "parts": [{"rank": 0, "host": "gpu1", "error": note}]}
    running = {"attempt": 1, "parts": [{"rank": 0, "host": "gpu1", "offset": 0, "data": "step 1\n", "eof": True}]}
    # then how the workload ended, as `fairway wait` says it, and its exit code (tryout47b)
    ended = {"id": 8, "name": "train", "state": "succeeded", "last_end": {"reason": "succeeded", "exit_code": 0}}
    answers = iter([starting, {"state": "starting"}, starting, {"state": "starting"}, running, ended])
    monkeypatch.setattr(fairway_cli.Api, "call", lambda self, method, path, **kw: next(answers))
    monkeypatch.setattr(fairway_cli.time, "sleep", lambda s: None)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
    assert fairway_cli.main(["logs", "8", "-f"]) == 0
    assert capsys.readouterr() == (
        "[gpu1: attempt 1 is starting on gpu1: no log yet]\nstep 1\n",
        "[#8 train: succeeded (exit 0)]\n",
    )


def test_logs_follow_ends_on_an_error_once_the_workload_ended(monkeypatch, capsys):
    from fairway_cli import cli as fairway_cli

    offline = {"attempt": 1, "parts": [{"rank": 0, "host": "gpu1", "error": "host gpu1 is offline"}]}
    failed = {"id": 8, "name": "train", "state": "failed", "last_end": {"reason": "lost", "exit_code": None}}
    answers = iter([offline, failed, failed])
    monkeypatch.setattr(fairway_cli.Api, "call", lambda self, method, path, **kw: next(answers))
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
    assert fairway_cli.main(["logs", "8", "-f"]) == 1  # as `fairway wait 8` (tryout47b: 0)
    out, err = capsys.readouterr()
    assert out == "[gpu1: host gpu1 is offline]\n"
    assert err.startswith("[#8 train: failed: ")


def test_logs_of_a_pending_workload_says_follow_waits(researcher, hosts, monkeypatch, submit_kwargs):
    """try50: ``fairway logs 3`` of a pending workload said "This workload has no attempt yet.
    (no_attempt)" and nothing of ``-f``, which waits for its start (tryout36)."""
    from scheduler.services import do_submit_workload

    w = do_submit_workload(researcher, **submit_kwargs())
    err = run_cli(monkeypatch, researcher, "logs", str(w.pk), expect=1)
    assert "This workload has no attempt yet." in err
    assert f"it is pending: `fairway logs {w.pk} -f` waits for its start" in err
