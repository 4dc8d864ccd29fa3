"""The unallocated pass's rest proved idle (passes without reasons; ``Pass._dispatch_unallocated``).

Without reasons the unallocated pass may end early: once every (model, CPUs, memory) of its queues
has failed free placement with its fewest GPUs there, nothing later can start (room only shrinks
in this pass, free placement is monotone in GPUs for one model and requests), and a workload that
does not start changes nothing but its reason (none wanted) or, waiting in a group, a nomination
it holds (none here: the rest is not proved when a queued workload holds one).

What it reads of the queues: per (model, CPUs, memory) their fewest GPUs, and whether a queued
workload holds a nomination. A queue that is its budget's kept unallocated list
(``BudgetPending.unallocated``, ``PendingIndex``) is read from the index's coarse shapes
(``PendingIndex.least``: one key per (budget, model, GPUs, CPUs, memory, allocated) pending) and
the nominations looked up by id, not walked (pol34: a walk of every unallocated workload, ≈ 30 ms
a pass in the whole trace's backlog); other queues are walked. :func:`rest_shapes_walk` walks every
queue; under ``check`` both are compared (:class:`UnallocatedRest`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.policy.queues import BudgetPending, Queues
from scheduler.policy.types import Workload

RestShape = tuple[str, int | None, int | None]
"""(model, CPUs, memory): what free placement's failures of the pass are kept by."""

Coarse = tuple[str, str, int, int | None, int | None, bool]
"""``PendingIndex``'s coarse shape: (budget, model, GPUs, CPUs, memory, allocated)."""


def _fold(least: dict[RestShape, int], shape: RestShape, gpus: int) -> None:
    if gpus < least.get(shape, 1 << 30):
        least[shape] = gpus


def rest_shapes_walk(queues: Queues, noms: Mapping[str, object]) -> tuple[dict[RestShape, int], bool]:
    """Per (model, CPUs, memory) the fewest GPUs queued, and whether a queued workload holds a
    nomination: every queue walked (the oracle of :func:`rest_shapes`)."""
    least: dict[RestShape, int] = {}
    nominated = False
    for q in queues.values():
        for w in q:
            _fold(least, (w.model, w.cpus, w.memory), w.gpus)
            nominated = nominated or w.id in noms
    return least, nominated


def rest_shapes(
    queues: Queues,
    noms: Mapping[str, object],
    grouped: Mapping[str, BudgetPending] | None,
    coarse: Iterable[Coarse] | None,
    pending: Mapping[str, Workload],
) -> tuple[dict[RestShape, int], bool]:
    """:func:`rest_shapes_walk`, the kept lists read from ``coarse`` (module docstring): a pending
    workload with M 0 of a budget whose queue is its kept unallocated list is in that queue."""
    kept: set[str] = set()
    if grouped is not None and coarse is not None:
        kept = {b for b, q in queues.items() if (bp := grouped.get(b)) is not None and q is bp.unallocated}
    least, nominated = rest_shapes_walk({b: q for b, q in queues.items() if b not in kept}, noms)
    if kept:
        for budget, model, gpus, cpus, memory, allocated in coarse or ():
            if not allocated and budget in kept:
                _fold(least, (model, cpus, memory), gpus)
        for wid in noms:
            w = pending.get(wid)
            if w is not None and w.min_runtime == 0 and w.budget in kept:
                nominated = True
    return least, nominated


class UnallocatedRest:
    """One unallocated pass's proof (module docstring): :meth:`failed` after each first failure
    of a shape at its size; under ``check`` :meth:`verify` fails if anything started after the
    rest was proved idle."""

    def __init__(
        self,
        queues: Queues,
        noms: Mapping[str, object],
        grouped: Mapping[str, BudgetPending] | None = None,
        coarse: Iterable[Coarse] | None = None,
        pending: Mapping[str, Workload] | None = None,
        *,
        check: bool = False,
    ) -> None:
        least, nominated = rest_shapes(queues, noms, grouped, coarse, pending or {})
        if check and (least, nominated) != (walked := rest_shapes_walk(queues, noms)):
            raise AssertionError(f"the unallocated queues' shapes from the index {least, nominated} != {walked}")
        self.least = least
        self.open = len(least) if not nominated else -1  # shapes not yet failed at their fewest GPUs
        self.ended: int | None = None  # the starts when the rest was proved idle

    def failed(self, shape: RestShape, gpus: int, starts: int) -> bool:
        """A free placement of ``gpus`` GPUs of ``shape`` failed (the first failure of the shape
        at that size or fewer): True when nothing later can start."""
        if self.open < 0 or gpus > self.least[shape] or self.ended is not None:
            return False
        self.open -= 1
        if self.open:
            return False
        self.ended = starts
        return True

    def verify(self, starts: int, now: int) -> None:
        """Under ``check``: nothing started after the rest was proved idle."""
        if self.ended is not None and starts != self.ended:
            raise AssertionError(f"the unallocated pass at {now} started {starts - self.ended} after its end")
