"""Scheduling a sequence of snapshots with a memory of the last pass (DESIGN.md §3, docs/policy.md).

:class:`IncrementalScheduler` is :func:`scheduler.policy.schedule` with a memory: a callable
``Snapshot -> Decisions`` giving exactly the decisions of ``schedule`` on every snapshot, whatever
the sequence. It keeps the cluster state (:class:`~scheduler.policy.standing.Standing`, synced by
difference) and the pending workloads in submission order (:class:`PendingIndex`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence

import scheduler.policy.contract as contract
from scheduler.policy.core import Pass, schedule
from scheduler.policy.screen import idle
from scheduler.policy.standing import Rebuild, Standing, nominations_of
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Budget, Decisions, Snapshot, Workload
from scheduler.policy.usage import pass_loads


class PendingIndex:
    """The pending workloads in submission order and their distinct shapes, kept by difference.

    :meth:`sync` takes the pending workloads of a snapshot (id → workload) and returns them
    ordered by (submitted_at, seq, id), the order a pass walks them in; ``shapes`` maps each
    (budget, model, GPUs, M) to one workload of that shape, all the idle screen needs. Costs
    O(changes × log n) plus a C-speed set difference per call instead of a sort.
    """

    def __init__(self) -> None:
        self.objs: dict[str, Workload] = {}
        self.order: list[tuple[int, int, str]] = []
        self.counts: dict[tuple[str, str, int, int], int] = {}
        self.shapes: dict[tuple[str, str, int, int], Workload] = {}

    @staticmethod
    def _shape(w: Workload) -> tuple[str, str, int, int]:
        return (w.budget, w.model, w.gpus, w.min_runtime)

    def _drop(self, wid: str) -> None:
        w = self.objs.pop(wid)
        key = (w.submitted_at, w.seq, w.id)
        i = bisect_left(self.order, key)
        del self.order[i]
        shape = self._shape(w)
        left = self.counts[shape] - 1
        if left:
            self.counts[shape] = left
        else:
            del self.counts[shape]
            del self.shapes[shape]

    def _add(self, w: Workload) -> None:
        self.objs[w.id] = w
        insort(self.order, (w.submitted_at, w.seq, w.id))
        shape = self._shape(w)
        self.counts[shape] = self.counts.get(shape, 0) + 1
        self.shapes.setdefault(shape, w)

    def sync(self, pending: dict[str, Workload]) -> list[Workload]:
        """Take the index to ``pending``; returns the workloads in submission order."""
        objs = self.objs
        gone = objs.keys() - pending.keys()
        changed = [wid for wid, w in pending.items() if objs.get(wid) is not w]
        for wid in gone:
            self._drop(wid)
        for wid in changed:
            if wid in objs:
                self._drop(wid)
            self._add(pending[wid])
        return [objs[k[2]] for k in self.order]


class IncrementalScheduler:
    """``schedule`` with a memory of the last pass (module docstring); one per simulated cluster.

    ``check`` (tests): after every sync, compare with a fresh build and raise AssertionError
    on any difference.
    """

    def __init__(self, *, check: bool = False) -> None:
        self.check = check
        self._standing: Standing | None = None
        self._pending = PendingIndex()
        self._budgets: tuple[Budget, ...] | None = None
        self._tree: BudgetTree | None = None

    def __call__(self, snap: Snapshot) -> Decisions:
        budgets = tuple(snap.budgets)
        if self._tree is None or not _same(budgets, self._budgets):
            self._tree = BudgetTree(budgets)
            self._budgets = budgets
        tree = self._tree
        pending = {w.id: w for w in snap.pending}
        standing, self._standing = self._standing, None  # until this call has finished with it
        if not _well_formed(snap, pending):
            return schedule(snap)  # one GPU claimed twice, or one id: a fresh build decides; keep nothing
        if standing is None or not standing.fits(snap):
            standing = Standing(snap, pending, kept=True)
        else:
            try:
                standing.sync(snap, pending)
            except Rebuild:
                standing = Standing(snap, pending, kept=True)
        if standing.state.malformed:
            return schedule(snap)  # two attempts on one GPU: a fresh build decides; keep nothing
        if self.check:
            fresh = Standing(snap, pending)
            diff = standing.same_as(fresh)
            fresh_loads = pass_loads(snap, tree, fresh.noms, pending)
            if pass_loads(snap, tree, standing.noms, pending, standing.book) != fresh_loads:
                diff.append("loads")
            diff.extend(room_index_differences(standing, tree, fresh_loads[1], pending.values()))
            if diff:
                raise AssertionError(f"incremental standing differs at {snap.now}: {diff[:5]}")
        loads: list[tuple[dict[str, int], dict[str, int]]] = []  # computed at most once, when needed

        def load() -> dict[str, int]:
            if not loads:
                loads.append(pass_loads(snap, tree, standing.noms, pending, standing.book))
            return loads[0][1]

        index = self._pending
        ordered = index.sync(pending)
        if self.check:
            expected = sorted(pending.values(), key=lambda w: (w.submitted_at, w.seq, w.id))
            shapes = {PendingIndex._shape(w) for w in expected}
            if [w.id for w in ordered] != [w.id for w in expected] or set(index.shapes) != shapes:
                raise AssertionError(f"pending index differs at {snap.now}")
        if not snap.with_reasons and idle(standing, index.shapes.values(), tree, load):
            self._standing = standing
            return Decisions()
        load()
        dec = Pass(snap, tree, standing, pending, loads[0], ordered).run()
        self._standing = standing
        return dec


def room_index_differences(
    standing: Standing, tree: BudgetTree, load: Mapping[str, int], workloads: Iterable[Workload]
) -> list[str]:
    """Hosts whose room profile, read from the kept index (``Standing.agg``), differs from a
    fresh :func:`contract.host_room` over their attempts, for each allocated workload (tests)."""
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
            fresh = contract.counts_of(contract.host_room(st, hv, w, allowed, tree.budgets, st.now))
            kept = contract.indexed_counts(st, hv, standing.agg.get(hv.name), classes)
            if fresh != kept:
                out.append(f"room of {hv.name} for {w.id}: {kept} != {fresh}")
    return out


def _well_formed(snap: Snapshot, pending: dict[str, Workload]) -> bool:
    """No attempt id twice and no GPU nominated twice (double-booked GPUs: ``ClusterState.malformed``)."""
    if len({a.id for a in snap.attempts}) != len(snap.attempts):
        return False
    claimed = [g for gpus in nominations_of(snap, pending).values() for g in gpus]
    return len(claimed) == len(set(claimed))


def _same(a: Sequence[object], b: Sequence[object] | None) -> bool:
    return b is not None and len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


__all__ = ["IncrementalScheduler", "PendingIndex", "room_index_differences"]
