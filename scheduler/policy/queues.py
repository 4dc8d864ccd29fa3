"""The pending queues of a pass (docs/policy.md "One pass, in order", step 3).

Each pending workload is ``unschedulable`` (no host set could ever hold it), ``dependency`` or
``held`` by a hold of its own (``waits``), ``held`` (its budget or an ancestor is on hold),
``budget_capped`` (cap reached, ``on_cap=hold``) or queued: allocated work in the allocated pass,
unallocated and cap-downgraded ("unfunded") work in the unallocated pass, each budget's queue in
submission order.

The pending workloads come grouped by budget (:class:`BudgetPending`): built per pass by
:func:`group` or kept between passes by ``incremental.PendingIndex``. Without reasons, a budget
whose shapes are all schedulable is classified as a whole (its lists are queued as they are);
otherwise workload by workload, in submission order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from scheduler.policy.skip_index import SkipIndex
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import OnCap, PendingReason, Workload

submission_order = attrgetter("submitted_at", "seq", "id")
"""The order a pass walks pending workloads in (and each budget's queue)."""

_SUBMISSION_KEYS = (attrgetter("id"), attrgetter("seq"), attrgetter("submitted_at"))


def submission_sorted(ws: Iterable[Workload]) -> list[Workload]:
    """``sorted(ws, key=submission_order)``, as three stable sorts on one attribute each, least
    significant first: the same list (a stable sort keeps the order of the earlier keys among
    equal later ones), without a tuple per workload and a tuple comparison per step (3× faster
    on 140,000 workloads; tests/policy/test_queues_kept.py)."""
    out = sorted(ws, key=_SUBMISSION_KEYS[0])
    for key in _SUBMISSION_KEYS[1:]:
        out.sort(key=key)
    return out


Queues = dict[str, list[Workload]]
Shape = tuple[str, int, int | None, int | None, bool]
"""(model, GPUs, CPUs, memory, may wait on a dependency or its own hold): what classifying a
workload reads of it."""


def shape_of(w: Workload) -> Shape:
    return (w.model, w.gpus, w.cpus, w.memory, w.waiting or w.group is not None or bool(w.hold))


Reason = Callable[[Workload, PendingReason, dict[str, object]], None]


@dataclass(slots=True)
class BudgetPending:
    """One budget's pending workloads in submission order: all of them, the allocated ones and
    the unallocated ones, and how many of each (model, GPUs) shape. Read-only for a pass (a kept
    index owns the lists). ``runs``: the allocated list's :class:`SkipIndex` where a kept index
    keeps one (``PendingIndex``), else None."""

    ordered: list[Workload] = field(default_factory=list)
    allocated: list[Workload] = field(default_factory=list)
    unallocated: list[Workload] = field(default_factory=list)
    shapes: dict[Shape, int] = field(default_factory=dict)
    runs: SkipIndex | None = None


def group(ordered: Iterable[Workload]) -> dict[str, BudgetPending]:
    """``ordered`` (in submission order) grouped by budget."""
    out: dict[str, BudgetPending] = {}
    for w in ordered:
        bp = out.get(w.budget)
        if bp is None:
            bp = out[w.budget] = BudgetPending()
        bp.ordered.append(w)
        (bp.allocated if w.min_runtime > 0 else bp.unallocated).append(w)
        shape = shape_of(w)
        bp.shapes[shape] = bp.shapes.get(shape, 0) + 1
    return out


class QueueBuilder:
    """Splits the pending workloads of a pass into its two queues (module docstring)."""

    def __init__(
        self,
        tree: BudgetTree,
        unschedulable: Callable[[str, int, int | None, int | None], bool],
        reason: Reason,
        waits: Callable[[Workload], bool],
        *,
        with_reasons: bool,
    ) -> None:
        self.tree = tree
        self.unschedulable = unschedulable
        self.reason = reason
        self.waits = waits
        self.with_reasons = with_reasons
        self.alloc_q: Queues = {}
        self.unalloc_q: Queues = {}
        self.unfunded: set[str] = set()

    def build(self, pending: Mapping[str, BudgetPending]) -> tuple[Queues, Queues]:
        """The allocated and unallocated queues; ``unfunded`` collects the downgraded workloads."""
        tree = self.tree
        for budget in sorted(pending):
            if budget not in tree.budgets:
                continue
            bp = pending[budget]
            if any(self._special(shape) for shape in bp.shapes) or (self.with_reasons and self._blocked(budget, bp)):
                self._each(budget, bp.ordered)
            else:
                self._whole(budget, bp)
        return self.alloc_q, self.unalloc_q

    def _blocked(self, budget: str, bp: BudgetPending) -> bool:
        """True when some workload of the budget is held or capped: each then needs its reason.
        Otherwise, with no special shape, :meth:`_each` queues the budget's lists as they are and
        records no reason, which is :meth:`_whole` (tests/policy/test_queues_kept.py)."""
        return self.tree.held(budget) or (bool(bp.allocated) and self.tree.capped_by(budget) is not None)

    def _special(self, shape: Shape) -> bool:
        """True when workloads of ``shape`` may need a reason of their own (unschedulable,
        dependency, their own hold)."""
        model, gpus, cpus, memory, may_wait = shape
        return may_wait or self.unschedulable(model, gpus, cpus, memory)

    def _whole(self, budget: str, bp: BudgetPending) -> None:
        """The budget's lists as they are: nothing in them is unschedulable or may wait on a
        dependency, no reason is wanted."""
        tree = self.tree
        if tree.held(budget):
            return
        capper = tree.capped_by(budget) if bp.allocated else None
        if capper is None:
            if bp.allocated:
                self.alloc_q[budget] = bp.allocated
            if bp.unallocated:
                self.unalloc_q[budget] = bp.unallocated
        elif capper.on_cap == OnCap.HOLD:
            if bp.unallocated:
                self.unalloc_q[budget] = bp.unallocated
        else:
            self.unfunded.update(w.id for w in bp.allocated)
            self.unalloc_q[budget] = bp.ordered

    def _each(self, budget: str, ordered: list[Workload]) -> None:
        """Workload by workload, in submission order, each blocked one with its reason."""
        tree = self.tree
        held = tree.held(budget)
        for w in ordered:
            if self.unschedulable(w.model, w.gpus, w.cpus, w.memory):
                self.reason(w, PendingReason.UNSCHEDULABLE, {"model": w.model, "gpus": w.gpus})
                continue
            if self.waits(w):  # records the `dependency` reason, or `held` for its own hold
                continue
            if held:
                self.reason(w, PendingReason.HELD, {})
                continue
            allocated = w.min_runtime > 0
            capper = tree.capped_by(budget) if allocated else None
            if capper is not None and capper.on_cap == OnCap.HOLD:
                self.reason(w, PendingReason.BUDGET_CAPPED, {"budget": tree.path_name(capper.key)})
                continue
            if allocated and capper is None:
                self.alloc_q.setdefault(budget, []).append(w)
            else:
                if allocated:
                    self.unfunded.add(w.id)
                self.unalloc_q.setdefault(budget, []).append(w)


__all__ = ["BudgetPending", "QueueBuilder", "Queues", "group", "submission_order", "submission_sorted"]
