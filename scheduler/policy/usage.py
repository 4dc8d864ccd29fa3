"""Windowed usage and committed usage (DESIGN.md §3.1, §3.2).

All results are integer GPU-seconds per budget (the budget's own charges only;
roll up with :meth:`BudgetTree.roll_up`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

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
        for b, v in windowed_usage(snap.usage, (), snap.now, snap.window).items():
            own_u[b] = own_u.get(b, 0) + v
        own_c = book.committed()
        for b, v in committed_usage((), snap.now, noms, pending).items():
            own_c[b] = own_c.get(b, 0) + v
    return tree.roll_up(own_u), tree.roll_up(own_load(own_u, own_c))
