"""How GPU-time and instants read for people, on every surface: the web's pages, the CLI's tables and the
server's sentences (why pending, caps) all call these, so one number never reads two ways.

They live in the CLI's package because the CLI imports nothing of the server (its wheel holds
``fairway_cli`` only), while the server may import the CLI's package.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

# the one wording of instants, shared with the agent (which ships fairway_common, not fairway_cli)
from fairway_common.instants import instant_text, second_up


def gpu_hours_text(value: Any) -> str:
    """GPU-hours as a figure: ``1,234`` (100 and up), ``12.5`` (10 and up), three significant
    digits below (``0.25``, ``0.004``), ``0``; ``–`` when not a number. A figure that rounds up to
    a step reads in that step's format: 99.97 is ``100``, not ``100.0`` (tryout46)."""
    try:
        hours = float(value)
    except (TypeError, ValueError):
        return "–"
    if round(hours, 1) >= 100:
        return f"{hours:,.0f}"
    if float(f"{hours:.3g}") >= 10:
        return f"{hours:.1f}"
    return f"{hours:.3g}" if hours else "0"


def gpu_time_text(gpu_seconds: Any) -> str:
    """GPU-seconds charged, with the unit: ``12.50 GPU-h`` or, under one GPU-hour, ``4.0 GPU-min``
    (``30 GPU-min`` from 10 on), ``1,234 GPU-h`` from 100 on, ``0 GPU-h``; never a bare ``4m``,
    which reads as wall time; ``less than 0.1 GPU-min`` for a charge that rounds to none. ``–``
    when not a number. A figure that rounds up to a step reads in that step's format: 9.96 GPU-min
    is ``10 GPU-min`` beside ``12 GPU-min``, not ``10.0 GPU-min`` (tryout46)."""
    try:
        total = float(gpu_seconds)
    except (TypeError, ValueError):
        return "–"
    if total <= 0:
        return "0 GPU-h"
    if total < 6:  # would print "0.0 GPU-min": read as nothing charged
        return "less than 0.1 GPU-min"
    if total < 3600:
        minutes = total / 60
        return f"{minutes:.0f} GPU-min" if round(minutes, 1) >= 10 else f"{minutes:.1f} GPU-min"
    hours = total / 3600
    return f"{hours:,.0f} GPU-h" if round(hours, 2) >= 100 else f"{hours:.2f} GPU-h"


__all__ = [
    "PLAIN_INT",
    "duration_text",
    "gpu_hours_text",
    "gpu_time_text",
    "instant_text",
    "parse_duration_s",
    "percent_text",
    "sample_age_text",
    "second_up",
    "seconds_between",
]


def duration_text(seconds: Any, sep: str = "") -> str:
    """A duration as the CLI's tables and the server's notes write it (one form: the array quote's
    note said "0.333333 h" beside the table's "20m", try37). ``2h0m29s``: every unit from the
    largest to the smallest that is not zero, so a gap reads as ``0m`` ("2h29s" read as 2 h 29
    min); seconds are left out from a day on. ``sep`` goes between the units: the pages' ``duration``
    filter writes ``2h 0m 29s`` (one rule for both: the pages wrote ``2h 29s``, lead 38)."""
    try:
        total = int(seconds)
    except (TypeError, ValueError):
        return ""
    if total == 0:
        return "0"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (0 if days else secs, "s")]
    shown = [i for i, (value, _unit) in enumerate(units) if value]
    if not shown:  # under a minute's seconds dropped from a day on: cannot happen (a day is shown)
        return "0"
    return sep.join(f"{value}{unit}" for value, unit in units[shown[0] : shown[-1] + 1])


def sample_age_text(sampled_at: datetime | str | None, now: datetime | None = None) -> str:
    """How old a GPU's sample is (the API's ``sampled_at``), as ``fairway hosts NAME`` and the
    clusters page say it: ``12s ago``; ``-`` without one. The server stores one sample every few
    heartbeats, so a GPU freed since still reads its workload's load for up to that long (util49)."""
    if not sampled_at:
        return "-"
    at = datetime.fromisoformat(sampled_at) if isinstance(sampled_at, str) else sampled_at
    age = seconds_between(at, now or datetime.now(UTC))
    return f"{duration_text(age) if age else '0s'} ago"


