"""Windowed usage and committed usage (DESIGN.md §3.1, §3.2).

All results are integer GPU-seconds per budget (the budget's own charges only;
roll up with :meth:`BudgetTree.roll_up`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping

from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Attempt, GpuRef, Snapshot, UsageRecord, Workload


def overlap(start: int, end: int, window_start: int, now: int) -> int:
    """Seconds of ``[start, end]`` inside the window ``(window_start, now]`` (pro-rata edges)."""
    lo = max(start, window_start)
    hi = min(end, now)
    return hi - lo if hi > lo else 0


def windowed_usage(
    records: Iterable[UsageRecord], attempts: Iterable[Attempt], now: int, window: int
) -> dict[str, int]:
    """``U`` per budget, own charges only, in GPU-seconds over ``(now − window, now]``.

    Closed intervals count pro-rata; lumps count when charged inside the window;
    allocated open attempts count the part already run (stopping ones too: they
    are charged until release). Unallocated time is never counted.
    """
    window_start = now - window
    usage: dict[str, int] = {}
    for r in records:
        if r.gpus is None:
            amount = r.gpu_seconds if window_start < r.end <= now else 0
        else:
            amount = r.gpus * overlap(r.start, r.end, window_start, now)
        if amount:
            usage[r.budget] = usage.get(r.budget, 0) + amount
    for a in attempts:
        if a.allocated and a.started_at is not None:
            end = now if a.charged_until is None else min(now, a.charged_until)
            amount = a.gpu_count * overlap(a.started_at, end, window_start, now)
            if amount:
                usage[a.budget] = usage.get(a.budget, 0) + amount
    return usage


class RecordBook:
    """The windowed usage ``U`` of usage records per budget (:func:`windowed_usage` of the records
    alone), kept by difference for queries moving forward in time.

    An interval record (``gpus`` GPUs from ``s`` to ``e``) counts ``g·max(0, min(e, T) − max(s,
    T − W))`` at ``T``: the sum of four ramps ``g·((T−s)⁺ − (T−e)⁺ − (T−s−W)⁺ + (T−e−W)⁺)``; a lump
    (``gpu_seconds`` charged at ``e``) counts while ``T − W < e ≤ T``: a step up at ``e`` and down
    at ``e + W``. Each ramp or step is one heap entry ``(k, budget, slope, offset)`` applied once
    ``T ≥ k`` (a ramp is 0 at ``k``), so a budget's usage is ``slope·T + offset``: O(log n) per
    record, O(budgets) per query instead of a walk over every record. A record may be added at
    any time, its instants before the last query included (they apply at the next). Queries never
    go back in time (:meth:`at` raises). Used by the forward simulation of estimates
    (scheduler/sim/estimate.py) and by :class:`UsageLedger`; tests/sim/test_estimate_oracle.py and
    tests/sim/test_usage_ledger.py compare it with ``windowed_usage`` on random records."""

    __slots__ = ("window", "now", "heap", "slope", "offset")

    def __init__(self, window: int, records: Iterable[UsageRecord] = ()) -> None:
        self.window = window
        self.now: int | float = -math.inf
        """The latest instant queried: entries at or before it are applied."""
        self.heap: list[tuple[int, str, int, int]] = []
        self.slope: dict[str, int] = {}
        self.offset: dict[str, int] = {}
        for r in records:
            self.add(r)

    def add(self, r: UsageRecord) -> None:
        heap, w, b = self.heap, self.window, r.budget
        if r.gpus is None:
            if r.gpu_seconds:
                heapq.heappush(heap, (r.end, b, 0, r.gpu_seconds))
                heapq.heappush(heap, (r.end + w, b, 0, -r.gpu_seconds))
            return
        g, s, e = r.gpus, r.start, r.end
        if g and e > s:
            for k, sign in ((s, 1), (e, -1), (s + w, -1), (e + w, 1)):
                heapq.heappush(heap, (k, b, sign * g, -sign * g * k))

    def at(self, t: int) -> dict[str, int]:
        """Budget → the records' windowed usage at ``t`` (nonzero only); ``t`` never before the
        last query's."""
        if t < self.now:
            raise ValueError(f"a record book is never moved back in time ({t} < {self.now})")
        self.now = t
        heap, slope, offset = self.heap, self.slope, self.offset
        while heap and heap[0][0] <= t:
            _, b, da, db = heapq.heappop(heap)
            slope[b] = slope.get(b, 0) + da
            offset[b] = offset.get(b, 0) + db
        out = {}
        for b, a in slope.items():
            v = a * t + offset[b]
            if v:
                out[b] = v
        return out


