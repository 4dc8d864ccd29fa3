"""Scheduling a sequence of snapshots with a memory of the last pass (DESIGN.md §3, docs/policy.md).

:class:`IncrementalScheduler` is :func:`scheduler.policy.schedule` with a memory: a callable
``Snapshot -> Decisions`` giving exactly the decisions of ``schedule`` on every snapshot, whatever
the sequence. It keeps the cluster state (:class:`~scheduler.policy.standing.Standing`, synced by
difference) and the pending workloads in submission order (:class:`PendingIndex`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from operator import attrgetter

import scheduler.policy.contract as contract
import scheduler.policy.room_index as room_index
import scheduler.policy.victim_hosts as victim_hosts
from scheduler.policy.attempt_log import attempt_changes
from scheduler.policy.core import Pass, schedule
from scheduler.policy.pending import Coarse, PendingChanges, PendingIndex
from scheduler.policy.queues import BudgetPending, group, submission_order
from scheduler.policy.screen import idle, starts_only
from scheduler.policy.screen_nominees import pending_shape_count
from scheduler.policy.screen_summary import KeptRequests, KeptSummary, Requests, requests_of, summary_of
from scheduler.policy.standing import Rebuild, Standing, nominations_of
from scheduler.policy.standing_check import standing_differences
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Budget, Decisions, Snapshot, Start, Workload
from scheduler.policy.usage import pass_loads

_workload_id = attrgetter("id")


class IncrementalScheduler:
    """``schedule`` with a memory of the last pass (module docstring); one per simulated cluster.

    ``check`` (tests): after every sync, compare with a fresh build and raise AssertionError
    on any difference.

    ``waiting_nominations``: the idle screen also answers for a pass whose open nominations all
    wait or are ready (:func:`~scheduler.policy.screen.starts_only`: their GPUs still held by
    stopping attempts, or held by nothing and the nominee starts there); such a pass returns the
    ready nominees' starts, the other nominations as they are and **no reservations** (the full
    pass may reserve). Only for callers that read no reservations of a pass without reasons with
    open nominations (the forward simulation of estimates, docs/estimates.md); off, every field
    equals ``schedule``'s (bench/replay_passes.py). Under ``check`` every pass it screens is
    compared with a full pass (starts, stops, nominations).
    """

    def __init__(self, *, check: bool = False, waiting_nominations: bool = False) -> None:
        self.check = check
        self.waiting_nominations = waiting_nominations
        self._standing: Standing | None = None
        self._pending = PendingIndex()
        self._budgets: tuple[Budget, ...] | None = None
        self._tree: BudgetTree | None = None
        self.attempts_followed = 0
        self._hosts = KeptSummary()  # the screen's host walk, kept by host version
        self._requests = KeptRequests()  # the screen's reading of the pending shapes, kept while they are
        self.screened = 0
        """Passes the screen answered (tests)."""
        """Snapshots whose attempts were taken by their changes, not compared (tests)."""

    @property
    def followed(self) -> int:
        """Snapshots whose pending workloads were taken by their changes, not compared (tests)."""
        return self._pending.followed

    def _pending_of(self, snap: Snapshot) -> dict[str, Workload]:
        """The snapshot's pending workloads by id, the index brought to them: by the changes
        the snapshot carries when they follow the last ones (:mod:`scheduler.policy.pending`),
        else by comparing the whole list."""
        index = self._pending
        changes = getattr(snap.pending, "changes", None)
        if not (isinstance(changes, PendingChanges) and index.follow(changes)):
            index.sync(dict(zip(map(_workload_id, snap.pending), snap.pending, strict=True)))  # C speed
            index.start_following(changes if isinstance(changes, PendingChanges) else None)
        if self.check:
            _check_index(snap.now, index, snap.pending)
        return index.by_id

    def __call__(self, snap: Snapshot) -> Decisions:
        budgets = tuple(snap.budgets)
        if self._tree is None or not _same(budgets, self._budgets):
            self._tree = BudgetTree(budgets)
            self._budgets = budgets
        tree = self._tree
        pending = self._pending_of(snap)
        standing = self._standing_for(snap, pending)
        if standing is None:
            return schedule(snap)  # a fresh build decides; keep nothing
        if self.check:
            self._check_standing(snap, tree, standing, pending)
        loads: list[tuple[dict[str, int], dict[str, int]]] = []  # computed at most once, when needed

        def load() -> dict[str, int]:
            if not loads:
                loads.append(pass_loads(snap, tree, standing.noms, pending, standing.book))
            return loads[0][1]

        if not snap.with_reasons:
            screened = self._screen(snap, tree, standing, pending, load)
            if screened is not None:
                return screened
        load()
        p = Pass(snap, tree, standing, pending, loads[0], self._pending.budgets)
        p.check = self.check
        p.hosts_kept = self._hosts
        p.coarse = self._pending.least.keys()
        dec = p.run()
        self._standing = standing
        return dec

    def _standing_for(self, snap: Snapshot, pending: dict[str, Workload]) -> Standing | None:
        """The kept standing synced to ``snap`` (or built afresh); None when the snapshot is
        malformed (one GPU claimed twice, or one id twice): ``schedule`` decides, nothing kept."""
        standing, self._standing = self._standing, None  # until this call has finished with it
        # Attempts taken by the producer's changes come from its attempts by id: one id once.
        follows = standing is not None and standing.follows(attempt_changes(snap))
        if not _well_formed(snap, pending, ids=not follows):
            return None
        if standing is None or not standing.fits(snap):
            standing = Standing(snap, pending, kept=True)
        else:
            try:
                standing.sync(snap, pending)
                self.attempts_followed += follows
            except Rebuild:
                standing = Standing(snap, pending, kept=True)
        if standing.state.malformed:
            return None  # two attempts on one GPU
        return standing

    def _check_standing(
        self, snap: Snapshot, tree: BudgetTree, standing: Standing, pending: dict[str, Workload]
    ) -> None:
        """``check``: the kept standing, loads, room indexes, victim rows and screen summary are
        a fresh build's."""
        if len({a.id for a in snap.attempts}) != len(snap.attempts):
            raise AssertionError(f"one attempt id twice at {snap.now}")
        fresh = Standing(snap, pending)
        diff = standing_differences(standing, fresh)
        fresh_loads = pass_loads(snap, tree, fresh.noms, pending)
        if pass_loads(snap, tree, standing.noms, pending, standing.book) != fresh_loads:
            diff.append("loads")
        diff.extend(room_index_differences(standing, tree, fresh_loads[1], pending.values()))
        diff.extend(victim_hosts.kept_rows_differences(standing))
        if self._hosts.of(standing) != summary_of(standing):
            diff.append("screen summary")
        if diff:
            raise AssertionError(f"incremental standing differs at {snap.now}: {diff[:5]}")

    def _screen(
        self,
        snap: Snapshot,
        tree: BudgetTree,
        standing: Standing,
        pending: dict[str, Workload],
        load: Callable[[], dict[str, int]],
    ) -> Decisions | None:
        """The screened pass's decisions (a pass without reasons the screen answers), else None."""
        index = self._pending
        shapes = index.screen_shapes()

        def requests() -> Requests:
            got = self._requests.of(index.least_version, standing, shapes, tree)
            if self.check and got != requests_of(standing, shapes, tree):
                raise AssertionError(f"kept screen requests differ at {snap.now}")
            return got

        if self.waiting_nominations:
            starts = starts_only(
                standing, shapes, tree, load, pending, self._hosts, requests, pending_shape_count(index)
            )
            if starts is None:
                return None
            starting = {s.workload for s in starts}
            dec = Decisions(starts=starts, nominations={k: v for k, v in standing.noms.items() if k not in starting})
        elif idle(standing, shapes, tree, load, None, self._hosts, requests):
            dec = Decisions(nominations=dict(standing.noms))
        else:
            return None
        self._screened(snap, dec, standing)
        return dec

    def _screened(self, snap: Snapshot, dec: Decisions, standing: Standing) -> None:
        """Keep ``standing`` for the next pass (the screened pass changed nothing in it: the
        producer applies the starts and the next sync takes them); under ``check``, the full
        pass over a fresh build must decide the same starts, stops and nominations."""
        self.screened += 1
        self._standing = standing
        if self.check:
            full = Pass(replace(snap, with_reasons=False)).run()
            got = (sorted(full.starts, key=_start_key), full.stops, full.nominations, full.host_states)
            if got != (sorted(dec.starts, key=_start_key), dec.stops, dec.nominations, dec.host_states):
                raise AssertionError(f"screened pass differs from the full pass at {snap.now}: {full} != {dec}")


