"""Memory sizes for people: ``32G``, ``512M``, ``1.5T`` ↔ bytes (one parser for the API, the web
form, the CLI through the API, and the scenario files).

Units are binary, as Slurm's ``--mem`` and Docker's ``--memory`` read them: ``K`` = 2^10 bytes,
``M`` = 2^20, ``G`` = 2^30, ``T`` = 2^40, ``P`` = 2^50; ``Gi``, ``GiB`` and ``GB`` mean the same as
``G``. A bare integer is bytes. A fraction is rounded down to whole bytes.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from agent.runtime.isolation import bytes_text

_UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*$", re.IGNORECASE | re.ASCII)


class SizeError(ValueError):
    """A size that could not be read; the message says what a size looks like."""


def parse_size(value: object) -> int:
    """Bytes of ``value``: an integer (bytes) or a string such as ``32G``; raises :class:`SizeError`."""
    if isinstance(value, bool):
        raise SizeError("A size is a number of bytes or a string such as 32G or 512M.")
    if isinstance(value, int):
        if value < 0:
            raise SizeError("A size cannot be negative.")
        return value
    if not isinstance(value, str):
        raise SizeError("A size is a number of bytes or a string such as 32G or 512M.")
    m = _SIZE.match(value)
    if m is None:
        raise SizeError(f"{value!r} is not a size: write a number and a unit, such as 32G, 512M or 1.5T.")
    number, unit = m.group(1), m.group(2).upper()
    if "." in number and not unit:
        raise SizeError(f"{value!r}: a fraction needs a unit, such as 1.5G.")
    try:
        amount = Decimal(number) * (1 << _UNITS[unit])
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise SizeError(f"{value!r} is not a size.") from exc
    return int(amount)


def format_size(n: int | None) -> str:
    """``n`` bytes in the largest binary unit that divides it (``34359738368`` → ``32G``); ``—`` for None."""
    if n is None:
        return "—"
    return bytes_text(n)  # the agent's words for its end reasons too: one statement


def exact_size_text(n: object) -> str:
    """``n`` bytes as a form or a spec writes them to read back exactly: ``64G`` where
    :func:`parse_size` gives ``n`` again, else the bytes; empty for anything but a whole number."""
    if not isinstance(n, int) or isinstance(n, bool):
        return ""
    text = format_size(n)
    try:
        return text if parse_size(text) == n else str(n)
    except SizeError:
        return str(n)
