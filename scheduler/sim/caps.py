"""Budget caps through the forward simulation of estimates (DESIGN.md §3.7, docs/estimates.md "Caps").

A cap is reached at ``t`` when the allocated usage of its subtree over ``(t − period, t]`` is at
least its limit (:func:`scheduler.policy.caps.capped_at`, the rule). In the simulation that usage
moves: old usage leaves the period (the cap lifts), running allocated work adds to it (the cap
binds). Between two instants at which an attempt starts or is released each cap's usage is
piecewise linear in time, its pieces ending where a record's start or end leaves the period, so
the instant at which a cap is first reached, or first no longer reached, is computed exactly
(:meth:`CapBook.next_change`) and is an event of the simulation (``Forward.next_event``).

:class:`CapBook` keeps one cap's usage by difference, as :class:`~scheduler.policy.usage.RecordBook`
keeps the windowed usage: an interval of ``g`` GPUs from ``s`` to ``e`` counts ``g·((T−s)⁺ −
(T−e)⁺ − (T−s−P)⁺ + (T−e−P)⁺)`` at ``T`` (four ramps), a lump ``v`` charged at ``e`` a step up at
``e`` and down at ``e + P``; the entries sit in a sorted list read forward from an index, so the
next change is found by walking the pieces ahead without applying them. An open attempt is an
interval without an end (:data:`~scheduler.policy.caps.STILL_RUNNING`) until it is released.
:class:`CapWatch` holds one book per cap of a simulation, and beside them the plain records
(:attr:`CapWatch.records`) the rule reads (tests/sim/test_caps_sim.py compares them).
"""

from __future__ import annotations

import copy
from bisect import insort
from collections.abc import Iterable

from scheduler.policy.caps import STILL_RUNNING, cap_members, capped_at
from scheduler.policy.types import Attempt, Cap, Snapshot, UsageRecord

NEVER = float("inf")


