"""Indexes of the room profile (:func:`scheduler.policy.contract.host_room`), kept between passes.

The contract states a host's room profile once (contract.py); what the pass keeps so as not to
rebuild it for every host and every pending workload is an index of it, here:

- :func:`indexed_counts` / :func:`indexed_sums`: a profile's totals read from the per-host,
  per-budget counts ``Standing.agg`` (:func:`index_slot` says where an attempt sits in them);
- :class:`RoomBase` (:func:`room_base`): what a reservation reads of a host before the workload,
  rule 2 and ``now`` are applied, kept per host version (``Standing.rooms``).

``IncrementalScheduler(check=True)`` compares every kept index with a fresh :func:`host_room` on
every pass (``room_index_differences``); tests/policy/test_contract.py compares :class:`RoomBase`
with it on random hosts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from scheduler.policy.contract import FORBIDDEN, NOW, HostRoom, protection_end
from scheduler.policy.state import AttemptView, ClusterState, HostView


@dataclass(slots=True)
class RoomBase:
    """What :func:`host_room` reads of one host for any allocated workload, before the workload,
    rule 2 and ``now`` are applied (:func:`room_base`): a reservation's index of the room profile,
    kept between passes per host version (``Standing.rooms``; a protection's end bumps it too).

    Its answers are :meth:`HostRoom.over_time` and :meth:`HostRoom.vacated_at` of
    ``host_room(state, hv, w, allowed, known, now)`` for every allocated ``w`` whose ``allowed``
    (:meth:`PassState.room_budgets`) holds only budgets of the tree other than ``w``'s own
    (tests/policy/test_contract.py compares them on random hosts)."""

    free: int
    unalloc: int
    """GPUs of unallocated work not leaving: NOW for every allocated workload."""
    nominated: bool
    leaving: list[tuple[int | None, int]]
    """``(release_at, GPUs)`` of each leaving attempt with healthy GPUs no one is nominated for."""
    unprotected: dict[str, int]
    """Budget → GPUs of its unprotected allocated work (NOW when allowed, else not room)."""
    protected: dict[str, list[tuple[int | None, int, int]]]
    """Budget → ``(protected_until, M, GPUs)`` of its protected allocated work (LATER when allowed)."""
    held: set[str]
    """Budgets holding GPUs of allocated work here (not leaving): no vacating unless all are allowed."""

    def over_time(self, allowed: frozenset[str], now: int) -> tuple[int, list[tuple[int, int]], int]:
        """:meth:`HostRoom.over_time` for a workload whose rule 2 allows ``allowed``."""
        room_now = self.unalloc
        for v, g in self.unprotected.items():
            if v in allowed:
                room_now += g
        events = [(now, room_now)] if room_now else []
        events.extend((now if r is None else max(now, r), g) for r, g in self.leaving)
        for v, entries in self.protected.items():
            if v in allowed:
                events.extend((protection_end(pu, m, now), g) for pu, m, g in entries)
        events.sort()
        have = self.free
        return have, events, have + sum(g for _, g in events)

    def vacated_at(self, allowed: frozenset[str], now: int) -> int | None:
        """:meth:`HostRoom.vacated_at` for a workload whose rule 2 allows ``allowed``."""
        t = self.vacated_from(allowed, now)
        return None if t is None else max(now, t)

    def vacated_from(self, allowed: frozenset[str], now: int | None) -> int | None:
        """:meth:`vacated_at` before the clamp to ``now``: the latest release and protection end
        (:data:`EARLIEST` when none; None: never). With ``now`` None it reads no instant and
        answers :data:`STARTING` where a protection still starting would (its end is ``now +
        M``): otherwise the answer holds at every ``now`` while the host's version stands, read
        as ``max(now, t)`` (reserve.py keeps it so)."""
        if self.nominated or not self.held <= allowed:
            return None
        t = EARLIEST
        for r, _ in self.leaving:
            if r is not None and r > t:
                t = r
        for v, entries in self.protected.items():
            if v in allowed:
                for pu, m, _ in entries:
                    if pu is None and now is None:
                        return STARTING
                    t = max(t, protection_end(pu, m, now or 0))
        return t


EARLIEST = -(1 << 62)
""":meth:`RoomBase.vacated_from` of a host with nothing to wait for: vacated from ``now``."""
STARTING = 1 << 62
""":meth:`RoomBase.vacated_from` without ``now`` where a starting attempt's protection is read."""


def room_base(state: ClusterState, hv: HostView) -> RoomBase:
    """The :class:`RoomBase` of ``hv``: :func:`host_room`'s walk over its attempts, by budget."""
    name = hv.name
    nominated = state.nominated
    base = RoomBase(len(hv.free), 0, bool(state.nominees.get(name)), [], {}, {}, set())
    for aid in hv.attempts:
        av = state.attempts[aid]
        a = av.attempt
        got = av.on_host.get(name, 0)
        if av.stopping:
            gone = sum(1 for g in a.gpus if g[0] == name and g[1] in hv.healthy and g not in nominated)
            if gone:
                base.leaving.append((a.release_at, gone))
        elif not a.allocated:
            base.unalloc += got
        elif av.protected:
            base.protected.setdefault(a.budget, []).append((a.protected_until, a.min_runtime, got))
        else:
            base.unprotected[a.budget] = base.unprotected.get(a.budget, 0) + got
        if got and a.allocated and not av.stopping:
            base.held.add(a.budget)
    return base


class RoomCounts(NamedTuple):
    """The totals of a :class:`HostRoom` that the pass's aggregates index (no instants).

    A named tuple: the reason tables build one per host and table (cheap to make)."""

    free: int
    now: int
    later: int
    forbidden: int
    witness: str | None
    never: int
    stopping: bool
    nominated: bool

    def levels(self) -> tuple[int, int, int, int]:
        """Room at levels 0 (free), 1 (+ NOW), 2 (+ LATER), 3 (+ FORBIDDEN) of §3.8's reasons."""
        h1 = self.free + self.now
        h2 = h1 + self.later
        return self.free, h1, h2, h2 + self.forbidden

    def worst(self) -> int:
        """A whole host's level for a gang (:func:`worst_level`)."""
        return worst_level(self.now, self.later, self.forbidden, self.never or self.stopping or self.nominated)


def worst_level(now: int, later: int, forbidden: int, never: object) -> int:
    """A whole host's level for a gang: the worst class of its work (GPUs by class), 0 when
    empty, 4 when it can never be vacated for the workload (``never``: own work, leaving work or
    nominated GPUs there)."""
    if never:
        return 4
    if forbidden:
        return 3
    if later:
        return 2
    return 1 if now else 0


def counts_of(room: HostRoom) -> RoomCounts:
    """The totals of a fresh profile, to compare with :func:`indexed_counts`."""
    later = sum(g for _, g, _ in room.later)
    return RoomCounts(
        room.free, room.now, later, room.forbidden, room.witness, room.never, room.stopping, room.nominated
    )


def indexed_counts(
    state: ClusterState, hv: HostView, per_budget: Mapping[str, list[int]] | None, classes: Mapping[str, int]
) -> RoomCounts:
    """:func:`counts_of` :func:`host_room` for an allocated workload, read from the index.

    ``per_budget`` is ``Standing.agg[host]`` (budget → [unprotected, protected] GPUs of allocated
    work not leaving); ``classes`` maps each such budget to :func:`budget_class`.
    """
    now, later, forbidden, never, witness = indexed_sums(hv, per_budget, classes)
    return RoomCounts(
        len(hv.free), now, later, forbidden, witness, never, bool(hv.stopping), bool(state.nominees.get(hv.name))
    )


def indexed_sums(
    hv: HostView, per_budget: Mapping[str, list[int]] | None, classes: Mapping[str, int]
) -> tuple[int, int, int, int, str | None]:
    """GPUs of ``hv`` by class, read from the index: ``(NOW, LATER, FORBIDDEN, NEVER, witness)``
    (the fields of :func:`indexed_counts`, as a plain tuple for the tables built per host).

    NOW counts unallocated work (room for every allocated workload) and unprotected allocated
    work of NOW budgets; LATER their protected work; the witness is the smallest FORBIDDEN budget.
    """
    now = hv.unalloc
    later = forbidden = never = 0
    witness: str | None = None
    if per_budget:
        for v, counts in per_budget.items():
            c = classes[v]
            if c == NOW:
                now += counts[0]
                later += counts[1]
            elif c == FORBIDDEN:
                forbidden += counts[0] + counts[1]
                # the smallest key: the same whatever order the work was seen in
                witness = v if witness is None or v < witness else witness
            else:
                never += counts[0] + counts[1]
    return now, later, forbidden, never, witness


def index_slot(av: AttemptView) -> int | None:
    """Where an attempt sits in the index of room profiles: 0 (unprotected allocated work, NOW or
    FORBIDDEN by budget), 1 (protected: LATER or FORBIDDEN), None (not indexed: unallocated work
    is counted per host, leaving work is nobody's room but its release)."""
    a = av.attempt
    if not a.allocated or av.stopping:
        return None
    return 0 if not av.protected and a.started_at is not None else 1
