"""The polling loop of ``fairway wait`` and ``fairway submit --wait`` (Slurm's ``sbatch --wait``):
read the workloads until every one is in a final state, or the time given runs out.

Pure of HTTP and of words: the caller gives how to read the workloads, which rows are final, what
counts as a change and what to say about one (``fairway_cli.cli.wait_for``). The module's
``time`` is read at each call, so a test replaces it with a fake clock
(``tests/cli/test_cli_wait.py``) without touching the process's own ``time.sleep``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

FIRST_INTERVAL_S = 2.0
"""The pause before the first poll, and again after any change: work that moves is read often."""
BACKOFF = 1.5
"""Each poll that sees no change waits this many times longer than the one before …"""
CAP_FACTOR = 15
"""… up to this many times the first pause (2 s → 30 s): a wait of hours polls twice a minute."""

GIVE_UP_S = 900.0
"""A wait gives up (exit 3; 75 when the last failed poll was answered 503 or 429, cli46b) once every poll
has failed for this long (15 min) …"""
GIVE_UP_TRIES = 5
"""… and at least this many polls in a row: a server restart or a network blip is outlived, a
server that keeps failing (HTTP 500 on every poll) is not asked forever (left56). A busy server
(429, or a 503 with ``Retry-After``) never counts: it answers, and says when to ask again."""

Row = dict[str, Any]


class TryLater(Exception):  # noqa: N818 -- a signal to the loop, not an error the user sees as such
    """A poll without an answer worth reading: the server is busy (429, 503: ``after`` its
    ``Retry-After`` seconds, when it sent one) or cannot be reached for now. The loop waits and
    polls again; the workloads go on meanwhile."""

    def __init__(self, message: str, after: float | None = None, *, failed: bool = False, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.after = after
        self.failed = failed
        """The server failed (a 5xx without ``Retry-After``) or could not be reached: counts toward
        :class:`Outage`'s giving up, where a busy answer does not."""
        self.status = status
        """The status of the server's answer to try again later (a 503, a 429), 0 for any other: a wait
        that gives up on such answers says to try again (exit 75), not that the server is unreachable
        (cli46b)."""


class GaveUp(Exception):  # noqa: N818 -- the loop's end, worded by the caller
    """Every poll failed for :data:`GIVE_UP_S` and :data:`GIVE_UP_TRIES` polls: ``last`` the last
    failure, ``tries`` the polls, ``seconds`` since the first."""

    def __init__(self, last: TryLater, tries: int, seconds: float) -> None:
        super().__init__(last.message)
        self.last, self.tries, self.seconds = last, tries, seconds


@dataclass(slots=True)
class Outage:
    """A run of failed polls: :meth:`note` each answer-less poll, :meth:`clear` on an answer."""

    since: float | None = None
    tries: int = 0

    def note(self, later: TryLater) -> None:
        """Count ``later``; raises :class:`GaveUp` once the run is long enough. A busy answer
        ends the run (the server answered)."""
        if not later.failed:
            self.clear()
            return
        now = time.monotonic()
        if self.since is None:
            self.since = now
        self.tries += 1
        if self.tries >= GIVE_UP_TRIES and now - self.since >= GIVE_UP_S:
            raise GaveUp(later, self.tries, now - self.since)

    def clear(self) -> None:
        self.since, self.tries = None, 0


@dataclass(slots=True)
class Outcome:
    """``rows``: the last row read of each workload, by id; ``timed_out``: the time given ran out
    before every one was final."""

    rows: dict[int, Row]
    timed_out: bool


def poll_until_final(
    first: dict[int, Row],
    fetch: Callable[[set[int]], dict[int, Row]],
    *,
    is_final: Callable[[Row], bool],
    key: Callable[[Row], Hashable],
    on_change: Callable[[Row | None, Row], None],
    on_later: Callable[[TryLater, float], None],
    interval: float = FIRST_INTERVAL_S,
    timeout: float | None = None,
) -> Outcome:
    """Poll until every workload of ``first`` (its rows by id, read once already) is final.

    ``fetch(ids)`` reads the workloads not final yet (it may return others too) or raises
    :class:`TryLater`; a final row is never read again (a final state is never left).
    ``on_change(before, row)`` is called for each row of ``first`` (``before`` None) and then each
    time ``key(row)`` changes; ``on_later(exc, pause_s)`` once at the start of each run of
    :class:`TryLater`. The pause starts at ``interval`` seconds, grows by :data:`BACKOFF` while
    nothing changes up to :data:`CAP_FACTOR` × ``interval``, is back at ``interval`` after a
    change, is never shorter than a ``Retry-After`` and never passes the deadline. ``timeout``:
    seconds from now (None: no limit). Raises :class:`GaveUp` when the server keeps failing
    (:class:`Outage`). :class:`KeyboardInterrupt` passes through.
    """
    rows = dict(first)
    for row in rows.values():
        on_change(None, row)
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = interval
    failing = False
    outage = Outage()
    while True:
        todo = {pk for pk, row in rows.items() if not is_final(row)}
        if not todo:
            return Outcome(rows, timed_out=False)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome(rows, timed_out=True)
            time.sleep(min(pause, left))
        else:
            time.sleep(pause)
        try:
            fresh = fetch(todo)
        except TryLater as later:
            outage.note(later)
            pause = max(min(pause * BACKOFF, interval * CAP_FACTOR), later.after or 0.0)
            if not failing:
                on_later(later, pause)
            failing = True
            continue
        failing = False
        outage.clear()
        changed = False
        for pk, row in fresh.items():
            before = rows.get(pk)
            if before is None or key(before) != key(row):
                on_change(before, row)
                changed = True
            rows[pk] = row
        pause = interval if changed else min(pause * BACKOFF, interval * CAP_FACTOR)