class CapBook:
    """One cap's usage ``u(T) = slope·T + offset`` at :attr:`now` (entries up to it applied) and
    the entries ahead, sorted: ``(instant k, Δslope, Δoffset)``, applied once ``T ≥ k``."""

    __slots__ = ("cap", "entries", "i", "slope", "offset", "now", "cross")

    def __init__(self, cap: Cap) -> None:
        self.cap = cap
        self.entries: list[tuple[int, int, int]] = []
        self.i = 0
        """``entries[:i]`` are applied."""
        self.slope = 0
        self.offset = 0
        self.now: int | float = -NEVER
        self.cross: tuple[int, int | float] | None = None
        """The last :meth:`next_change`: (its ``end``, its answer), until an entry is added or it passes."""

    def _entry(self, k: int, da: int, db: int) -> None:
        if k >= STILL_RUNNING:
            return  # never within a simulation's horizon
        self.cross = None
        if k <= self.now:
            self.slope += da
            self.offset += db
        else:
            insort(self.entries, (k, da, db), lo=self.i)

    def _ramp(self, k: int, g: int) -> None:
        self._entry(k, g, -g * k)

    def interval(self, g: int, s: int, e: int, sign: int = 1) -> None:
        """Count (``sign`` −1: stop counting) ``g`` GPUs from ``s`` to ``e`` (pro-rata in the period)."""
        if g and e > s:
            p = self.cap.period
            for k, d in ((s, 1), (e, -1), (s + p, -1), (e + p, 1)):
                self._ramp(k, sign * d * g)

    def lump(self, v: int, e: int) -> None:
        """Count ``v`` GPU-seconds charged at ``e`` (while ``T − P < e ≤ T``)."""
        if v:
            self._entry(e, 0, v)
            self._entry(e + self.cap.period, 0, -v)

    def add(self, r: UsageRecord) -> None:
        if r.gpus is None:
            self.lump(r.gpu_seconds, r.end)
        else:
            self.interval(r.gpus, r.start, r.end)

    def advance(self, t: int) -> int:
        """Move to ``t`` (never back) and return the usage then."""
        entries, i, n = self.entries, self.i, len(self.entries)
        while i < n and entries[i][0] <= t:
            _, da, db = entries[i]
            self.slope += da
            self.offset += db
            i += 1
        self.i = i
        self.now = t
        if self.cross is not None and self.cross[1] <= t:
            self.cross = None
        return self.slope * t + self.offset

    def next_change(self, end: int) -> int | float:
        """The first instant in ``(now, end]`` at which whether the cap is reached differs from
        now, with no entry added meanwhile; ``inf`` if none. Walks the linear pieces ahead: on
        each, the first ``T`` at which ``reached(slope·T + offset)`` turns is solved exactly in
        integers; at each piece's end the entries there are applied and the rule asked again."""
        if self.cross is not None and self.cross[0] == end:
            return self.cross[1]
        cap, entries, i, n = self.cap, self.entries, self.i, len(self.entries)
        a, b = self.slope, self.offset
        limit = cap.limit
        was = cap.reached(a * int(self.now) + b)
        out: int | float = NEVER
        while True:
            nxt: int | float = entries[i][0] if i < n else NEVER
            t: int | None = None
            if was and a < 0:
                t = (b - limit) // -a + 1  # the least T with a·T + b < limit
            elif not was and a > 0:
                t = -((b - limit) // a)  # the least T with a·T + b ≥ limit
            if t is not None and t < nxt:
                out = t if t <= end else NEVER
                break
            if nxt > end:
                break
            while i < n and entries[i][0] == nxt:
                a += entries[i][1]
                b += entries[i][2]
                i += 1
            if cap.reached(a * int(nxt) + b) != was:
                out = nxt
                break
        self.cross = (end, out)
        return out


class CapWatch:
    """The caps of one forward simulation (``Snapshot.caps``): a :class:`CapBook` per cap, fed
    with the snapshot's cap records and open attempts, then with each allocated attempt the
    simulation starts (:meth:`opened`) and releases (:meth:`closed`). :meth:`at` says which
    budgets are capped at an instant, :meth:`next_change` when that may next change.
    :attr:`records` is the plain reading beside the books: the records the rule reads with the
    simulation's open attempts (:meth:`plain_at`)."""

    def __init__(self, snap: Snapshot) -> None:
        self.caps = tuple(snap.caps)
        self.members = cap_members(self.caps, snap.budgets)
        self.books = [CapBook(cap) for cap in self.caps]
        self.records: list[UsageRecord] = []
        for r in snap.cap_records:
            self._record(r)
        for a in snap.attempts:
            self.opened(a)

    def _record(self, r: UsageRecord) -> None:
        under = self.members.get(r.budget)
        if under:
            self.records.append(r)
            for i in under:
                self.books[i].add(r)

    def opened(self, a: Attempt) -> None:
        """An open attempt counted (allocated and started: charged until released)."""
        if a.allocated and a.started_at is not None:
            end = STILL_RUNNING if a.charged_until is None else a.charged_until
            for i in self.members.get(a.budget, ()):
                self.books[i].interval(len(a.gpus), a.started_at, end)

    def closed(self, a: Attempt, end: int) -> None:
        """``a``, counted by :meth:`opened`, released: charged until ``end`` (not past its
        ``charged_until``); the plain records get the interval the simulation charges."""
        if not (a.allocated and a.started_at is not None):
            return
        was = STILL_RUNNING if a.charged_until is None else a.charged_until
        g, s = len(a.gpus), a.started_at
        if a.budget in self.members:
            if end > s:
                self.records.append(UsageRecord(a.budget, s, end, gpus=g))
            if max(was, s) != max(end, s):
                for i in self.members[a.budget]:
                    self.books[i].interval(g, s, was, -1)
                    self.books[i].interval(g, s, end)

    def may_lift(self, budget: str) -> bool:
        """Some cap of ``budget``'s subtree or above it may be lifted in the simulation: one whose
        limit is above 0 (a cap of 0 is reached by any usage, none at all included)."""
        return any(self.caps[i].limit > 0 for i in self.members.get(budget, ()))

    def at(self, t: int) -> frozenset[str]:
        """The budgets whose cap is reached at ``t`` (no earlier than the last call)."""
        return frozenset(book.cap.budget for book in self.books if book.cap.reached(book.advance(t)))

    def next_change(self, end: int) -> int | float:
        """The first instant after the last :meth:`at` (at most ``end``, else ``inf``) at which
        some cap may be reached or no longer reached, nothing starting or released meanwhile."""
        best: int | float = NEVER
        for book in self.books:
            t = book.next_change(end)
            if t < best:
                best = t
        return best

    def plain_at(self, attempts: Iterable[Attempt], t: int) -> frozenset[str]:
        """:meth:`at` read plainly: the rule (:func:`capped_at`) over :attr:`records` and the
        simulation's open ``attempts``."""
        return capped_at(self.caps, self.members, self.records, attempts, t)

    def copy(self) -> CapWatch:
        other = copy.copy(self)
        other.records = list(self.records)
        other.books = []
        for book in self.books:
            twin = copy.copy(book)
            twin.entries = list(book.entries)
            other.books.append(twin)
        return other
