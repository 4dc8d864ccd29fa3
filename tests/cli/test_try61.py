"""try61, a researcher, an operator and leadership through the README: the CLI's words."""

from __future__ import annotations

import argparse

from fairway_cli.cli import build_parser


def _help(*command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices[command[0]]
    return " ".join(p.format_help().split())


def test_min_runtime_help_says_a_quote_may_give_it():
    """`-M`'s help said "(required …; not with --quote)", as if a quote refused it; a quote takes it
    and adds a line for it (README: "-M and the command optional there")."""
    shown = _help("submit")
    assert "not with --quote" not in shown
    assert "(required, here or in the -f spec; optional with --quote, which then quotes it too)" in shown


def test_webhook_kinds_without_a_url_name_the_flag(monkeypatch, researcher):
    """`fairway notifications --webhook-kinds failed` was refused "(set webhook_url, or choose no
    webhook kinds)": the API's field, where the CLI's flag is --webhook."""
    from tests.cli.inprocess import run_cli_streams

    code, _out, err = run_cli_streams(monkeypatch, researcher, "notifications", "--webhook-kinds", "failed")
    assert code == 1 and "webhook_url_required" in err
    assert "\n  name the URL: fairway notifications --webhook URL --webhook-kinds failed" in err