class UsageLedger(list[UsageRecord]):
    """A producer's usage records (``Snapshot.usage``: any reader sees the list) with their
    windowed usage kept by difference in a :class:`RecordBook`, so that a pass of the incremental
    policy reads ``U`` of the closed records in O(budgets) (:func:`pass_loads`) instead of a walk
    over every record ever charged (the scenario engine keeps them all: the demo's history import
    spent ~17 % of its time in that walk).

    ``append``, ``extend`` and ``+=`` count the new records; any other change of the list (or a
    query at another window, or back in time) drops the book, and :meth:`windowed` answers by
    :func:`windowed_usage` (the oracle, compared on every pass in tests/sim/test_usage_ledger.py)
    until the next query can rebuild it.
    """

    def __init__(self, window: int, records: Iterable[UsageRecord] = ()) -> None:
        super().__init__(records)
        self.window = window
        self._book: RecordBook | None = RecordBook(window, self)

    def append(self, r: UsageRecord) -> None:
        super().append(r)
        if self._book is not None:
            self._book.add(r)

    def extend(self, records: Iterable[UsageRecord]) -> None:
        for r in records:
            self.append(r)

    def __iadd__(self, records: Iterable[UsageRecord]) -> UsageLedger:  # type: ignore[override,misc]
        self.extend(records)
        return self

    def _drop(self) -> None:
        self._book = None

    def __reduce_ex__(self, protocol: object) -> tuple[type[UsageLedger], tuple[int, list[UsageRecord]]]:
        """Copied and pickled as its window and records (the book is rebuilt from them): the
        default rebuilt a list subclass by appending its items after restoring its state, which
        counted every record twice."""
        return (type(self), (self.window, list(self)))

    def clear(self) -> None:
        super().clear()
        self._book = RecordBook(self.window)

    def windowed(self, now: int, window: int) -> dict[str, int]:
        """``windowed_usage(self, (), now, window)`` but for budgets at 0 (possible only with
        negative records; :meth:`BudgetTree.roll_up` skips them): from the book when it is kept
        and ``now`` does not go back, else plainly (a rebuilt book serves the next query)."""
        book = self._book
        if window == self.window and (book is None or now >= book.now):
            if book is None:
                book = self._book = RecordBook(window, self)
            return book.at(now)
        return windowed_usage(self, (), now, window)


def _dropping(name: str) -> Callable[..., object]:
    """``list.<name>``, then the ledger's book dropped (a change the book does not follow)."""
    base = getattr(list, name)

    def method(self: UsageLedger, *args: object, **kwargs: object) -> object:
        out = base(self, *args, **kwargs)
        self._drop()
        return out

    method.__name__ = name
    return method


for _name in ("insert", "pop", "remove", "sort", "reverse", "__setitem__", "__delitem__", "__imul__"):
    setattr(UsageLedger, _name, _dropping(_name))