def _start_key(s: Start) -> str:
    return s.workload


def room_index_differences(
    standing: Standing, tree: BudgetTree, load: Mapping[str, int], workloads: Iterable[Workload]
) -> list[str]:
    """Hosts whose room profile, read from the kept index (``Standing.agg``), differs from a
    fresh :func:`contract.host_room` over their attempts, for each allocated workload, and hosts
    whose kept reservation base (``Standing.rooms``) at their version differs from a fresh
    :func:`room_index.room_base` (tests)."""
    out = []
    st = standing.state
    seen = set()
    for w in workloads:
        if not w.allocated or w.budget not in tree.budgets or (w.budget, w.gpus * w.min_runtime) in seen:
            continue
        seen.add((w.budget, w.gpus * w.min_runtime))
        allowed = contract.allowed_budgets(tree, load, w.budget, contract.commitment(w), standing.agg_budgets)
        classes = {v: contract.budget_class(w, v, allowed, tree.budgets) for v in standing.agg_budgets}
        for hv in st.hosts.values():
            fresh = room_index.counts_of(contract.host_room(st, hv, w, allowed, tree.budgets, st.now))
            kept = room_index.indexed_counts(st, hv, standing.agg.get(hv.name), classes)
            if fresh != kept:
                out.append(f"room of {hv.name} for {w.id}: {kept} != {fresh}")
    for name, (version, base) in standing.rooms.items():  # reservations' bases kept since their version
        if version == st.version.get(name, 0) and base != room_index.room_base(st, st.hosts[name]):
            out.append(f"kept room base of {name}: {base} != {room_index.room_base(st, st.hosts[name])}")
    return out


