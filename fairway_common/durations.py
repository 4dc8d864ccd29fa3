"""The one grammar of durations (``90s``, ``30m``, ``2h``, ``1d``, ``2w``, ``6d12h``, plain seconds):
the server's query parameters and scenario files (``scheduler.trace`` re-exports it) and the CLI,
which checks a duration back from now against the server's bounds before asking (left51:
:func:`back_problem`, ``fairway_common.limits.MAX_BACK_DAYS``)."""

from __future__ import annotations

import re

from fairway_common.limits import BACK_RANGE_TEXT, MAX_BACK_S

DURATION_RE = re.compile(r"^(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
"""Weeks, days, hours, minutes, seconds, each at most once and in that order (``2w3d``, ``6d12h``):
the one grammar of durations, the server's, the scenario files' and the CLI's."""

MAX_DURATION_DIGITS = 30
"""Digits of a duration (or of one of its units) at most: far past any bound a caller checks."""

DURATION_FORMS = "90s, 30m, 2h, 1d, 2w, 6d12h, 0"
"""Examples of every unit, for error messages and help."""


def duration_seconds(match: re.Match[str]) -> int:
    """Seconds of a :data:`DURATION_RE` match."""
    weeks, days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return (((weeks * 7 + days) * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_duration(text: str) -> int:
    """Seconds of a duration like ``90s``, ``30m``, ``2h``, ``1d``, ``2w``, ``6d12h`` or a plain number of seconds.

    Raises ``ValueError`` on anything else (the same grammar as the scenario files).
    """
    raw = text.strip().lower()
    # ASCII digits only, and few enough for int() ("١٢" and "９h" were read, "²" and 5,000 digits
    # were int()'s own errors: brk35)
    if raw.isascii() and raw.isdigit() and len(raw) <= MAX_DURATION_DIGITS:
        return int(raw)
    match = DURATION_RE.match(raw) if len(raw) <= 5 * MAX_DURATION_DIGITS else None
    if not raw or match is None or not any(match.groups()):
        raise ValueError(f"{text[:40]!r} is not a duration (examples: {DURATION_FORMS})")
    return duration_seconds(match)


def back_problem(text: str) -> str | None:
    """What is wrong with ``text`` as an instant given as a duration back from now:
    :data:`~fairway_common.limits.BACK_RANGE_TEXT` when it is a duration (this grammar) outside 1 s
    to ``MAX_BACK_DAYS``; None when it is one within them, or no duration at all (a date, or words
    the server refuses in its own: ``scheduler.api.params.parse_instant``)."""
    try:
        seconds = parse_duration(text.replace("\x00", ""))
    except ValueError:
        return None
    return None if 0 < seconds <= MAX_BACK_S else BACK_RANGE_TEXT