def seconds_between(start: datetime, end: datetime) -> int:
    """Whole seconds from ``start`` to ``end`` as shown (:func:`second_up` of each), 0 at least."""
    return max(0, int((second_up(end) - second_up(start)).total_seconds()))


def percent_text(value: Any, digits: int = 0) -> str:
    """A fraction as a percentage, ``0.9834`` → ``98%`` (``digits=1``: ``98.3%``); ``–`` for None or
    what is not a number. The pages' ``pct`` filter and the what-if table (``manage.py simulate
    --from-db``, which printed "0.983" beside the admin page's "98.3%", try44) write it so."""
    if value is None:
        return "–"
    try:
        return f"{float(value) * 100:.{int(digits)}f}%"
    except (TypeError, ValueError):
        return "–"


_DURATION_PART = re.compile(r"(\d{1,18}(?:\.\d{1,18})?)\s*(d|h|m|s)", re.IGNORECASE | re.ASCII)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
PLAIN_INT = re.compile(r"[0-9]{1,18}")
"""Digits accepted as a number: ASCII only (``"²".isdigit()`` is true, ``int("²")`` fails) and
short enough for ``int()`` (4300 digits at most) and for any database integer."""


CLEARABLE = ("max_runtime", "cpus", "memory", "shared_memory")
"""The fields (the API's names) an override may clear: no wall-time limit, the host's per-GPU share
of CPUs and memory, the runtime's ``/dev/shm``."""


def means_none(value: Any) -> bool:
    """``value`` is the word ``none`` (any case, blanks around): in a field of :data:`CLEARABLE` it
    reads as ``null``. The one rule of a submission, an update (``PATCH workloads/{id}/``, ``fairway
    update -t none``) and a resubmission's overrides (``fairway resubmit ID --cpus none``), API, CLI
    and YAML spec alike (docs/jobs.md "Changing a pending workload")."""
    return isinstance(value, str) and value.strip().lower() == "none"


def parse_duration_s(value: Any) -> int:
    """Seconds from ``3600``, ``"3600"``, ``"2h30m"``, ``"90m"``, ``"1d 2h"``, ``"1.5h"``, ``"45s"``.

    The one reading of a duration a person types: the API's ``min_runtime`` and ``max_runtime``
    (``scheduler.api.serializers``) and ``fairway wait --timeout`` call it (here, in the CLI's
    package, because the CLI imports nothing of the server).

    Raises ValueError on anything else, on a negative value and on a fraction of a second.
    """
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int):
        seconds: float = value
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if PLAIN_INT.fullmatch(text):
            seconds = int(text)
        else:
            compact = text.replace(" ", "")
            parts = _DURATION_PART.findall(compact)
            if not parts or "".join(f"{n}{u}" for n, u in parts) != compact:
                raise ValueError(f"{value!r} is not a duration like 2h30m")
            # Exact decimals: in floats "1.1h" was 3960.0000000000005 s, refused as a fraction of a
            # second (brk36); a Fraction of the digits as written is 3960.
            exact = sum(Fraction(n) * _UNIT_S[u.lower()] for n, u in parts)
            if exact.denominator != 1:
                raise ValueError("a duration is a whole number of seconds >= 0")
            seconds = int(exact)
    else:
        raise ValueError("not a duration")
    # "1111…1d" overflows to inf and int(inf) raises OverflowError; an int is finite (and a
    # 4,000-digit one would overflow math.isfinite itself).
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise ValueError("a duration is a whole number of seconds >= 0")
    if seconds < 0 or seconds != int(seconds):
        raise ValueError("a duration is a whole number of seconds >= 0")
    return int(seconds)