def committed_usage(
    attempts: Iterable[Attempt],
    now: int,
    nominated: Mapping[str, tuple[GpuRef, ...]],
    pending: Mapping[str, Workload],
) -> dict[str, int]:
    """``C`` per budget (own only), GPU-seconds of protection still ahead.

    A running allocated attempt commits ``gpus × max(0, protected_until − now)``;
    a starting one ``gpus × M`` (its window begins at the confirmed start); a
    pending workload with nominated GPUs commits ``gpus × M`` from the nomination.
    Stopping attempts commit nothing.
    """
    c: dict[str, int] = {}
    for a in attempts:
        if not a.allocated or a.stopping:
            continue
        if a.started_at is None:
            amount = a.gpu_count * a.min_runtime
        else:
            amount = a.gpu_count * max(0, a.started_at + a.min_runtime - now)
        if amount:
            c[a.budget] = c.get(a.budget, 0) + amount
    for wid in nominated:
        w = pending.get(wid)
        if w is not None and w.allocated:
            c[w.budget] = c.get(w.budget, 0) + w.gpus * w.min_runtime
    return c


def own_load(usage: Mapping[str, int], committed: Mapping[str, int]) -> dict[str, int]:
    """``U + C`` per budget (own only, GPU-seconds): the load ranked by (DESIGN.md §3.2)."""
    out = dict(usage)
    for k, v in committed.items():
        out[k] = out.get(k, 0) + v
    return out


class LoadBook:
    """``U`` (open attempts' part) and ``C`` (attempts' part) per budget, kept up to date as
    attempts come and go and time advances, instead of a walk over every attempt per pass.

    For the attempts added and not removed, at the ``now`` of the last :meth:`advance`,
    :meth:`usage` equals :func:`windowed_usage` with no records and :meth:`committed` equals
    :func:`committed_usage` with no nominations (GPU-seconds, own budget only). Each term is
    linear in ``now`` between two instants at which an attempt's share changes form (its
    start leaves the window: ``start + W``; its protection ends: ``start + M``), so each budget
    keeps sums of GPUs and of GPUs × instants, and two heaps hold those instants. Attempts
    with ``charged_until`` or a start in the future are summed directly. Costs O(log n) per
    change and O(budgets) per query.
    """

    def __init__(self, window: int, now: int) -> None:
        self.window = window
        self.now = now
        self.attempts: dict[str, tuple[Attempt, bool, bool]] = {}  # id -> (attempt, young, protected)
        self.special: dict[str, Attempt] = {}
        self.young_g: dict[str, int] = {}  # started inside the window: g × (now − start)
        self.young_s: dict[str, int] = {}
        self.old_g: dict[str, int] = {}  # started before it: g × W
        self.prot_g: dict[str, int] = {}  # protected: g × (start + M − now)
        self.prot_s: dict[str, int] = {}
        self.starting: dict[str, int] = {}  # starting (no confirmed start): g × M
        self._aging: list[tuple[int, int, str, Attempt]] = []  # (instant, tie-breaker, id, attempt)
        self._ending: list[tuple[int, int, str, Attempt]] = []
        self._seq = 0

    @staticmethod
    def _bump(d: dict[str, int], k: str, v: int) -> None:
        d[k] = d.get(k, 0) + v

    def add(self, a: Attempt) -> None:
        """Count an open attempt (its id must not be counted already)."""
        if not a.allocated:
            self.attempts[a.id] = (a, False, False)
            return
        if a.charged_until is not None or (a.started_at is not None and a.started_at > self.now):
            self.special[a.id] = a
            self.attempts[a.id] = (a, False, False)
            return
        self._count(a, 1)

    def _count(self, a: Attempt, sign: int) -> None:
        g = len(a.gpus)
        b = a.budget
        now = self.now
        if a.started_at is None:
            if not a.stopping:
                self._bump(self.starting, b, sign * g * a.min_runtime)
            if sign > 0:
                self.attempts[a.id] = (a, False, False)
            return
        start = a.started_at
        young = start + self.window > now
        if sign < 0:
            _, young, prot = self.attempts[a.id]
        if young:
            self._bump(self.young_g, b, sign * g)
            self._bump(self.young_s, b, sign * g * start)
        else:
            self._bump(self.old_g, b, sign * g)
        end = start + a.min_runtime
        prot = (not a.stopping and end > now) if sign > 0 else prot
        if prot:
            self._bump(self.prot_g, b, sign * g)
            self._bump(self.prot_s, b, sign * g * end)
        if sign > 0:
            self.attempts[a.id] = (a, young, prot)
            self._seq += 1
            if young:
                heapq.heappush(self._aging, (start + self.window, self._seq, a.id, a))
            if prot:
                heapq.heappush(self._ending, (end, self._seq, a.id, a))

    def remove(self, aid: str) -> None:
        """Stop counting the attempt ``aid`` (KeyError if it is not counted)."""
        a, _, _ = self.attempts[aid]
        if aid in self.special:
            del self.special[aid]
        elif a.allocated:
            self._count(a, -1)
        del self.attempts[aid]

    def advance(self, now: int) -> None:
        """Move to ``now`` (never back): starts that left the window, protections that ended."""
        self.now = now
        while self._aging and self._aging[0][0] <= now:
            _, _, aid, a = heapq.heappop(self._aging)
            rec = self.attempts.get(aid)
            if rec is not None and rec[0] is a and rec[1]:
                g = len(a.gpus)
                self._bump(self.young_g, a.budget, -g)
                self._bump(self.young_s, a.budget, -g * (a.started_at or 0))
                self._bump(self.old_g, a.budget, g)
                self.attempts[aid] = (a, False, rec[2])
        while self._ending and self._ending[0][0] <= now:
            end, _, aid, a = heapq.heappop(self._ending)
            rec = self.attempts.get(aid)
            if rec is not None and rec[0] is a and rec[2]:
                g = len(a.gpus)
                self._bump(self.prot_g, a.budget, -g)
                self._bump(self.prot_s, a.budget, -g * end)
                self.attempts[aid] = (a, rec[1], False)

    def usage(self) -> dict[str, int]:
        """:func:`windowed_usage` of the counted attempts at ``now`` (no records)."""
        now, out = self.now, {}
        for b, g in self.young_g.items():
            v = g * now - self.young_s[b]
            if v:
                out[b] = v
        for b, g in self.old_g.items():
            if g:
                out[b] = out.get(b, 0) + g * self.window
        if self.special:
            extra = windowed_usage((), self.special.values(), now, self.window)
            for b, v in extra.items():
                out[b] = out.get(b, 0) + v
        return out

    def committed(self) -> dict[str, int]:
        """:func:`committed_usage` of the counted attempts at ``now`` (no nominations)."""
        now, out = self.now, {}
        for b, v in self.starting.items():
            if v:
                out[b] = v
        for b, g in self.prot_g.items():
            v = self.prot_s[b] - g * now
            if v:
                out[b] = out.get(b, 0) + v
        if self.special:
            extra = committed_usage(self.special.values(), now, {}, {})
            for b, v in extra.items():
                out[b] = out.get(b, 0) + v
        return out


