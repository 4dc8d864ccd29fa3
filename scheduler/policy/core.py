"""One scheduling pass (DESIGN.md §3): faults and drains, allocated dispatch with preemption and
reservations, unallocated fill, pending reasons.

This module decides and applies; the parts it composes each own one concern: the order
(dispatch.py), placement on free GPUs (placement.py), the victim search (victims.py, under the
contract of contract.py), reservations (reserve.py) and reasons (reasons.py). Pure and
deterministic: the same :class:`Snapshot` always gives the same :class:`Decisions`. Every
iteration over a collection is in a defined order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import scheduler.policy.placement as placement
import scheduler.policy.reasons as reasons
import scheduler.policy.tail as tail
import scheduler.policy.victims as victims
from scheduler.policy.dependency import dependency_block
from scheduler.policy.dispatch import Dispatcher
from scheduler.policy.queues import BudgetPending, QueueBuilder, Queues, group, submission_sorted
from scheduler.policy.reason_hosts import unallocated_short
from scheduler.policy.reclaim import ReclaimIndex
from scheduler.policy.reserve import reserve
from scheduler.policy.screen import idle
from scheduler.policy.screen_summary import KeptSummary
from scheduler.policy.skips import SkipRuns
from scheduler.policy.standing import Standing
from scheduler.policy.state import AttemptView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import (
    Attempt,
    Decisions,
    GpuHealth,
    GpuRef,
    HostState,
    PendingInfo,
    PendingReason,
    Snapshot,
    Start,
    Stop,
    StopReason,
    Workload,
)
from scheduler.policy.unallocated import Coarse, UnallocatedRest
from scheduler.policy.usage import pass_loads


def schedule(snapshot: Snapshot) -> Decisions:
    """Run one scheduling pass over ``snapshot`` and return the decisions.

    Without reasons (``snapshot.with_reasons`` False: simulations, estimates) a pass that
    :func:`scheduler.policy.screen.idle` proves idle returns empty decisions at once.

    Raises ValueError on an inconsistent snapshot (unknown parent budget, two roots).
    """
    tree = BudgetTree(snapshot.budgets)
    pending = {w.id: w for w in snapshot.pending}
    standing = Standing(snapshot, pending)
    loads = pass_loads(snapshot, tree, standing.noms, pending)
    if not snapshot.with_reasons and idle(standing, pending.values(), tree, lambda: loads[1]):
        return Decisions()
    return Pass(snapshot, tree, standing, pending, loads).run()


class Pass(SkipRuns):
    """One pass: :meth:`run` decides and applies every start, stop, nomination and reservation."""

    def __init__(
        self,
        snap: Snapshot,
        tree: BudgetTree | None = None,
        standing: Standing | None = None,
        pending: dict[str, Workload] | None = None,
        loads: tuple[dict[str, int], dict[str, int]] | None = None,
        grouped: Mapping[str, BudgetPending] | None = None,
    ) -> None:
        super().__init__(snap, tree, standing, pending, loads)
        self.grouped = grouped  # the pending workloads by budget (queues.group, kept with skip indexes), if any
        self.state.listeners.clear()
        self.reclaim = ReclaimIndex(self.state, self.standing.hosts_by_model)
        self.group_started: dict[str, int] = {}  # array group → members started in this pass
        self.hosts_kept: KeptSummary | None = None  # the screen's host summary, where a caller keeps one
        self.coarse: Iterable[Coarse] | None = (
            None  # the pending coarse shapes of ``grouped``, if kept (unallocated.py)
        )

    # ------------------------------------------------------------------ run
    def run(self) -> Decisions:
        """The pass, in the order of docs/policy.md "One pass, in order"."""
        self._faults_and_drains()
        self._check_nominations()
        alloc_q, unalloc_q = self._queues()
        self._dispatch_allocated(alloc_q)
        self._dispatch_unallocated(unalloc_q)
        for hv in self.state.hosts.values() if self.standing.draining else ():
            if hv.host.state == HostState.DRAINING and not hv.attempts:
                self.dec.host_states[hv.name] = HostState.DRAINED
        self.dec.nominations = dict(self.noms)
        self.dec.reservations = {h: wid for h, (wid, _) in sorted(self.reserved.items())}
        return self.dec

    def _queues(self) -> tuple[Queues, Queues]:
        """Pending workloads by budget, allocated and unallocated; the others get their reason."""
        grouped = self.grouped
        if grouped is None:
            grouped = group(submission_sorted(self.pending.values()))
        qb = QueueBuilder(
            self.tree, self.standing.unschedulable, self._reason, self._waits, with_reasons=self.snap.with_reasons
        )
        queues = qb.build(grouped)
        self.unfunded = qb.unfunded
        return queues

    def _waits(self, w: Workload) -> bool:
        """§3.8 ``dependency``: ``w`` waits for its ``after`` list, or its array group runs its
        ``%N`` cap (members holding GPUs plus those started in this pass); else ``held`` when it
        is on a hold of its own (docs/jobs.md "Hold and release"). Records the reason; either
        way it cannot start, so a nomination it holds is dropped."""
        full = dependency_block(self.snap, w, self.group_started)
        if full is None and not w.hold:
            return False
        if w.id in self.noms:
            self._drop_nomination(w.id)
        if full is not None:
            self._reason(w, PendingReason.DEPENDENCY, full)
        else:
            self._reason(w, PendingReason.HELD, {"hold": w.hold})
        return True

    def _reason(self, w: Workload, reason: PendingReason, detail: dict[str, object]) -> None:
        if self.snap.with_reasons:
            self.dec.pending[w.id] = PendingInfo(reason, detail)

    # ------------------------------------------------------- faults, drains
    def _faults_and_drains(self) -> None:
        st = self.state
        # Only attempts touching a host with an unhealthy GPU can be hit (in attempt-id order, as
        # built); the standing keeps those hosts and whether any drains (standing_check compares).
        sick = [st.hosts[name] for name in self.standing.sick]
        for aid in sorted({aid for hv in sick for aid in hv.attempts}):
            av = st.attempts[aid]
            if not av.stopping and any(
                (hv := st.hosts.get(h)) is not None and hv.host.gpu_health.get(i) == GpuHealth.UNHEALTHY
                for h, i in av.attempt.gpus
            ):
                self._stop(av, StopReason.GPU_FAULT)
        if not self.standing.draining:
            return
        for hv in st.hosts.values():
            if hv.host.state != HostState.DRAINING:
                continue
            for aid in sorted(hv.attempts):
                av = st.attempts[aid]
                if not av.stopping and (hv.host.drain_now or not av.attempt.protected_at(self.now)):
                    self._stop(av, StopReason.DRAINED)

    def _check_nominations(self) -> None:
        st = self.state
        for wid in sorted(self.noms):
            for g in self.noms[wid]:
                owner = st.owner.get(g)
                if not st.gpu_usable(g) or (owner is not None and not st.attempts[owner].stopping):
                    self._drop_nomination(wid)
                    break

    # ------------------------------------------------------------ decisions
    def _stop(self, av: AttemptView, reason: StopReason, for_workload: str | None = None) -> None:
        a = av.attempt
        if a.allocated and not av.stopping:
            remaining = self._commitment(a)
            if remaining:
                self.add_load(a.budget, -remaining)
        self.standing.track(av, -1)
        self.state.mark_stopping(av)
        # A stop can make room elsewhere: a victim's GPUs on hosts not nominated for the preemptor,
        # and a fault's or drain's GPUs once released.
        self.changed(room=True)
        self.dec.stops.append(Stop(a.id, reason, for_workload))

    def _commitment(self, a: Attempt) -> int:
        if a.started_at is None:
            return a.gpu_count * a.min_runtime
        return a.gpu_count * max(0, a.started_at + a.min_runtime - self.now)

    def _drop_nomination(self, wid: str) -> None:
        gpus = self.noms.pop(wid)
        self.state.release_nomination(wid, gpus)
        self.changed(room=True)
        w = self.pending[wid]
        if w.allocated:
            self.add_load(w.budget, -w.gpus * w.min_runtime)

    def _start(self, w: Workload, gpus: tuple[GpuRef, ...], *, allocated: bool, unfunded: bool = False) -> None:
        st = self.state
        by_host: dict[str, list[int]] = {}
        for h, i in gpus:
            by_host.setdefault(h, []).append(i)
        for h, idx in by_host.items():
            free_here = [i for i in idx if i in st.hosts[h].free]
            if free_here:
                st.take(h, free_here)
        if w.id in self.noms:
            self.changed(room=True)  # nominated GPUs become an attempt (room later), leftovers free now
            nom = self.noms.pop(w.id)
            mine = set(gpus)
            for g in nom:
                if g in mine:
                    st.unnominate(g)
            leftover = tuple(g for g in nom if g not in mine)
            if leftover:
                st.release_nomination(w.id, leftover)
            if w.allocated and not allocated:
                self.add_load(w.budget, -w.gpus * w.min_runtime)
        elif allocated:
            self.add_load(w.budget, w.gpus * w.min_runtime)
        new = Attempt(
            f"new:{w.id}",
            w.id,
            w.budget,
            tuple(sorted(gpus)),
            allocated,
            w.min_runtime,
            started_at=None,
            cpus=w.cpus,
            memory=w.memory,
        )
        st.assign(new)
        self.standing.track(st.attempts[new.id], 1)
        self.dec.starts.append(Start(w.id, tuple(sorted(gpus)), allocated=allocated, unfunded=unfunded))
        if w.group is not None:
            self.group_started[w.group] = self.group_started.get(w.group, 0) + 1
        self.changed()

    def _nominate(self, w: Workload, found: victims.Found) -> None:
        stopped, gpus = found
        for av in stopped:
            self._stop(av, StopReason.PREEMPTED, for_workload=w.id)
        self.noms[w.id] = gpus
        self.state.nominate(w.id, gpus)
        self.add_load(w.budget, w.gpus * w.min_runtime)
        self._reason(
            w, PendingReason.AWAITING_PREEMPTION, {"victims": [v.attempt.workload for v in stopped], "host": gpus[0][0]}
        )

    # ------------------------------------------------------ allocated pass
    def _dispatch_allocated(self, queues: Queues) -> None:
        disp = self.disp = Dispatcher(self.tree, self.load, queues, in_order=True)
        # A workload of the same budget, model and shape (gang or not) as one that failed
        # outright (no start, preemption, nomination or reservation), with no fewer GPUs and no
        # shorter M, fails the same way until room can grow or a load changes: free placement,
        # the victim search and the reservation search would each fail (room only shrank,
        # reservations only grew, and a larger commitment gives rule 2 no more budgets:
        # memo.outright, memo.py). They are skipped (a run of them at once: a skip changes
        # nothing, Dispatcher.skip_run); its reason is explained as on the full path.
        skipped = self._skipped
        outright = self.memo.outright
        # Without reasons, the rest of the dispatch may be proved idle (tail.py) and not run.
        rest = (
            None if self.snap.with_reasons else tail.Tail(self, disp, self._progress(), self.hosts_kept, self._decided)
        )
        while (w := disp.next()) is not None:
            if rest is not None and rest.passes(w.budget):
                disp.skip_run_to(w, _to_end)  # its queue's rest was proved idle
                continue
            if w.group is not None and self._waits(w):
                disp.done(w, False)
                continue
            if skipped(w):
                if self.snap.with_reasons:
                    disp.skip_run(w, self._skipped_like(w))
                else:
                    disp.skip_run_to(w, self._run_end_bare(w))
                continue
            nominated = w.id in self.noms
            admitted = self._handle_allocated(w)
            if not (admitted or nominated or w.id in self.reserving or w.id in self.noms):
                n, m = w.gpus, self._outright_floor(w)
                if self.check:
                    self._verify_floor(w, m, self.reclaim)
                fails = outright.setdefault(self._outright_key(w), [])
                fails[:] = [f for f in fails if not (n <= f[0] and m <= f[1])]
                fails.append((n, m))
                self.memo.failed_outright(w.budget)
            disp.done(w, admitted)
            if rest is not None and rest.step(self._progress(), w.budget):
                break
        if rest is not None:
            rest.verify()
        self.disp = None

    def _progress(self) -> tuple[int, int, int, int]:
        """Counts of the decisions so far: a step that decided something changes one of them."""
        return (len(self.dec.starts), len(self.dec.stops), len(self.noms), len(self.reserved))

    def _decided(self) -> tuple[object, ...]:
        """The decisions so far, in full (the check of a proof that the rest is idle)."""
        noms = tuple(sorted(self.noms.items()))
        return (tuple(self.dec.starts), tuple(self.dec.stops), noms, tuple(sorted(self.reserved.items())))

    def _handle_allocated(self, w: Workload) -> bool:
        nom = self.noms.get(w.id)
        if nom is not None and len(nom) != w.gpus:
            self._drop_nomination(w.id)  # a nomination of the wrong size is never started (defence in depth)
            nom = None
        if nom is not None and all(g not in self.state.owner for g in nom) and self._nomination_fits(w, nom):
            if not self.drains or all(self.drain_allows(w, h, self.now) for h, _ in nom):
                self._start(w, nom, allocated=True)
                return True
            # its victims have left, but a host of it now drains before its protection would end:
            # it starts there no more (docs/deploy.md "Scheduled drains"), so it is placed afresh
            self._drop_nomination(w.id)
            nom = None
        # §3.4: a nominated workload is first placed by the ordinary rules; if it starts elsewhere,
        # its nomination is dropped (_start releases it).
        gpus = placement.free_placement(self, w)
        if gpus is not None:
            self._start(w, gpus, allocated=True)
            return True
        if nom is not None:
            owners = sorted({self.state.owner[g] for g in nom if g in self.state.owner})
            detail: dict[str, object] = {
                "victims": [self.state.attempts[v].attempt.workload for v in owners],
                "host": nom[0][0],
            }
            self._reason(w, PendingReason.AWAITING_PREEMPTION, detail)
            return False
        if self._try_preempt(w):
            return True
        if w.id not in self.reserving and len(self.reserving) < self.snap.max_reservations:
            reserve(self, w)
        if self.snap.with_reasons:
            reasons.explain(self, w)
        return False

    def _nomination_fits(self, w: Workload, nom: tuple[GpuRef, ...]) -> bool:
        """CPUs and memory on every host of the nomination suffice for ``w`` now (§3.3)."""
        return self.state.nomination_fits(w, nom)

    def _try_preempt(self, w: Workload) -> bool:
        # A failure stands for every workload with no more room until room can grow (failed_before).
        kind = "pg" if self.is_gang(w) else "p"
        memo = w.id not in self.reserving
        if memo and self.failed_before(kind, w):
            return False
        found = victims.search(self, self.reclaim, w)
        if found is None:
            if memo:
                self.remember_failure(kind, w, w.min_runtime)
            return False
        self._nominate(w, found)
        return True

    # ---------------------------------------------------- unallocated pass
    def _dispatch_unallocated(self, queues: Queues) -> None:
        if not self.snap.with_reasons and not placement.any_fits_free(self.state, _each(queues)):
            return  # nothing can start, and no reasons are wanted
        disp = Dispatcher(self.tree, self.load, queues, in_order=True)
        smallest_failed: dict[tuple[str, int | None, int | None], int] = {}  # by (model, requests)
        rest = None
        if not self.snap.with_reasons:
            rest = UnallocatedRest(queues, self.noms, self.grouped, self.coarse, self.pending, check=self.check)
        while (w := disp.next()) is not None:
            if w.group is not None and self._waits(w):
                disp.done(w, False)
                continue
            placed = False
            shape = (w.model, w.cpus, w.memory)
            if w.gpus < smallest_failed.get(shape, 1 << 30):
                gpus = placement.free_placement(self, w, honour_reservations=False)
                if gpus is not None:
                    self._start(w, gpus, allocated=False, unfunded=w.id in self.unfunded)
                    placed = True
                else:
                    smallest_failed[shape] = w.gpus
                    if rest is not None and rest.failed(shape, w.gpus, len(self.dec.starts)) and not self.check:
                        break
            if not placed:
                if w.id in self.unfunded:
                    capper = self.tree.capped_by(w.budget)
                    name = self.tree.path_name(capper.key) if capper else ""
                    self._reason(w, PendingReason.BUDGET_CAPPED, {"budget": name, "unfunded": True})
                elif self.snap.with_reasons and (short := unallocated_short(self, w)):
                    self._reason(w, PendingReason.INSUFFICIENT_GPUS, {"resources": short})
                else:
                    self._reason(w, PendingReason.INSUFFICIENT_GPUS, {})
            disp.done(w, placed)
        if rest is not None:
            rest.verify(len(self.dec.starts), self.now)


def _to_end(q: list[Workload], i: int) -> int:
    """``Dispatcher.skip_run_to``'s end for a queue passed to its end."""
    return len(q)


def _each(queues: Queues) -> Iterator[Workload]:
    """The queues' workloads, read only as far as the reader goes."""
    for q in queues.values():
        yield from q
