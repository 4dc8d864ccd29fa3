"""Faults from brk30's report, fixed by mend30."""

from __future__ import annotations

import argparse

import pytest


def test_history_help_says_formula_like_cells_get_a_quote():
    """``fairway history --csv`` neutralises formula-like text cells (OWASP "CSV Injection"): the
    help says so, so that a user who sees ``'=x`` in a sheet knows why."""
    from fairway_cli.cli import build_parser, csv_cell

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["history"].format_help().split())
    assert "leading '" in text
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert csv_cell(start + "x") == "'" + start + "x"
    assert csv_cell(-9) == -9
    assert csv_cell("a=b") == "a=b"
