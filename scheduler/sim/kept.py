"""The scenario engine's pending workloads, kept between snapshots (scheduler/sim/engine.py).

:class:`WorkloadBook` is the engine's ``workloads`` dict, told by every workload in it when its
state or a field of its policy view is set (``SimWorkload.__setattr__``); :class:`PendingViews`
then refreshes only those workloads at the next snapshot and hands the policy the changes since
the last one (:class:`~scheduler.policy.pending.PendingLog`), so that neither the snapshot nor the
policy's pending index walks every workload per pass. ``Engine.plain_snapshot`` (a walk over every
workload) is the oracle, compared on every pass in tests/sim/test_engine_views.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import TYPE_CHECKING

from scheduler.policy.pending import PendingChanges, PendingLog
from scheduler.policy.types import Workload

if TYPE_CHECKING:
    from scheduler.sim.engine import SimWorkload

_first = itemgetter(0)


class WorkloadBook(dict[str, "SimWorkload"]):
    """The engine's workloads by id, watching them (module docstring).

    ``dirty``: the workloads whose state or view changed since :class:`PendingViews` last read
    them; ``version`` counts the changes it cannot follow (a workload replaced or removed, any
    other change of the dict: it then looks at every workload again); ``shared``: a workload of
    this book was put in another one (it tells only that one), under a key that is not its id (or
    its id changed) or under two keys, so the book is walked at every snapshot from then on."""

    def __init__(self) -> None:
        super().__init__()
        self.dirty: dict[int, SimWorkload] = {}
        self.version = 0
        self.shared = False

    def __setitem__(self, key: str, w: SimWorkload) -> None:
        old = self.get(key)
        if old is not w:
            prev = w.__dict__.get("_book")
            if key != w.id or prev is self:
                self.shared = True  # not under its id, or under two keys: walked from now on
            elif old is not None:
                self.version += 1  # replaced
            if prev is not None and prev is not self:
                prev.shared = True
            object.__setattr__(w, "_book", self)
            self.dirty[id(w)] = w
        super().__setitem__(key, w)

    def touch(self, w: SimWorkload, name: str) -> None:
        """``w``'s ``name`` is being set (``SimWorkload.__setattr__``)."""
        if name == "id":
            self.shared = True  # no longer under its id
        self.dirty[id(w)] = w

    def _changed(self) -> None:
        self.version += 1

    def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
        """Copied and pickled as a new book with the same items (the default restored the state
        and then set every item again)."""
        return (type(self), (), None, None, iter(self.items()))


def _counting(name: str) -> Callable[..., object]:
    """``dict.<name>``, then a change the views cannot follow counted."""
    base = getattr(dict, name)

    def method(self: WorkloadBook, *args: object, **kwargs: object) -> object:
        out = base(self, *args, **kwargs)
        self._changed()
        return out

    method.__name__ = name
    return method


for _name in ("__delitem__", "__ior__", "pop", "popitem", "setdefault", "update", "clear"):
    setattr(WorkloadBook, _name, _counting(_name))


class PendingList(list[Workload]):
    """A snapshot's pending workloads (``snap.pending``) with the :class:`PendingChanges` since the
    engine's previous snapshot (``changes``): any reader sees a list; the policy follows them."""

    def __init__(self, items: Iterable[Workload], changes: PendingChanges | None) -> None:
        super().__init__(items)
        self.changes = changes


class PendingViews:
    """The views of the pending workloads of one engine's :class:`WorkloadBook`, in the book's
    order, kept between snapshots: :meth:`of` refreshes the workloads the book says changed."""

    def __init__(self) -> None:
        self.book: WorkloadBook | None = None
        self.version = -1
        self.handed: dict[str, tuple[int, Workload]] = {}  # workload id -> (place in the book, view)
        self.place: dict[int, int] = {}  # id(workload) -> its place in the book's order
        self.items: list[Workload] = []
        self.log = PendingLog()

    def of(self, workloads: dict[str, SimWorkload]) -> list[Workload]:
        """The pending views of ``workloads`` (the engine's :attr:`Engine.workloads`), as
        ``[w.as_pending() for w in workloads.values() if w.state == "pending"]``."""
        book = workloads
        if not isinstance(book, WorkloadBook) or book.shared:
            self.book = None
            return [w.as_pending() for w in book.values() if w.state == "pending"]
        if book is not self.book or book.version != self.version:
            return self._rebuild(book)
        dirty = book.dirty
        if dirty:
            book.dirty = {}
            self._refresh(book, dirty.values())
        return PendingList(self.items, self.log.cut())

    def _rebuild(self, book: WorkloadBook) -> list[Workload]:
        """Every workload looked at again; a new log (the policy compares this once)."""
        self.book, self.version = book, book.version
        book.dirty = {}
        self.place = {id(w): i for i, w in enumerate(book.values())}
        self.handed = {}
        for i, w in enumerate(book.values()):
            if w.state == "pending":
                self.handed[w.id] = (i, w.as_pending())
        self.items = [v for _, v in self.handed.values()]
        self.log = PendingLog()
        return PendingList(self.items, self.log.cut())

    def _refresh(self, book: WorkloadBook, dirty: Iterable[SimWorkload]) -> None:
        handed, log, place = self.handed, self.log, self.place
        changed = False
        for w in dirty:
            where = place.get(id(w))
            if where is None:  # new: appended to the book's order
                where = place[id(w)] = len(place)
            old = handed.get(w.id)
            new = w.as_pending() if w.state == "pending" else None
            if old is not None and old[1] is new:
                continue
            if old is not None:
                log.remove(old[1])
                del handed[w.id]
                changed = True
            if new is not None:
                log.add(new)
                handed[w.id] = (where, new)
                changed = True
        if changed:
            self.items = [v for _, v in sorted(handed.values(), key=_first)]
