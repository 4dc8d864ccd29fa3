"""Skipped runs of the allocated dispatch (DESIGN.md §3.4, docs/policy.md "How it stays fast").

A workload of the same budget, model and shape (gang or not) as one that failed outright in the
pass (no start, preemption, nomination or reservation), with no fewer GPUs and no shorter M,
fails the same way until room can grow or a load changes (``memo.outright``, memo.py): it is
skipped, and so is a run of such workloads at once (``Dispatcher.skip_run``), with the reason of
the full path when reasons are wanted. :class:`SkipRuns` is the part of a pass that says which.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import replace

import scheduler.policy.placement as placement
import scheduler.policy.reasons as reasons
import scheduler.policy.reserve as reserve
import scheduler.policy.victims as victims
from scheduler.policy.pass_state import PassState
from scheduler.policy.queues import BudgetPending, submission_order
from scheduler.policy.reclaim import ReclaimIndex
from scheduler.policy.skip_index import Shape, shape_of
from scheduler.policy.types import PendingInfo, Workload

NEVER = 1 << 62
"""The threshold of a shape no failure covers: every M is below it."""


class Thresholds(dict[Shape, int]):
    """:meth:`SkipRuns._threshold`, each shape's computed when first read (for one run: the
    failures do not change during it)."""

    def __init__(
        self,
        budget: str,
        outright: dict[tuple[str, str, bool, int | None, int | None], list[tuple[int, int]]],
        largest: dict[str, int],
    ) -> None:
        super().__init__()
        self.budget, self.outright, self.largest = budget, outright, largest

    def __missing__(self, s: Shape) -> int:
        model, n, cpus, memory = s
        fails = self.outright.get((self.budget, model, n > self.largest.get(model, 0), cpus, memory), ())
        t = self[s] = min((f_m for f_n, f_m in fails if f_n <= n), default=NEVER)
        return t


class SkipRuns(PassState):
    """What a pass skips in its allocated dispatch (module docstring)."""

    grouped: Mapping[str, BudgetPending] | None = None
    """The pending workloads by budget, where the caller keeps them (the pass sets it)."""
    _drains_last: dict[str, int] | None = None
    """Model → its hosts' latest scheduled drain (:meth:`_drain_floor`; built when first read: the
    drains do not change during a pass)."""

    def _outright_key(self, w: Workload) -> tuple[str, str, bool, int | None, int | None]:
        """What a failure outright depends on besides (GPUs, M) (memo.outright): a workload of
        this key with no fewer GPUs and no shorter M fails the same way."""
        return (w.budget, w.model, self.is_gang(w), w.cpus, w.memory)

    def _outright_floor(self, w: Workload) -> int:
        """The least M a failure outright of ``w`` (no reservation, no nomination) stands for at
        its GPUs: ``w``'s M reads the rules only through rule 2 at its commitment and the
        reservations and scheduled drains refusing it (:meth:`PassState.host_allowed`: ``now + M``
        past their start).
        A workload of the same key with no fewer GPUs and an M from the floor on has a commitment
        allowed no more budgets (:meth:`PassState.allowed_floor`, rule 2 monotone) and is refused
        by every host refusing ``w`` (and by more reserved later): it fails the same way.
        Under ``check`` a workload like ``w`` at the floor is searched for (:meth:`_verify_floor`).
        The reservations are read once each (``Decisions.reserved_start``: a gang's is on several
        hosts), not per reserved host as :meth:`_outright_floor_walk`, its oracle under ``check``."""
        n, m, now = w.gpus, w.min_runtime, self.now
        floor = -(-self.allowed_floor(w.budget, n * m) // n)
        for wid, start in self.dec.reserved_start.items():
            if wid != w.id and now + m > start:
                floor = max(floor, start - now + 1)
        floor = max(floor, self._drain_floor(w))
        floor = min(floor, m)
        if self.check and floor != (walked := self._outright_floor_walk(w)):
            raise AssertionError(f"floor of {w.id} at {now}: {floor} != {walked}")
        return floor

    def _outright_floor_walk(self, w: Workload) -> int:
        """:meth:`_outright_floor` reading every reserved host's reservation (its oracle)."""
        n, m, now = w.gpus, w.min_runtime, self.now
        floor = -(-self.allowed_floor(w.budget, n * m) // n)
        for wid, start in self.reserved.values():
            if wid != w.id and now + m > start:
                floor = max(floor, start - now + 1)
        return min(max(floor, self._drain_floor_walk(w)), m)

    def _drain_floor(self, w: Workload) -> int:
        """The least M a failure of ``w`` stands for by the drains scheduled on hosts of its model
        (:meth:`PassState.drain_allows`): a drain at ``T`` refuses a start at ``t`` when
        ``t + M > T``, at any ``t`` from now (a reservation's too), so only an M above ``T − now``
        is refused wherever ``w``'s is; else ``w``'s M itself. 0 without a drain.
        ``min(M, T − now + 1)`` grows with ``T``: the latest drain of the model decides
        (:attr:`_drains_last`, read once a pass; :meth:`_drain_floor_walk`, its oracle under
        ``check``, reads every drain: perf59, 50 % of 1,250 hosts draining cost a tick ≈ 8 %)."""
        if not self.drains:
            return 0
        last = self._drains_last
        if last is None:
            last = self._drains_last = {}
            hosts = self.state.hosts
            for h, at in self.drains.items():
                model = hosts[h].model
                last[model] = max(at, last.get(model, at))
        latest = last.get(w.model)
        floor = 0 if latest is None else min(w.min_runtime, latest - self.now + 1)
        if self.check and floor != (walked := self._drain_floor_walk(w)):
            raise AssertionError(f"drain floor of {w.id} at {self.now}: {floor} != {walked}")
        return floor

    def _drain_floor_walk(self, w: Workload) -> int:
        """:meth:`_drain_floor` reading every scheduled drain (its oracle)."""
        m, now, hosts = w.min_runtime, self.now, self.state.hosts
        return max((min(m, at - now + 1) for h, at in self.drains.items() if hosts[h].model == w.model), default=0)

    def _verify_floor(self, w: Workload, floor: int, reclaim: ReclaimIndex) -> None:
        """``check``: a workload like ``w`` (another id) with M ``floor`` fails as ``w`` did: no
        free placement, no victims and, while reservations are open, no reservation (a found one
        is made, and the check fails). From the floor up to ``w``'s M the rules read the same.
        A floor of 0 is searched at M 1, the least M of allocated work: M 0 is unallocated work,
        which other rules answer and whose answers a memo keeps under keys shared with allocated
        work (chk49: its gang options, kept, denied the next allocated gang its victims)."""
        floor = max(floor, 1)
        if floor >= w.min_runtime:
            return
        low = replace(w, id=f"{w.id}~floor", min_runtime=floor)
        found = (
            placement.free_placement(self, low) is not None
            or victims.search(self, reclaim, low) is not None
            or (len(self.reserving) < self.snap.max_reservations and reserve.reserve(self, low))
        )
        if found:
            raise AssertionError(f"{w.id} at {self.now}: a failure outright stands down to M {floor}, not so")

    def _skipped(self, w: Workload) -> bool:
        """True when ``w`` fails outright as an earlier workload did (memo.outright): its reason,
        if wanted, is recorded and nothing else changes."""
        if w.id in self.noms or w.group is not None:  # a group member may wait on its cap (§3.8 order)
            return False
        fails = self.memo.outright.get(self._outright_key(w))
        if not fails:
            return False
        n, m = w.gpus, w.min_runtime
        for f_n, f_m in fails:
            if n >= f_n and m >= f_m:
                if self.snap.with_reasons:
                    reasons.explain(self, w)
                return True
        return False

    def _skipped_like(self, first: Workload) -> Callable[[Workload], bool]:
        """:meth:`_skipped` for the run after ``first`` (just skipped) in its budget's queue,
        remembering each shape (model, GPUs, M, CPUs, memory) skipped in the run with its
        reason: a later workload of a remembered shape (no group, no nomination) is skipped with
        that reason at once. The same answers: nothing changes during a run, the reason is the
        shape-wide one (a skipped workload holds no reservation), and what :meth:`_skipped` reads
        of a workload is its shape, group and nomination (tests/policy/test_queues_kept.py)."""
        pending, noms, skipped, reserved = self.dec.pending, self.noms, self._skipped, self.dec.reserved_start
        known: dict[tuple[str, int, int, int | None, int | None], PendingInfo | None] = {}

        def remember(w: Workload, shape: tuple[str, int, int, int | None, int | None]) -> None:
            info = pending.get(w.id)
            if w.id not in reserved and info is not None:
                known[shape] = info

        def like(w: Workload) -> bool:
            if w.group is not None or w.id in noms:
                return skipped(w)
            shape = (w.model, w.gpus, w.min_runtime, w.cpus, w.memory)
            if shape in known:
                info = known[shape]
                if info is not None:
                    pending[w.id] = info
                return True
            if skipped(w):
                remember(w, shape)
                return True
            return False

        remember(first, (first.model, first.gpus, first.min_runtime, first.cpus, first.memory))
        return like

    def _run_end_bare(self, first: Workload) -> Callable[[list[Workload], int], int]:
        """:meth:`_skipped_like` without reasons, over a whole run at once
        (``Dispatcher.skip_run_to``): the index of the first workload from ``i`` on that is not
        skipped. Read from the budget's :class:`~scheduler.policy.skip_index.SkipIndex` where the
        queue is the kept allocated list (:meth:`_run_end_indexed`), else :meth:`_run_end_walk`."""
        bp = self.grouped.get(first.budget) if self.grouped is not None else None
        disp = self.disp
        if bp is None or bp.runs is None or disp is None or disp.queues.get(first.budget) is not bp.allocated:
            return self._run_end_walk(first)  # no index, or a list of the pass's own (classified one by one)
        return self._run_end_indexed(bp)

    def _run_end_indexed(self, bp: BudgetPending) -> Callable[[list[Workload], int], int]:
        """The run's end from the index: the first workload from ``i`` on in a group or below its
        shape's threshold (:meth:`_threshold`), or nominated (looked up by position: nominations
        are few), whichever comes first. The same answer as :meth:`_run_end_walk`: a workload
        without group or nomination is skipped exactly when its M reaches its threshold."""
        runs = bp.runs
        assert runs is not None  # noqa: S101 (the caller's test)

        def end(q: list[Workload], i: int) -> int:
            if i >= len(q):
                return i
            budget = q[i].budget
            thresholds = self._threshold(budget)
            stop = runs.first_stop(q[i], thresholds)
            if self.check and stop is not (fresh := runs.first_stop_walk(q[i], thresholds)):
                raise AssertionError(f"run end of {budget} from {q[i].id} at {self.now} by spans: {stop} != {fresh}")
            j = len(q) if stop is None else bisect_left(q, submission_order(stop), i, key=submission_order)
            for w in self._nominated_of(budget):
                p = bisect_left(q, submission_order(w), i, j, key=submission_order)
                if p < j and q[p] is w:
                    j = p
            return j

        return end

    _noms_seen: tuple[tuple[str, ...], dict[str, list[Workload]]] | None = None

    def _nominated_of(self, budget: str) -> list[Workload]:
        """The pending allocated workloads of ``budget`` holding a nomination, kept while the
        nominated ids are the same (a pass with many nominations open asks this for every skipped
        run: the forward simulation of estimates, a preemption's nomination open for a grace)."""
        keys = tuple(self.noms)
        seen = self._noms_seen
        if seen is None or seen[0] != keys:
            by: dict[str, list[Workload]] = {}
            for wid in keys:
                w = self.pending.get(wid)
                if w is not None and w.min_runtime > 0:
                    by.setdefault(w.budget, []).append(w)
            seen = self._noms_seen = (keys, by)
        return seen[1].get(budget, [])

    def _threshold(self, budget: str) -> Thresholds:
        """Per shape (model, GPUs, CPUs, memory) of ``budget``'s workloads, the least M of the
        failures outright covering its GPUs (:meth:`_skipped`), NEVER when none: a workload of the
        shape with no group and no nomination is skipped exactly when its M reaches it. Kept
        for the budget's next runs while its failures stand (``Memo.outright_of``)."""
        kept = self.memo.outright_of
        got = kept.get(("thresholds", budget))
        if got is None:
            got = kept[("thresholds", budget)] = Thresholds(budget, self.memo.outright, self.state.largest)
        elif self.check:
            fresh = Thresholds(budget, self.memo.outright, self.state.largest)
            if any(fresh[s] != t for s, t in list(got.items())):
                raise AssertionError(f"kept skip thresholds of {budget} at {self.now} differ from fresh ones")
        return got

    def _run_end_walk(self, first: Workload) -> Callable[[list[Workload], int], int]:
        """The run's end found by walking it. Per (model, GPUs, CPUs, memory) the least M skipped
        in the run; a later workload of that shape with no shorter M (no group, no nomination) is
        skipped at once, others are asked of :meth:`_skipped`. The same answers: during a run the
        failures (memo.outright) do not change, and a failure with (n, m) covers every longer M."""
        noms, skipped, reserved = self.noms, self._skipped, self.dec.reserved_start
        least: dict[tuple[str, int, int | None, int | None], int] = {}
        if first.id not in reserved:
            least[shape_of(first)] = first.min_runtime

        def end(q: list[Workload], i: int) -> int:
            for j in range(i, len(q)):
                w = q[j]
                if w.group is not None or (noms and w.id in noms):
                    if not skipped(w):
                        return j
                    continue
                shape = shape_of(w)
                m = least.get(shape)
                if m is None or w.min_runtime < m:
                    if not skipped(w):
                        return j
                    if w.id not in reserved:
                        least[shape] = w.min_runtime if m is None else min(m, w.min_runtime)
            return len(q)

        return end
