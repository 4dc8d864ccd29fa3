"""tryout47: the metrics page's range form says "a duration back (30d, 2w) or a date (2026-11-01), as
``fairway metrics`` and the API", but ``fairway metrics`` took only ``--days N``: ``--since 30d`` was
argparse's "unrecognized arguments" and no ``--until`` could end a range. It takes the page's and the
API's ``--since`` and ``--until`` now, read by the server (``scheduler.api.pyramid.pyramid_params``),
so a bad one is the server's words; ``--days`` stays (a shorthand for ``--since Nd``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fairway_cli.cli import EXIT_API, EXIT_USAGE, build_parser
from scheduler.api import pyramid as api_pyramid
from tests.cli.inprocess import run_cli


@pytest.fixture
def asked(monkeypatch):
    """The clusters and range each ``GET metrics/pyramid/`` asked the report for."""
    calls = []
    real = api_pyramid.pyramid_report

    def spy(clusters, since, until, now=None):
        calls.append(([c.name for c in clusters], since, until))
        return real(clusters, since, until, now)

    monkeypatch.setattr(api_pyramid, "pyramid_report", spy)
    return calls


def test_since_takes_the_pages_durations(monkeypatch, researcher, cluster, asked):
    assert run_cli(monkeypatch, researcher, "metrics", "--since", "2w", "-c", "default").startswith("default: ")
    [(clusters, since, until)] = asked
    assert clusters == ["default"] and until - since == timedelta(days=14)


def test_since_and_until_take_dates(monkeypatch, researcher, cluster, asked):
    today = datetime.now(UTC).date()
    first, last = (today - timedelta(days=3)).isoformat(), (today - timedelta(days=1)).isoformat()
    run_cli(monkeypatch, researcher, "metrics", "--since", first, "--until", last)
    [(_clusters, since, until)] = asked
    assert since.date().isoformat() == first and until.date() == today - timedelta(days=1)

    asked.clear()  # --until alone: the 7 days before it, as the page's ?until=
    run_cli(monkeypatch, researcher, "metrics", "--until", first)
    [(_clusters, since, until)] = asked
    assert until.date().isoformat() == first and until - since == timedelta(days=7)


def test_a_bad_since_is_the_servers_words(monkeypatch, researcher, cluster):
    said = run_cli(monkeypatch, researcher, "metrics", "--since", "bogus", expect=EXIT_API)
    assert "'bogus' is not a duration back from now" in said


def test_an_until_alone_in_the_future_is_until_that_is_said(monkeypatch, researcher, cluster):
    """admin47: ``--until 2030-01-01`` alone was refused as ``since`` (the 7 days before it start in
    the future), a parameter the person never gave."""
    said = run_cli(monkeypatch, researcher, "metrics", "--until", "2030-01-01", expect=EXIT_API)
    assert "until" in said and "the range starts in the future" in said and "since:" not in said


def test_days_still_works_and_not_beside_since(monkeypatch, researcher, cluster, asked):
    run_cli(monkeypatch, researcher, "metrics", "--days", "3")
    [(_clusters, since, until)] = asked
    assert abs(until - since - timedelta(days=3)) < timedelta(seconds=5)
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["metrics", "--days", "3", "--since", "2w"])
    assert stop.value.code == EXIT_USAGE