def _check_index(now: int, index: PendingIndex, snapshot_pending: Iterable[Workload]) -> None:
    """Raise AssertionError when the kept pending index differs from a fresh grouping (tests)."""
    pending = {w.id: w for w in snapshot_pending}
    if index.by_id.keys() != pending.keys() or any(index.by_id[k] is not w for k, w in pending.items()):
        raise AssertionError(f"pending workloads differ at {now}")
    fresh = group(sorted(pending.values(), key=submission_order))

    def ids(grouped: Mapping[str, BudgetPending]) -> dict[str, tuple[object, ...]]:
        return {
            b: ([id(w) for w in bp.allocated], [id(w) for w in bp.unallocated], bp.shapes) for b, bp in grouped.items()
        }

    if ids(index.budgets) != ids(fresh):
        raise AssertionError(f"pending index differs at {now}")
    for b, bp in index.budgets.items():  # the skipped runs' index against a fresh cut of its list
        if bp.runs is None or (diff := bp.runs.differences(bp.allocated)):
            raise AssertionError(f"skip index of {b} differs at {now}: {diff if bp.runs else 'none'}")
    shapes = {(PendingIndex.coarse(w), w.min_runtime) for w in pending.values()}
    least: dict[Coarse, int] = {}
    for c, m in shapes:
        least[c] = min(least.get(c, m), m)
    kept = {k: (PendingIndex.coarse(w), w.min_runtime) for k, w in index.shapes.items()}
    if set(index.shapes) != shapes or any(k != v for k, v in kept.items()):
        raise AssertionError(f"pending shapes differ at {now}")
    if index.least != least:
        raise AssertionError(f"least minimum runtimes differ at {now}")
    kept_list, walked = index.screen_shapes(), index.screen_shapes_walk()
    if len(kept_list) != len(walked) or any(a is not b for a, b in zip(kept_list, walked, strict=False)):
        raise AssertionError(f"kept screen shapes differ at {now}")
    if index.by_obj.keys() != {id(w) for w in pending.values()}:
        raise AssertionError(f"pending objects differ at {now}")


def _well_formed(snap: Snapshot, pending: dict[str, Workload], *, ids: bool = True) -> bool:
    """No attempt id twice (unless not ``ids``: attempts taken by a producer's changes) and no GPU
    nominated twice (double-booked GPUs: ``ClusterState.malformed``)."""
    if ids and len({a.id for a in snap.attempts}) != len(snap.attempts):
        return False
    claimed = [g for gpus in nominations_of(snap, pending).values() for g in gpus]
    return len(claimed) == len(set(claimed))


def _same(a: Sequence[object], b: Sequence[object] | None) -> bool:
    return b is not None and len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


__all__ = ["IncrementalScheduler", "PendingIndex", "room_index_differences"]
