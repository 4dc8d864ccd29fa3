"""The idle screen's reading of open nominations (``screen.py``, module docstring): whether
every nomination waits or is ready (:func:`nominations_wait`), and the preemption wants without
the coarse shapes held only by nominees (:func:`want_without_nominees`, read with
``shape_count``: :func:`pending_shape_count`, :func:`counts_of`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from scheduler.policy.pending import Coarse, PendingIndex
from scheduler.policy.screen_summary import NONE, Requests, Want, fold
from scheduler.policy.standing import Standing
from scheduler.policy.state import HostView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import GpuRef, Workload


def counts_of(pending: Iterable[Workload]) -> Callable[[Coarse], int]:
    """``shape_count`` of a bare list of pending workloads (tests, bare snapshots)."""
    counts = Counter(PendingIndex.coarse(w) for w in pending)
    return counts.__getitem__


def pending_shape_count(index: PendingIndex) -> Callable[[Coarse], int]:
    """``shape_count`` of a kept :class:`PendingIndex`: how many pending workloads have a
    coarse shape (its counts per shape and M, summed over the few Ms of that shape)."""
    counts, ms = index.counts, index.ms

    def count(c: Coarse) -> int:
        return sum(counts[c, m] for m in ms.get(c, ()))

    return count


def want_without_nominees(
    req: Requests, standing: Standing, nominees: Mapping[str, Workload], shape_count: Callable[[Coarse], int]
) -> Want:
    """``req.want`` without the coarse shapes every pending workload of which is an open
    nomination's nominee (each nomination waits or is ready: :func:`nominations_wait` passed, so
    such a workload never preempts). Only the (budget, model) slots of those shapes are read again."""
    per: Counter[Coarse] = Counter(PendingIndex.coarse(nominees[wid]) for wid in standing.noms)
    gone = {c for c, k in per.items() if shape_count(c) <= k}
    if not gone:
        return req.want
    want = dict(req.want)
    for slot in {(c[0], c[1]) for c in gone}:
        if slot not in want:
            continue
        rest = [(k, c) for w, k, c in req.slots[slot] if PendingIndex.coarse(w) not in gone]
        if not rest:
            del want[slot]
            continue
        entry = [NONE, NONE, NONE]
        for k, c in rest:
            fold(entry, k, c)
        want[slot] = entry
    return want


def nominations_wait(
    standing: Standing, nominees: Mapping[str, Workload], tree: BudgetTree, *, ready: bool = False
) -> list[str] | None:
    """The nominees that start on their nominations now (``ready``: GPUs held by nothing, the
    nominee fits there), sorted, when every other open nomination waits (module docstring): the
    pass keeps it and its nominee neither starts on it nor preempts; None otherwise."""
    st = standing.state
    owner, attempts = st.owner, st.attempts
    starting: list[str] = []
    limited: set[str] = set()  # hosts with CPU or memory limits holding a ready nomination
    for wid, gpus in standing.noms.items():
        w = nominees.get(wid)
        if w is None or not w.allocated or w.group is not None or w.waiting or w.hold or len(gpus) != w.gpus:
            return None
        if w.budget not in tree.budgets or tree.held(w.budget):
            return None
        capper = tree.capped_by(w.budget)
        if capper is not None or standing.unschedulable(w.model, w.gpus, w.cpus, w.memory):
            return None
        held = False
        for g in gpus:
            if not st.gpu_usable(g):
                return None
            aid = owner.get(g)
            if aid is not None:
                if not attempts[aid].stopping:
                    return None
                held = True
        if held:
            continue
        if not ready or not st.nomination_fits(w, gpus) or not _apart(st.hosts, gpus, limited):
            return None
        if standing.drains and any(_drain_refuses(standing.drains, w, h, st.now) for h, _ in gpus):
            return None  # a drain scheduled there refuses it now: the pass drops the nomination
        starting.append(wid)
    starting.sort()
    return starting


def _drain_refuses(drains: Mapping[str, int], w: Workload, host: str, now: int) -> bool:
    """The host's scheduled drain refuses the allocated ``w`` now (``PassState.drain_allows``)."""
    at = drains.get(host)
    return at is not None and now + w.min_runtime > at


class KeptWaits:
    """:func:`nominations_wait` (every open nomination waits) kept while nothing is decided
    (est41; ``tail.Tail``'s proofs ask it for every queue): it reads only the open nominations,
    their nominees, the budget tree and the owners, stopping marks and usability of the
    nominated GPUs, none of which a pass changes without deciding something (a start, a stop,
    a nomination or a reservation changes the caller's ``mark``, its counts of decisions); a
    nomination a waiting group member drops leaves fewer to test (so the count of open
    nominations is part of the key). Compared with a fresh test under ``check``."""

    def __init__(self) -> None:
        self.key: tuple[object, int] | None = None
        self.answer = False

    def of(
        self, standing: Standing, nominees: Mapping[str, Workload], tree: BudgetTree, mark: object, check: bool
    ) -> bool | None:
        """True: every open nomination waits; False: one does not; None: none is open."""
        if not standing.noms:
            return None
        key = (mark, len(standing.noms))
        if key != self.key:
            self.key, self.answer = key, nominations_wait(standing, nominees, tree) is not None
        elif check and self.answer != (fresh := nominations_wait(standing, nominees, tree) is not None):
            raise AssertionError(f"the nominations test kept: {self.answer} != {fresh}")
        return self.answer


def _apart(hosts: Mapping[str, HostView], gpus: tuple[GpuRef, ...], limited: set[str]) -> bool:
    """False when a host of ``gpus`` with CPU or memory limits already holds a ready nomination
    (the first start there would count against the second's fit); records those hosts."""
    mine = {h for h, _ in gpus if hosts[h].host.cpus is not None or hosts[h].host.memory is not None}
    if mine & limited:
        return False
    limited |= mine
    return True
