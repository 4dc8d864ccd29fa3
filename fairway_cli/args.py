"""Numbers on command lines (``fairway``'s options and the server's ``manage.py`` commands alike):
each type refuses what it cannot take with one sentence argparse prints after the option's name,
never a traceback (``1e308``, ``nan`` and ``-3`` among them).

In the CLI's package for the reason ``fairway_cli.numbers`` is: the server may import it, the CLI
imports nothing of the server.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number ``>= minimum`` (and ``<= maximum`` when given)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
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
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (0 < value <= maximum and math.isfinite(value)):
            most = "" if math.isinf(maximum) else f" and at most {maximum:g}"
            raise argparse.ArgumentTypeError(f"must be above 0{most}")
        return value

    return parse
