"""Numbers on command lines (``fairway``'s options and the server's ``manage.py`` commands alike):
each type refuses what it cannot take with one sentence argparse prints after the option's name,
never a traceback (``1e308``, ``nan`` and ``-3`` among them).

In the CLI's package for the reason ``fairway_cli.numbers`` is: the server may import it, the CLI
imports nothing of the server.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from fairway_cli.numbers import parse_duration_s
from fairway_common.numbers import ascii_float

_INTEGER = re.compile(r"[+-]?[0-9]+")
"""ASCII digits only, as the API's ``int_param`` reads them: ``int()`` took ``١`` (Arabic-Indic),
``１`` (fullwidth), ``1_0`` and blanks around, which no other surface reads as a number."""


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number ``>= minimum`` (and ``<= maximum`` when given)."""

    def parse(text: str) -> int:
        if not _INTEGER.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (ASCII digits 0-9)")
        n = int(text)
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        if maximum is not None and n > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}")
        return n

    return parse


def positive_number(maximum: float = math.inf) -> Callable[[str], float]:
    """A finite number above 0 and at most ``maximum``."""

    def parse(text: str) -> float:
        try:
            value = ascii_float(text)  # float() took "١" and "1_0" as int() did
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (0 < value <= maximum and math.isfinite(value)):
            most = "" if math.isinf(maximum) else f" and at most {maximum:g}"
            raise argparse.ArgumentTypeError(f"must be above 0{most}")
        return value

    return parse


def duration_s(minimum: int = 1) -> Callable[[str], int]:
    """A duration as the API reads one (``90``, ``90s``, ``30m``, ``2h30m``, ``1d``:
    :func:`fairway_cli.numbers.parse_duration_s`), in seconds, at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            seconds = parse_duration_s(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 30m or 2h30m") from None
        if seconds < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}s")
        return seconds

    return parse
