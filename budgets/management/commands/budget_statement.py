"""``manage.py budget_statement BUDGET [--since DAY] [--until DAY] [--out FILE]``: the CSV statement
(a day: ``YYYY-MM-DD``, a date-time, or ``7d`` back from now, as ``statement.csv`` reads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from budgets.services import resolve_budget, unknown_budget_words
from budgets.statement import StatementError, budget_statement, parse_range, statement_csv
from config.outpath import out_problem


class Command(BaseCommand):
    help = (
        "A budget's accounting statement as CSV: GPU-hours by UTC day, allocated vs unallocated, by project "
        "and user (the budget and everything under it). Default range: the last 30 days."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("budget", help="budget id or path (e.g. nlp/olmo)")
        parser.add_argument("--since", default="", help="first UTC day: YYYY-MM-DD or 7d back (default until - 29d)")
        parser.add_argument("--until", default="", help="last UTC day: YYYY-MM-DD or 1d back (default today)")
        parser.add_argument("--out", default="", help="write the CSV to this file (default stdout)")

    def handle(self, *args: Any, **opts: Any) -> None:
        ref = opts["budget"]
        budget = resolve_budget(int(ref) if ref.isascii() and ref.isdigit() else ref)  # '²'.isdigit()
        if budget is None:
            raise CommandError(unknown_budget_words(ref))  # "olmo": did you mean nlp/olmo? (try50)
        try:
            since, until = parse_range(opts["since"], opts["until"])
        except StatementError as exc:
            raise CommandError(f"--{exc.field}: {exc.message}") from None
        if opts["out"] and (problem := out_problem(opts["out"], directory=False)):
            raise CommandError(f"{problem}; nothing written")
        text = statement_csv(budget, budget_statement(budget, since, until))
        if opts["out"]:
            try:
                Path(opts["out"]).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"cannot write --out {opts['out']!r}: {exc.strerror or exc}") from None
            self.stderr.write(f"statement of {budget.path} {since}..{until} written to {opts['out']}")
        else:
            self.stdout.write(text, ending="")