def pass_loads(
    snap: Snapshot,
    tree: BudgetTree,
    noms: Mapping[str, tuple[GpuRef, ...]],
    pending: Mapping[str, Workload],
    book: LoadBook | None = None,
) -> tuple[dict[str, int], dict[str, int]]:
    """Windowed usage ``U`` and load ``U + C`` per budget, rolled up the tree (GPU-seconds, §3.1–3.2).

    ``noms`` are the nominations the pass honours (their workloads commit ``gpus × M``).
    ``book``, when given, holds the open attempts' part, synced to ``snap`` (the same sums).
    """
    if book is None:
        own_u = windowed_usage(snap.usage, snap.attempts, snap.now, snap.window)
        own_c = committed_usage(snap.attempts, snap.now, noms, pending)
    else:
        own_u = book.usage()
        records = snap.usage
        if isinstance(records, UsageLedger):
            closed = records.windowed(snap.now, snap.window)
        else:
            closed = windowed_usage(records, (), snap.now, snap.window)
        for b, v in closed.items():
            own_u[b] = own_u.get(b, 0) + v
        own_c = book.committed()
        for b, v in committed_usage((), snap.now, noms, pending).items():
            own_c[b] = own_c.get(b, 0) + v
    return tree.roll_up(own_u), tree.roll_up(own_load(own_u, own_c))
