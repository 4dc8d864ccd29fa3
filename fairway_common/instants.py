"""The one wording of an instant (:func:`instant_text`) and its rounding (:func:`second_up`), for the
server, the CLI (``fairway_cli.numbers`` re-exports both) and the agent (the notes ``--uninstall``
reads: ``agent.client.told_at_text``), which ships ``fairway_common`` but not ``fairway_cli``."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any


def instant_text(value: Any, now: datetime | None = None, *, absolute: bool = False) -> str:
    """An instant as people read it, on every surface (the pages' ``utc`` filter, the server's
    sentences, the CLI's tables): ``14:05:09 UTC`` today, ``Mar 3 14:05:09 UTC`` another day of
    this year, ``Mar 3 2025 14:05:09 UTC`` before. ``value``: an aware datetime, epoch seconds or
    an ISO 8601 string (the API's); ``""`` for None, an unreadable string as given.

    Whole seconds rounded up, as the policy reads instants (``scheduler.snapshot.epoch_up``): a
    protection end of 11:29:05.4 is the policy's 11:29:06, and the attempts table and the "In the
    way" line named two seconds for it while each rounded its own way (tryout28).

    ``absolute``: always the full form, ``Mar 3 2026 14:05:09 UTC``, for text that is stored and
    read later (an event's message), which must not be relative to the day it was written."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        at = second_up(value.astimezone(UTC))
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        at = datetime.fromtimestamp(math.ceil(value), tz=UTC)
    else:
        return str(value)
    if absolute:
        return f"{at:%b} {at.day} {at.year} {at:%H:%M:%S} UTC"
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    if at.date() == today:
        return f"{at:%H:%M:%S} UTC"
    if at.year == today.year:
        return f"{at:%b} {at.day} {at:%H:%M:%S} UTC"
    return f"{at:%b} {at.day} {at.year} {at:%H:%M:%S} UTC"


def second_up(value: datetime) -> datetime:
    """THE rounding rule of every instant people read (left56): up to the whole second, as
    :func:`instant_text` shows it and the policy reads it (``scheduler.snapshot.epoch_up``). A
    duration between two instants shown (a workload's wait between "submitted" and "started", an
    attempt's run between its STARTED and ENDED) is :func:`seconds_between` of them: the
    difference of the instants as shown, so "submitted 22:35:38, started 22:35:39" never sits
    beside "wait 0" (each rounded its own way: instants up, durations down). The calendar's last
    second (9999-12-31 23:59:59.5, a temporary share typed "for ever") has no later one: it stays
    that second (brk58: an OverflowError, a 500 in the admin)."""
    if not value.microsecond:
        return value
    whole = value.replace(microsecond=0)
    try:
        return whole + timedelta(seconds=1)
    except OverflowError:
        return whole
