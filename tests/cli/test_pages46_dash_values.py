"""pages46 (tryout46): ``fairway hosts drain gpu2 --in -5m`` said argparse's "argument --in: expected
one argument", not the server's words ("in is a duration from now…"): a value that starts with a
minus and a digit (``-5m``, ``-1h``) is an option's value, as ``--in=-5m`` was, for every option of
the CLI (``fairway_cli.cli.Parser``): no option of fairway's starts with a digit."""

from __future__ import annotations

import io

import pytest

from fairway_cli.cli import EXIT_API, EXIT_USAGE, build_parser, main
from scheduler.models import Host
from tests.cli.inprocess import run_cli


@pytest.mark.parametrize("value", ["-5m", "-1h30m"])  # -2: argparse's negative number, read before
def test_a_negative_in_reaches_the_server_and_its_words_the_user(monkeypatch, admin, hosts, value):
    said = run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--in", value, expect=EXIT_API)
    assert "in: in is a duration from now" in said and "expected one argument" not in said  # the server's words
    assert said == run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", f"--in={value}", expect=EXIT_API)
    assert Host.objects.get(name="a100-1").drain_at is None


def test_a_negative_at_reaches_the_server(monkeypatch, admin, hosts):
    said = run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--at", "-1h", expect=EXIT_API)
    assert "'-1h' is not" in said


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["wait", "3", "--timeout", "-5m"], None, "--timeout"),  # the CLI's own check says it
        (["metrics", "--days", "-3"], None, "--days"),
        (["history", "--since", "-7d"], "since", "-7d"),
        (["submit", "-t", "-1h", "--", "true"], "max_runtime", "-1h"),
    ],
)
def test_every_option_takes_such_a_value(capsys, argv, dest, value):
    if dest is None:
        assert main(argv, out=io.StringIO(), err=io.StringIO()) == EXIT_USAGE
        said = capsys.readouterr().err  # argparse's own line: the option's check
        assert value in said and "expected one argument" not in said
    else:
        assert getattr(build_parser().parse_args(argv), dest) == value


def test_an_option_is_still_an_option(capsys):
    """Only a minus and a digit: ``--in --reason x`` is still a missing value (argparse's words)."""
    argv = ["hosts", "drain", "a100-1", "--in", "--reason", "x"]
    assert main(argv, out=io.StringIO(), err=io.StringIO()) == EXIT_USAGE
    assert "argument --in: expected one argument" in capsys.readouterr().err
