"""The pending workloads kept between passes (docs/policy.md "How it stays fast").

:class:`PendingIndex` holds a sequence of snapshots' pending workloads grouped by budget in
submission order, kept by difference. The difference comes either from comparing a snapshot's
whole pending list with the last one (:meth:`PendingIndex.sync`, O(pending) at C speed), or
from the snapshot itself: a producer that knows what arrived and left (the simulator) keeps a
:class:`PendingLog` and hands each snapshot's :class:`PendingChanges` with its pending view
(``snap.pending.changes``); :meth:`PendingIndex.follow` then costs O(changes × log n).
Either way the index equals a fresh grouping of ``snap.pending`` (``check`` mode compares).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from scheduler.policy.queues import BudgetPending, shape_of, submission_order
from scheduler.policy.skip_index import SkipIndex
from scheduler.policy.types import Workload

_K = TypeVar("_K")
Coarse = tuple[str, str, int, int | None, int | None, bool]
"""(budget, model, GPUs, CPUs, memory, allocated): what the idle screen reads of a workload
besides its minimum runtime (scheduler/policy/screen.py)."""


class PendingLog:
    """A producer's record of its pending workloads' arrivals and departures; :meth:`cut` closes
    the interval of one snapshot. Every change of the pending set must be told (the simulator's
    queue and dequeue), or the changes are wrong."""

    def __init__(self) -> None:
        self.serial = 0
        self._removed: dict[str, Workload] = {}
        self._added: dict[str, Workload] = {}

    def add(self, w: Workload) -> None:
        if self._removed.get(w.id) is w:
            del self._removed[w.id]
        else:
            self._added[w.id] = w

    def remove(self, w: Workload) -> None:
        if self._added.get(w.id) is w:
            del self._added[w.id]
        else:
            self._removed[w.id] = w

    def cut(self) -> PendingChanges:
        """The changes since the last cut (since the start for the first); starts the next."""
        out = PendingChanges(self, self.serial, self._removed, self._added)
        self.serial += 1
        self._removed, self._added = {}, {}
        return out


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """The pending workloads that left (``removed``) and arrived (``added``) between the previous
    snapshot of ``source`` (number ``serial - 1``) and this one, by workload id. A workload that
    arrived and left in between is in neither; one replaced by a new object is in both."""

    source: PendingLog
    serial: int
    removed: dict[str, Workload]
    added: dict[str, Workload]


class PendingIndex:
    """The pending workloads by id and by budget, each budget's lists in submission order with
    the allocated list's skipped runs' index (``BudgetPending.runs``, skip_index.py), and the
    idle screen's shapes, kept by difference.

    ``by_id`` maps id → workload; ``budgets`` the workloads by budget
    (:class:`~scheduler.policy.queues.BudgetPending`), the lists a pass queues; ``shapes`` maps
    each (coarse shape, M) to one workload of that shape (it may have left since, as long as
    others of its shape are pending: the screen reads nothing but the shape); ``least`` maps each
    coarse shape (:data:`Coarse`) to the least M pending with it. A workload is known by its
    object (workloads are immutable values).
    """

    def __init__(self) -> None:
        self.by_id: dict[str, Workload] = {}
        self.by_obj: dict[int, Workload] = {}  # id(object) -> the workload object (kept alive here)
        self.budgets: dict[str, BudgetPending] = {}
        self.counts: dict[tuple[Coarse, int], int] = {}
        self.shapes: dict[tuple[Coarse, int], Workload] = {}
        self.ms: dict[Coarse, set[int]] = {}  # coarse shape -> the Ms pending with it (the keys of counts)
        self.least: dict[Coarse, int] = {}
        self._source: tuple[object, int] | None = None  # the last changes followed
        self.followed = 0  # snapshots taken by their changes (tests: the fast path was used)

    _screen: list[Workload] | None = None
    """:meth:`screen_shapes` as last built; None when ``least`` changed since (class defaults:
    an index pickled before these were kept reads as having none)."""

    least_version = 0
    """Bumped whenever ``least`` changes: a key for what is derived from it (the screen's kept
    requests, ``IncrementalScheduler``)."""

    @staticmethod
    def coarse(w: Workload) -> Coarse:
        return (w.budget, w.model, w.gpus, w.cpus, w.memory, w.min_runtime > 0)

    def screen_shapes(self) -> list[Workload]:
        """One workload per coarse shape, of the least M pending with it: what the idle screen
        needs (it reads the shape and takes the smallest commitment per budget and model). Kept
        until ``least`` changes (:meth:`_least_changed`): the workload kept for ``(c, least[c])``
        is replaced only when that shape's count falls to 0, which moves ``least[c]``. Callers
        only read it; its oracle is :meth:`screen_shapes_walk` (``check``, tests)."""
        got = self._screen
        if got is None:
            got = self._screen = self.screen_shapes_walk()
        return got

    def screen_shapes_walk(self) -> list[Workload]:
        """:meth:`screen_shapes` built from ``least`` and ``shapes`` (one lookup per coarse shape)."""
        shapes = self.shapes
        return [shapes[c, m] for c, m in self.least.items()]

    def _least_changed(self) -> None:
        self._screen = None
        self.least_version += 1

    def sync(self, pending: dict[str, Workload]) -> dict[str, BudgetPending]:
        """Take the index to ``pending`` (id → workload) by comparing; returns the workloads by budget."""
        by_obj = self.by_obj
        now = dict(zip(map(id, pending.values()), pending.values(), strict=True))  # C speed
        gone = [by_obj[i] for i in by_obj.keys() - now.keys()]
        new = [now[i] for i in now.keys() - by_obj.keys()]
        self.by_id = pending  # already the new ids: _apply keeps the other views
        self._apply(gone, new, by_id=False)
        self._source = None
        return self.budgets

    def follow(self, changes: PendingChanges) -> bool:
        """Apply ``changes`` when they continue the changes followed last (same source, next
        serial) and agree with the index; False, changing nothing, otherwise."""
        last, self._source = self._source, (changes.source, changes.serial)
        if last is None or last[0] is not changes.source or last[1] + 1 != changes.serial:
            return False
        by_id = self.by_id
        for wid, w in changes.removed.items():
            if by_id.get(wid) is not w:
                return False
        for wid in changes.added:
            if wid in by_id and wid not in changes.removed:
                return False
        self._apply(changes.removed.values(), changes.added.values())
        self.followed += 1
        return True

    def start_following(self, changes: PendingChanges | None) -> None:
        """After a :meth:`sync` to the snapshot these changes came with: follow them from here."""
        self._source = None if changes is None else (changes.source, changes.serial)

    def _apply(self, gone: Iterable[Workload], new: Iterable[Workload], *, by_id: bool = True) -> None:
        """Drop ``gone`` and add ``new`` in every view; in ``by_id`` too unless told not to
        (:meth:`sync` replaces it whole)."""
        ids, by_obj = self.by_id, self.by_obj
        for w in gone:
            if by_id and ids.get(w.id) is w:
                del ids[w.id]
            del by_obj[id(w)]
            self._drop(w)
        for w in new:
            if by_id:
                ids[w.id] = w
            by_obj[id(w)] = w
            self._add(w)

    def _drop(self, w: Workload) -> None:
        bp = self.budgets[w.budget]
        key = submission_order(w)
        if w.min_runtime > 0:
            lst = bp.allocated
            assert bp.runs is not None  # noqa: S101 (_add made it)
            bp.runs.remove(w)
        else:
            lst = bp.unallocated
        del lst[bisect_left(lst, key, key=submission_order)]
        del bp.ordered[bisect_left(bp.ordered, key, key=submission_order)]
        _count(bp.shapes, shape_of(w), -1)
        if not bp.shapes:
            del self.budgets[w.budget]
        c, m = self.coarse(w), w.min_runtime
        if _count(self.counts, (c, m), -1):
            return
        del self.shapes[c, m]
        ms = self.ms[c]
        ms.discard(m)
        if not ms:
            del self.ms[c], self.least[c]
            self._least_changed()
        elif self.least[c] == m:
            self.least[c] = min(ms)
            self._least_changed()

    def _add(self, w: Workload) -> None:
        bp = self.budgets.get(w.budget)
        if bp is None:
            bp = self.budgets[w.budget] = BudgetPending(runs=SkipIndex())
        if w.min_runtime > 0:
            insort(bp.allocated, w, key=submission_order)
            assert bp.runs is not None  # noqa: S101 (made with the budget's entry)
            bp.runs.add(w)
        else:
            insort(bp.unallocated, w, key=submission_order)
        insort(bp.ordered, w, key=submission_order)
        _count(bp.shapes, shape_of(w), 1)
        c, m = self.coarse(w), w.min_runtime
        if _count(self.counts, (c, m), 1) == 1:
            self.shapes[c, m] = w
            self.ms.setdefault(c, set()).add(m)
            if m < self.least.get(c, m + 1):
                self.least[c] = m
                self._least_changed()


def _count(counts: dict[_K, int], key: _K, delta: int) -> int:
    """Add ``delta`` to ``counts[key]``, deleting it at zero; returns the new count."""
    left = counts.get(key, 0) + delta
    if left:
        counts[key] = left
    else:
        del counts[key]
    return left


__all__ = ["Coarse", "PendingChanges", "PendingIndex", "PendingLog"]
