"""tryout47: ``fairway --server http://gpu-lab:8000 ls`` with nothing saved said "not logged in to
http://gpu-lab:8000: run `fairway login`, or …", but ``fairway login`` alone goes to the saved (or
default) server, not the one the command named: the advice names that server when a plain
``fairway login`` would go elsewhere, as the message for a token withheld from another server does."""

from __future__ import annotations

import io

import pytest

from fairway_cli import cli as fairway_cli


@pytest.fixture
def nothing_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)


def _said(argv: list[str]) -> str:
    err = io.StringIO()
    assert fairway_cli.main(argv, out=io.StringIO(), err=err) == fairway_cli.EXIT_AUTH
    return err.getvalue()


@pytest.mark.parametrize("argv", [["--server", "http://gpu-lab:8000", "ls"], ["ls", "--server", "http://gpu-lab:8000"]])
def test_a_server_named_by_the_command_is_the_one_to_log_in_to(nothing_saved, argv):
    assert _said(argv) == (
        "fairway: not logged in to http://gpu-lab:8000: run `fairway login --server http://gpu-lab:8000`\n"
    )


def test_fairway_url_is_where_a_plain_login_goes(nothing_saved, monkeypatch):
    monkeypatch.setenv("FAIRWAY_URL", "http://gpu-lab:8000")
    assert _said(["ls"]).startswith("fairway: not logged in to http://gpu-lab:8000: run `fairway login`, or ")


def test_the_default_server_keeps_the_short_advice(nothing_saved):
    assert _said(["ls"]) == (
        f"fairway: not logged in to {fairway_cli.DEFAULT_SERVER}: run `fairway login`, "
        "or `fairway login --server URL` for another server\n"
    )
