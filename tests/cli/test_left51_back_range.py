"""left51: a duration back outside the server's 1s..400d was refused two ways: ``fairway history
--since 0d`` went to the server and exited 1 with its 400, ``fairway metrics --days 0`` was the CLI's
usage error (exit 2). Every such argument (``--since``, ``--until``, ``--days`` of ``history``,
``metrics`` and ``statement``) is the CLI's usage error now, exit 2, in the server's words, the bounds
from one place (``fairway_common.limits.MAX_BACK_DAYS``, ``BACK_RANGE_TEXT``); a date or a duration
within them still goes to the server, which reads it by the same rule."""

from __future__ import annotations

import pytest

from fairway_cli.cli import EXIT_USAGE
from fairway_common.limits import BACK_RANGE_TEXT, MAX_BACK_DAYS
from tests.cli.inprocess import run_cli, run_cli_streams


@pytest.fixture
def no_request(monkeypatch):
    """Fails the test at any API request: the CLI refuses on its own."""
    import fairway_cli.cli as cli

    def refuse(*_args, **_kwargs):
        raise AssertionError("the CLI asked the server")

    monkeypatch.setattr(cli.Api, "call", refuse)


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "--since", "0d"],
        ["history", "--since", "0"],
        ["history", "--since", f"{MAX_BACK_DAYS + 1}d"],
        ["history", "--since", "60w"],
        ["metrics", "--since", "0d"],
        ["metrics", "--until", "0s"],
        ["metrics", "--since", f"{MAX_BACK_DAYS}d1s"],
        ["statement", "nlp", "--since", "0d"],
        ["statement", "nlp", "--until", "99999999d"],
    ],
)
def test_a_duration_back_out_of_range_is_a_usage_error(monkeypatch, capsys, researcher, argv):
    code, out, err = run_cli_streams(monkeypatch, researcher, *argv)
    assert code == EXIT_USAGE, (out, err)
    err += capsys.readouterr().err  # argparse's usage error: on sys.stderr
    assert BACK_RANGE_TEXT in err and repr(argv[-1]) in err, err


@pytest.mark.parametrize("days", ["0", str(MAX_BACK_DAYS + 1)])
def test_metrics_days_says_the_same_bound(monkeypatch, capsys, researcher, days):
    err = run_cli(monkeypatch, researcher, "metrics", "--days", days, expect=EXIT_USAGE)
    err += capsys.readouterr().err
    assert f"at most {MAX_BACK_DAYS:g}" in err


def test_the_cli_refuses_before_asking(monkeypatch, capsys, researcher, no_request):
    code, _out, _err = run_cli_streams(monkeypatch, researcher, "history", "--since", "0d")
    assert code == EXIT_USAGE and BACK_RANGE_TEXT in capsys.readouterr().err


def test_the_servers_refusal_is_the_same_words(researcher_client):
    for path in ("/api/v1/workloads/history/", "/api/v1/metrics/pyramid/"):
        answer = researcher_client.get(path, {"since": "0d"})
        assert answer.status_code == 400 and answer.json()["since"] == [BACK_RANGE_TEXT], answer.json()


def test_within_the_bounds_and_dates_still_go_to_the_server(monkeypatch, researcher, cluster):
    run_cli(monkeypatch, researcher, "history", "--since", f"{MAX_BACK_DAYS}d")
    run_cli(monkeypatch, researcher, "history", "--since", "2w")
    run_cli(monkeypatch, researcher, "metrics", "--since", "1s")
    assert "is not" in run_cli(monkeypatch, researcher, "history", "--since", "bogus", expect=1)  # the server's words
