"""One scheduling pass (DESIGN.md §3): faults and drains, allocated dispatch with
preemption and reservations, unallocated fill, pending reasons.

Pure and deterministic: the same :class:`Snapshot` always gives the same
:class:`Decisions`. Every iteration over a collection is in a defined order.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations
from math import comb
from operator import attrgetter

from scheduler.policy.dispatch import Dispatcher
from scheduler.policy.reclaim import ReclaimIndex
from scheduler.policy.screen import idle
from scheduler.policy.standing import Standing
from scheduler.policy.state import AttemptView, HostView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import (
    Attempt,
    Decisions,
    GpuHealth,
    GpuRef,
    HostState,
    OnCap,
    PendingInfo,
    PendingReason,
    Snapshot,
    Start,
    Stop,
    StopReason,
    Workload,
)
from scheduler.policy.usage import LoadBook, committed_usage, own_load, windowed_usage

# Victim classes of an open attempt, seen from one pending workload P.
NOW = 0  # rule 1 and 2 allow it now (unallocated, or unprotected and rule 2 holds)
LATER = 1  # rule 2 allows it, but it is still protected
FORBIDDEN = 2  # rule 2 forbids it (another budget, less served side)
NEVER = 3  # never room for P: its own budget's allocated work, or already leaving

_submission_order = attrgetter("submitted_at", "seq", "id")

MAX_EXACT_GANG_SETS = 2000
"""Above this many host combinations the gang victim choice is greedy (docs/policy.md)."""


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
    return _Pass(snapshot, tree, standing, pending, loads).run()


def pass_loads(
    snap: Snapshot,
    tree: BudgetTree,
    noms: dict[str, tuple[GpuRef, ...]],
    pending: dict[str, Workload],
    book: LoadBook | None = None,
) -> tuple[dict[str, int], dict[str, int]]:
    """Windowed usage ``U`` and load ``U + C`` per budget, rolled up the tree (GPU-seconds, §3.1–3.2).

    ``noms`` are the nominations the pass honours (their workloads commit ``gpus × M``).
    ``book``, when given, holds the open attempts' part, synced to ``snap`` (the same sums).
    """
    if book is None:
        own_u = windowed_usage(snap.usage, snap.attempts, snap.now, snap.window)
        own_c = committed_usage(snap.attempts, snap.now, noms, pending)
    else:
        own_u = book.usage()
        for b, v in windowed_usage(snap.usage, (), snap.now, snap.window).items():
            own_u[b] = own_u.get(b, 0) + v
        own_c = book.committed()
        for b, v in committed_usage((), snap.now, noms, pending).items():
            own_c[b] = own_c.get(b, 0) + v
    return tree.roll_up(own_u), tree.roll_up(own_load(own_u, own_c))


class _Pass:
    def __init__(
        self,
        snap: Snapshot,
        tree: BudgetTree | None = None,
        standing: Standing | None = None,
        pending: dict[str, Workload] | None = None,
        loads: tuple[dict[str, int], dict[str, int]] | None = None,
        ordered: list[Workload] | None = None,
    ) -> None:
        self.snap = snap
        self._ordered = ordered  # the pending workloads in submission order, if the caller has them
        self.now = snap.now
        self.tree = tree if tree is not None else BudgetTree(snap.budgets)
        self.pending: dict[str, Workload] = pending if pending is not None else {w.id: w for w in snap.pending}
        if standing is None:
            standing = Standing(snap, self.pending)
        # The standing (cluster state and aggregates) is this pass's to change: its end state is
        # what the next snapshot is synced from (scheduler.policy.standing).
        self.standing = standing
        self.state = standing.state
        self.state.listeners.clear()
        self.noms: dict[str, tuple[GpuRef, ...]] = standing.noms
        if loads is None:
            loads = pass_loads(snap, self.tree, self.noms, self.pending)
        self.usage = loads[0]
        self.load: dict[str, int] = dict(loads[1])  # changed by the pass's own starts and stops
        self.total_gpus = sum(h.size for h in snap.hosts)
        self.dec = Decisions()
        self.gen = 0
        # Bumped only when room for pending work can grow (a stop, a nomination released or turned into
        # an attempt): within a pass, starts and reservations only shrink or delay room, so a failed
        # victim or reservation search stays failed until then.
        self.room_gen = 0
        self.load_gen = 0  # bumped by every change of a budget's load (ratios, hence rule 2)
        self._memo_classes: dict[tuple[object, ...], dict[str, int]] = {}
        self.reserved: dict[str, tuple[str, int]] = {}  # host -> (workload, reserved start)
        self.reserving: set[str] = set()
        # (search kind, model, room_gen) -> failed searches as (allowed victim budgets, GPUs, M)
        self._fails: dict[tuple[str, str, int], list[tuple[frozenset[str], int, int]]] = {}
        self._memo_allowed: dict[tuple[object, ...], frozenset[str]] = {}
        self._vacated_at: dict[tuple[str, int, frozenset[str]], int | None] = {}
        self._room_over_time: dict[tuple[str, int, frozenset[str]], tuple[int, list[tuple[int, int]], int]] = {}
        self._memo_reason: dict[tuple[object, ...], PendingInfo] = {}
        self._memo_levels: dict[tuple[object, ...], tuple[int, dict[str, object]]] = {}
        self._size_count = standing.size_count
        self._tables: dict[tuple[object, ...], list[dict[int, tuple[str, str | None]]]] = {}
        self._gang_tables: dict[tuple[object, ...], list[tuple[int, str, str | None]]] = {}
        self._gang_opts: dict[tuple[str, int, frozenset[str], int], list[str]] = {}
        self._new_attempts = 0
        self._hosts_by_model = standing.hosts_by_model
        self._shares: dict[str, Fraction] | None = None
        self._disp: Dispatcher | None = None  # the allocated pass's dispatcher while it runs
        self.unfunded: set[str] = set()
        self.reclaim = ReclaimIndex(self.state, self._hosts_by_model)
        # host → budget → [unprotected, protected] healthy GPUs of its allocated, non-stopping attempts
        self._agg = standing.agg
        self._agg_budgets = standing.agg_budgets
        # budget → hosts holding its unprotected allocated attempts (the only allocated victims there can be)
        self._victim_hosts = standing.victim_hosts

    # ------------------------------------------------------------------ run
    def run(self) -> Decisions:
        self._faults_and_drains()
        self._check_nominations()
        alloc_q: dict[str, list[Workload]] = {}
        unalloc_q: dict[str, list[Workload]] = {}
        self.unfunded.clear()
        tree = self.tree
        unschedulable: dict[tuple[str, int], bool] = {}  # by (model, GPUs): all it depends on
        ordered = self._ordered
        if ordered is None:
            ordered = sorted(self.pending.values(), key=_submission_order)
        for w in ordered:
            budget = w.budget
            if budget not in tree.budgets:
                continue
            shape = (w.model, w.gpus)
            bad = unschedulable.get(shape)
            if bad is None:
                bad = unschedulable[shape] = self._unschedulable(w)
            if bad:
                self._reason(w, PendingReason.UNSCHEDULABLE, {"model": w.model, "gpus": w.gpus})
                continue
            if tree.held(budget):
                self._reason(w, PendingReason.HELD, {})
                continue
            allocated = w.min_runtime > 0
            capper = tree.capped_by(budget) if allocated else None
            if capper is not None and capper.on_cap == OnCap.HOLD:
                self._reason(w, PendingReason.BUDGET_CAPPED, {"budget": tree.path_name(capper.key)})
                continue
            if allocated and capper is None:
                q = alloc_q.get(budget)
                if q is None:
                    q = alloc_q[budget] = []
                q.append(w)
            else:
                if allocated:
                    self.unfunded.add(w.id)
                unalloc_q.setdefault(budget, []).append(w)
        self._dispatch_allocated(alloc_q)
        self._dispatch_unallocated(unalloc_q)
        self._finish_hosts()
        self.dec.nominations = dict(self.noms)
        self.dec.reservations = {h: wid for h, (wid, _) in sorted(self.reserved.items())}
        return self.dec

    # ------------------------------------------------------- faults, drains
    def _stop(self, av: AttemptView, reason: StopReason, for_workload: str | None = None) -> None:
        a = av.attempt
        if a.allocated and not av.stopping:
            remaining = self._commitment(a)
            if remaining:
                self._add_load(a.budget, -remaining)
        self.standing.track(av, -1)
        self.state.mark_stopping(av)
        self.gen += 1
        # A stop can make room elsewhere: a victim's GPUs on hosts not nominated for the preemptor,
        # and a fault's or drain's GPUs once released.
        self.room_gen += 1
        self.dec.stops.append(Stop(a.id, reason, for_workload))

    def _commitment(self, a: Attempt) -> int:
        if a.started_at is None:
            return a.gpu_count * a.min_runtime
        return a.gpu_count * max(0, a.started_at + a.min_runtime - self.now)

    def _faults_and_drains(self) -> None:
        st = self.state
        # Only attempts touching a host with an unhealthy GPU can be hit (in attempt-id order, as built).
        sick = [hv for hv in st.hosts.values() if len(hv.healthy) < len(hv.host.gpu_health)]
        touched = sorted({aid for hv in sick for aid in hv.attempts})
        for aid in touched:
            av = st.attempts[aid]
            if av.stopping:
                continue
            for h, i in av.attempt.gpus:
                hv = st.hosts.get(h)
                if hv is not None and hv.host.gpu_health.get(i) == GpuHealth.UNHEALTHY:
                    self._stop(av, StopReason.GPU_FAULT)
                    break
        for hv in st.hosts.values():
            if hv.host.state != HostState.DRAINING:
                continue
            for aid in sorted(hv.attempts):
                av = st.attempts[aid]
                if av.stopping:
                    continue
                if hv.host.drain_now or not av.attempt.protected_at(self.now):
                    self._stop(av, StopReason.DRAINED)

    def _finish_hosts(self) -> None:
        for hv in self.state.hosts.values():
            if hv.host.state == HostState.DRAINING and not hv.attempts:
                self.dec.host_states[hv.name] = HostState.DRAINED

    def _check_nominations(self) -> None:
        for wid in sorted(self.noms):
            gpus = self.noms[wid]
            bad = False
            for g in gpus:
                if not self.state.gpu_usable(g):
                    bad = True
                    break
                owner = self.state.owner.get(g)
                if owner is not None and not self.state.attempts[owner].stopping:
                    bad = True
                    break
            if bad:
                self._drop_nomination(wid)

    def _drop_nomination(self, wid: str) -> None:
        gpus = self.noms.pop(wid)
        self.state.release_nomination(wid, gpus)
        self.room_gen += 1
        self.gen += 1
        w = self.pending[wid]
        if w.allocated:
            self._add_load(w.budget, -w.gpus * w.min_runtime)

    # ---------------------------------------------------------------- loads
    def _add_load(self, budget: str, amount: int) -> None:
        for node in self.tree.chain[budget]:
            self.load[node] += amount
        self.gen += 1
        self.load_gen += 1
        disp = self._disp
        if disp is not None:
            disp.loads_changed(budget)

    def shares(self) -> dict[str, Fraction]:
        """Normalized shares; archived budgets without work drop out (§3.7)."""
        if self._shares is None:
            busy = {a.budget for a in self.snap.attempts} | {w.budget for w in self.snap.pending}
            busy_tree: set[str] = set()
            for b in busy:
                if b in self.tree.chain:
                    busy_tree.update(self.tree.chain[b])
            live = {k for k, b in self.tree.budgets.items() if not b.archived or k in busy_tree}
            self._shares = self.tree.normalized_shares(live)
        return self._shares

    def ratio(self, budget: str, extra: int = 0) -> Fraction:
        """Exact ``(U + C + extra) / s(b)``; divide by GPUs × W for the displayed ratio."""
        s = self.shares().get(budget, Fraction(0))
        load = self.load[budget] + extra
        if s == 0:
            return Fraction(10**18) if load else Fraction(0)
        return Fraction(load) / s

    def display_ratio(self, budget: str, extra: int = 0) -> float:
        """``r(b) = (U + C) / E`` with ``E = s(b) × GPUs × W`` (DESIGN.md §1), as a float."""
        denom = self.total_gpus * self.snap.window
        if not denom:
            return 0.0
        return float(self.ratio(budget, extra) / denom)

    def rule2(self, w: Workload, victim_budget: str) -> bool:
        """§3.4 rule 2 for ``w`` and a victim of ``victim_budget`` (:meth:`BudgetTree.rule2`)."""
        return self.tree.rule2(self.load, w.budget, w.gpus * w.min_runtime, victim_budget)

    def victim_class(self, w: Workload, av: AttemptView) -> int:
        """How the attempt counts as room for ``w`` (NOW, LATER, FORBIDDEN, NEVER)."""
        if av.stopping:
            return NEVER
        a = av.attempt
        if not a.allocated:
            return NOW if w.allocated else NEVER
        if not w.allocated or a.budget == w.budget or a.budget not in self.tree.budgets:
            return NEVER
        if not self.rule2(w, a.budget):
            return FORBIDDEN
        return LATER if a.protected_at(self.now) else NOW

    # ------------------------------------------------------------ placement
    def _unschedulable(self, w: Workload) -> bool:
        largest = self.state.largest.get(w.model, 0)
        if largest == 0 or w.gpus < 1:
            return True
        if w.gpus <= largest:
            return False
        if w.gpus % largest:
            return True
        k = w.gpus // largest
        key = (w.model, largest)
        count = self._size_count.get(key)
        if count is None:
            count = self._size_count[key] = sum(1 for hv in self._hosts_by_model[w.model] if hv.size == largest)
        return count < k

    def _fits_free(self, w: Workload) -> bool:
        """True when free GPUs (reservations ignored) could hold ``w`` now: one host, or whole hosts."""
        buckets = self.state.buckets.get(w.model)
        if not buckets:
            return False
        if not self._is_gang(w):
            return any(count >= w.gpus and hosts for count, hosts in buckets.items())
        size = self.state.largest[w.model]
        return len(buckets.get(size, ())) >= w.gpus // size

    def _any_fits_free(self, queues: dict[str, list[Workload]]) -> bool:
        """:meth:`_fits_free` of any queued workload, from the most free GPUs on one host and the
        whole free hosts of each model."""
        st = self.state
        most: dict[str, int] = {}
        whole: dict[str, int] = {}
        for model, buckets in st.buckets.items():
            most[model] = max((c for c, hosts in buckets.items() if hosts), default=0)
            whole[model] = len(buckets.get(st.largest[model], ()))
        for q in queues.values():
            for w in q:
                m = most.get(w.model, 0)
                if m == 0:
                    continue
                size = st.largest[w.model]
                if w.gpus <= size:
                    if w.gpus <= m:
                        return True
                elif whole[w.model] >= w.gpus // size:
                    return True
        return False

    def _is_gang(self, w: Workload) -> bool:
        return w.gpus > self.state.largest.get(w.model, 0)

    def _host_allowed(self, w: Workload, host: str) -> bool:
        r = self.reserved.get(host)
        if r is None or r[0] == w.id or not w.allocated:
            return True
        return self.now + w.min_runtime <= r[1]

    def _free_placement(self, w: Workload, honour_reservations: bool = True) -> tuple[GpuRef, ...] | None:
        st = self.state

        def allowed(h: str) -> bool:
            return self._host_allowed(w, h) if honour_reservations else True

        if not self._is_gang(w):
            host = st.best_fit(w.model, w.gpus, allowed)
            if host is None:
                return None
            return tuple((host, i) for i in st.hosts[host].free[: w.gpus])
        size = st.largest[w.model]
        k = w.gpus // size
        hosts = [h for h in st.whole_free_hosts(w.model, size) if allowed(h)]
        if len(hosts) < k:
            return None
        chosen = self._pick_hosts_by_fabric(hosts, k)
        return tuple((h, i) for h in chosen for i in sorted(st.hosts[h].healthy))

    def _pick_hosts_by_fabric(self, hosts: list[str], k: int) -> list[str]:
        """k hosts spanning the fewest fabrics, then the smallest host names (§3.3)."""
        groups: dict[str, list[str]] = {}
        for h in sorted(hosts):
            groups.setdefault(self.state.hosts[h].fabric, []).append(h)
        singles = [sorted(g)[:k] for g in groups.values() if len(g) >= k]
        if singles:
            return min(singles)
        names = sorted(groups)
        best: tuple[int, list[str]] | None = None
        if len(names) <= 12:
            for f in range(2, len(names) + 1):
                for combo in combinations(names, f):
                    pool = sorted(h for g in combo for h in groups[g])
                    if len(pool) >= k:
                        cand = (f, pool[:k])
                        if best is None or cand < best:
                            best = cand
                if best is not None:
                    return best[1]
        # Many fabrics: largest groups first (greedy).
        order = sorted(names, key=lambda g: (-len(groups[g]), g))
        pool = []
        for g in order:
            pool.extend(groups[g])
            if len(pool) >= k:
                break
        return sorted(pool)[:k]

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
            self.room_gen += 1  # nominated GPUs become an attempt (room later), leftovers free now
            nom = self.noms.pop(w.id)
            mine = set(gpus)
            leftover = tuple(g for g in nom if g not in mine)
            for g in nom:
                if g in mine:
                    st.unnominate(g)
            if leftover:
                st.release_nomination(w.id, leftover)
            if w.allocated and not allocated:
                self._add_load(w.budget, -w.gpus * w.min_runtime)
        elif allocated:
            self._add_load(w.budget, w.gpus * w.min_runtime)
        self._new_attempts += 1
        new = Attempt(f"new:{w.id}", w.id, w.budget, tuple(sorted(gpus)), allocated, w.min_runtime, started_at=None)
        st.assign(new)
        self.standing.track(st.attempts[new.id], 1)
        self.dec.starts.append(Start(w.id, tuple(sorted(gpus)), allocated=allocated, unfunded=unfunded))
        self.gen += 1

    # ------------------------------------------------------ allocated pass
    def _dispatch_allocated(self, queues: dict[str, list[Workload]]) -> None:
        disp = self._disp = Dispatcher(self.tree, self.load, queues)
        # Without reasons, a workload with the same budget, model, size and M as one that failed
        # outright (no start, preemption, nomination or reservation) fails the same way until room
        # can grow (``room_gen``) or a load changes (``load_gen``: rule 2's answers): starts and
        # reservations in between only take room away (see ``__init__``).
        short_cut = not self.snap.with_reasons
        failed: dict[tuple[str, str, int, int], tuple[int, int]] = {}
        while True:
            w = disp.next()
            if w is None:
                break
            if short_cut and w.id not in self.noms:
                sig = (w.budget, w.model, w.gpus, w.min_runtime)
                if failed.get(sig) == (self.room_gen, self.load_gen):
                    disp.done(w, False)
                    continue
                admitted = self._handle_allocated(w)
                if not admitted and w.id not in self.reserving and w.id not in self.noms:
                    failed[sig] = (self.room_gen, self.load_gen)
            else:
                admitted = self._handle_allocated(w)
            disp.done(w, admitted)
        self._disp = None

    def _handle_allocated(self, w: Workload) -> bool:
        nom = self.noms.get(w.id)
        if nom is not None and len(nom) != w.gpus:
            self._drop_nomination(w.id)  # a nomination of the wrong size is never started (defence in depth)
            nom = None
        if nom is not None:
            if all(g not in self.state.owner for g in nom):
                self._start(w, nom, allocated=True)
                return True
            gpus = self._free_placement(w)
            if gpus is not None:
                self._start(w, gpus, allocated=True)
                return True
            victims = sorted({self.state.owner[g] for g in nom if g in self.state.owner})
            self._reason(
                w,
                PendingReason.AWAITING_PREEMPTION,
                {"victims": [self.state.attempts[v].attempt.workload for v in victims], "host": nom[0][0]},
            )
            return False
        gpus = self._free_placement(w)
        if gpus is not None:
            self._start(w, gpus, allocated=True)
            return True
        if self._try_preempt(w):
            return True
        self._blocked(w)
        return False

    # ----------------------------------------------------------- preemption
    def _victim_key(
        self, w: Workload, victims: list[AttemptView], hosts: list[str], sides: dict[str, Fraction] | None = None
    ) -> tuple[object, ...]:
        """The §3.4 victim-choice key of a set (smaller is better); ``sides`` caches side ratios."""
        alloc = 0
        total = 0
        side_keys = []
        starts = []
        for v in victims:
            a = v.attempt
            total += a.gpu_count
            if a.allocated:
                alloc += a.gpu_count
            if not a.allocated:
                # Unallocated work has no fair-share side: it counts as the most over-served (docs/policy.md).
                side_keys.append((0, Fraction(0)))
            else:
                r = sides.get(a.budget) if sides is not None else None
                if r is None:
                    split = self.tree.split(w.budget, a.budget)
                    r = -self.ratio(split[1] if split is not None else a.budget)
                    if sides is not None:
                        sides[a.budget] = r
                side_keys.append((1, r))
            starts.append(-(a.started_at or 0))
        side_keys.sort()
        starts.sort()
        fabrics = len({self.state.hosts[h].fabric for h in hosts}) if len(hosts) > 1 else 1
        return (
            alloc,
            total,
            len(victims),
            tuple(side_keys),
            tuple(starts),
            fabrics,
            tuple(sorted(hosts)),
            tuple(sorted(v.attempt.workload for v in victims)),
        )

    def _failed_before(self, kind: str, w: Workload) -> bool:
        """True when a search of ``kind`` already failed, since room last grew, for a workload
        that had at least the room ``w`` has: same model, allowed victim budgets a superset of
        ``w``'s, no more GPUs, no longer M.

        A victim or reservation search depends on a workload without a reservation or a
        nomination only through its model, size, M (hosts reserved by others) and the budgets
        whose allocated work rule 2 lets it take; each of those only shrinks the room when it
        grows, and within a pass room only shrinks until ``room_gen`` moves (see ``__init__``).
        A gang's victim search fails only for too few vacatable hosts (a set without victims
        would be whole free hosts, which free placement tried first), so more GPUs fail too.
        """
        fails = self._fails.get((kind, w.model, self.room_gen))
        if not fails:
            return False
        allowed = self._room_budgets(w)
        n, m = w.gpus, w.min_runtime
        return any(n >= f_n and m >= f_m and allowed <= f_allowed for f_allowed, f_n, f_m in fails)

    def _remember_failure(self, kind: str, w: Workload, min_runtime: int) -> None:
        self._fails.setdefault((kind, w.model, self.room_gen), []).append((self._room_budgets(w), w.gpus, min_runtime))

    def _room_budgets(self, w: Workload) -> frozenset[str]:
        """Budgets whose allocated work rule 2 lets ``w`` take: the one place a pass asks rule 2
        of every budget (:meth:`_budget_classes` reads it)."""
        key = (w.budget, w.gpus * w.min_runtime, len(self._agg_budgets), self.load_gen)
        out = self._memo_allowed.get(key)
        if out is None:
            budgets = self.tree.budgets
            out = frozenset(v for v in self._agg_budgets if v != w.budget and v in budgets and self.rule2(w, v))
            self._memo_allowed[key] = out
        return out

    def _try_preempt(self, w: Workload) -> bool:
        # A failure stands for every workload with no more room until room can grow (_failed_before).
        gang = self._is_gang(w)
        kind = "pg" if gang else "p"
        memo = w.id not in self.reserving
        if memo and self._failed_before(kind, w):
            return False
        found = self._search_gang(w) if gang else self._search_single(w)
        if found is None:
            if memo:
                self._remember_failure(kind, w, w.min_runtime)
            return False
        victims, gpus = found
        for av in victims:
            self._stop(av, StopReason.PREEMPTED, for_workload=w.id)
        self.noms[w.id] = gpus
        self.state.nominate(w.id, gpus)
        self._add_load(w.budget, w.gpus * w.min_runtime)
        self._reason(
            w, PendingReason.AWAITING_PREEMPTION, {"victims": [v.attempt.workload for v in victims], "host": gpus[0][0]}
        )
        return True

    def _search_single(self, w: Workload) -> tuple[list[AttemptView], tuple[GpuRef, ...]] | None:
        st = self.state
        n = w.gpus
        hit = self.reclaim.best(w.model, n, lambda h: self._host_allowed(w, h))
        if hit is not None:
            return self._take_victims(w, *hit)
        # No set without allocated victims exists: every candidate set holds an allocated victim
        # that rule 2 allows now, so only hosts holding one are scanned.
        allow: dict[str, bool] = {}
        hosts: set[str] = set()
        for v, where in self._victim_hosts.items():
            if v == w.budget or not where or v not in self.tree.budgets:
                continue
            if self.rule2(w, v):
                allow[v] = True
                hosts.update(where)
            else:
                allow[v] = False
        if not hosts:
            return None
        sides: dict[str, Fraction] = {}
        # Lower bounds on (allocated GPUs preempted, GPUs preempted) per host let the scan stop
        # early: no set on a host can beat the best found once its bound is worse (exact).
        order = []
        for name in hosts:
            hv = st.hosts[name]
            if not hv.active or hv.model != w.model:
                continue
            f = len(hv.free)
            order.append((max(0, n - f - hv.unalloc), n - f, hv.name, hv))
        order.sort(key=lambda x: (x[0], x[1], x[2]))
        best: tuple[tuple[object, ...], list[AttemptView], HostView] | None = None
        best_prefix: tuple[int, int, int] | None = None
        for lb_alloc, lb_total, _, hv in order:
            if best_prefix is not None and (lb_alloc, lb_total) > best_prefix[:2]:
                break
            if not self._host_allowed(w, hv.name):
                continue
            free = len(hv.free)
            vics: list[tuple[AttemptView, int]] = []
            gain = 0
            for aid in hv.attempts:
                av = st.attempts[aid]
                if av.stopping:
                    continue
                a = av.attempt
                if a.allocated and (av.protected or not allow.get(a.budget, False)):
                    continue
                freed = av.on_host.get(hv.name, 0)
                if freed <= 0:
                    continue
                vics.append((av, freed))
                gain += freed
            if best_prefix is not None:
                # A victim alone worse than the best set on allocated GPUs or GPUs cannot be in a better set.
                ba, bt = best_prefix[0], best_prefix[1]
                vics = [
                    (c, f)
                    for c, f in vics
                    if len(c.attempt.gpus) <= bt and (not c.attempt.allocated or len(c.attempt.gpus) <= ba)
                ]
                gain = sum(f for _, f in vics)
            if free + gain < n:
                continue
            # Every non-empty subset, its sums built from the subset without its lowest member:
            # GPUs gained, GPUs preempted, allocated GPUs preempted, victims, smallest gain.
            k = len(vics)
            size = 1 << k
            got = [free] * size
            tot = [0] * size
            alc = [0] * size
            cnt = [0] * size
            least = [1 << 30] * size
            for mask in range(1, size):
                low = mask & -mask
                rest = mask ^ low
                c, f = vics[low.bit_length() - 1]
                g = len(c.attempt.gpus)
                got[mask] = got[rest] + f
                tot[mask] = tot[rest] + g
                alc[mask] = alc[rest] + (g if c.attempt.allocated else 0)
                cnt[mask] = cnt[rest] + 1
                least[mask] = f if f < least[rest] else least[rest]
                if got[mask] < n or got[mask] - least[mask] >= n:
                    continue  # not sufficient, or not inclusion-minimal
                prefix = (alc[mask], tot[mask], cnt[mask])
                if best_prefix is not None and prefix > best_prefix:
                    continue
                chosen = [vics[i][0] for i in range(k) if mask >> i & 1]
                key = self._victim_key(w, chosen, [hv.name], sides)
                if best is None or key < best[0]:
                    best = (key, chosen, hv)
                    best_prefix = prefix
        if best is None:
            return None
        _, victims, hv = best
        return self._take_victims(w, victims, hv)

    def _take_victims(
        self, w: Workload, victims: list[AttemptView], hv: HostView
    ) -> tuple[list[AttemptView], tuple[GpuRef, ...]]:
        """The victims and the GPUs to nominate: the lowest indices among free and freed GPUs."""
        st = self.state
        n = w.gpus
        pool = set(hv.free)
        for av in victims:
            pool.update(
                i
                for h, i in av.attempt.gpus
                if h == hv.name and i in hv.healthy and st.nominated.get((h, i)) in (None, w.id)
            )
        gpus = tuple((hv.name, i) for i in sorted(pool)[:n])
        return victims, gpus

    def _host_vacate(self, w: Workload, hv: HostView) -> tuple[int, list[AttemptView]]:
        """Worst victim class over the host's attempts (FREE hosts give NOW) and the victims."""
        worst = NOW
        vics = []
        if self.state.nominated_for_other(hv.name, w.id):
            return NEVER, []
        for aid in hv.attempts:
            av = self.state.attempts[aid]
            c = self.victim_class(w, av)
            worst = max(worst, c)
            vics.append(av)
        return worst, vics

    def _search_gang(self, w: Workload) -> tuple[list[AttemptView], tuple[GpuRef, ...]] | None:
        size = self.state.largest[w.model]
        k = w.gpus // size
        options: list[tuple[HostView, list[AttemptView]]] = []
        for name in self._gang_options(w.model, size, self._room_budgets(w)):
            hv = self.state.hosts[name]
            if not self._host_allowed(w, name):
                continue
            worst, vics = self._host_vacate(w, hv)
            if worst == NOW:
                options.append((hv, vics))
        if len(options) < k:
            return None
        if comb(len(options), k) <= MAX_EXACT_GANG_SETS:
            best: tuple[tuple[object, ...], list[AttemptView], list[HostView]] | None = None
            for combo in combinations(options, k):
                victims = sorted({v.attempt.id: v for _, vs in combo for v in vs}.values(), key=lambda v: v.attempt.id)
                if not victims:
                    continue
                key = self._victim_key(w, victims, [hv.name for hv, _ in combo])
                if best is None or key < best[0]:
                    best = (key, victims, [hv for hv, _ in combo])
            if best is None:
                return None
            _, victims, hosts = best
        else:
            options.sort(key=lambda o: (self._victim_key(w, o[1], [o[0].name]), o[0].name))
            chosen = options[:k]
            victims = sorted({v.attempt.id: v for _, vs in chosen for v in vs}.values(), key=lambda v: v.attempt.id)
            hosts = [hv for hv, _ in chosen]
            if not victims:
                return None
        gpus = tuple((hv.name, i) for hv in sorted(hosts, key=lambda h: h.name) for i in sorted(hv.healthy))
        return victims, gpus

    # ------------------------------------------------- reservations, reasons
    def _blocked(self, w: Workload) -> None:
        if w.id not in self.reserving and len(self.reserving) < self.snap.max_reservations:
            self._reserve(w)
        if self.snap.with_reasons:
            self._explain(w)

    def _reserve(self, w: Workload) -> None:
        # A search that found no host depends on the workload only through its model, size, budget
        # and how rule 2 classes every budget (it has no nomination): share the failure until the
        # state changes.
        kind = "rg" if self._is_gang(w) else "r"
        if self._failed_before(kind, w):
            return
        st = self.state
        now = self.now
        best: tuple[int, int, tuple[str, ...]] | None = None
        if not self._is_gang(w):
            n = w.gpus
            allowed = self._room_budgets(w)
            version = st.version
            cache = self._room_over_time
            agg = self._agg
            held = self.standing.agg_held
            for hv in self._hosts_by_model.get(w.model, ()):
                if not hv.active or hv.name in self.reserved:
                    continue
                # Upper bound on the room ever made here: healthy GPUs less allocated work that
                # is never room for w (forbidden by rule 2, or its own budget's).
                bound = len(hv.healthy) - held.get(hv.name, 0)
                if allowed:
                    per = agg.get(hv.name)
                    if per:
                        for v in allowed:
                            counts = per.get(v)
                            if counts is not None:
                                bound += counts[0] + counts[1]
                if bound < n:
                    continue
                key = (hv.name, version.get(hv.name, 0), allowed)
                room = cache.get(key)
                if room is None:
                    room = cache[key] = self._host_room_over_time(hv, allowed)
                have, events, most = room
                if most < n:
                    continue
                t = now
                if have < n:
                    for at, freed in events:
                        have += freed
                        if have >= n:
                            t = at
                            break
                cand = (t, 1, (hv.name,))
                if best is None or cand < best:
                    best = cand
        else:
            size = st.largest[w.model]
            k = w.gpus // size
            per_host: list[tuple[int, str]] = []
            allowed = self._room_budgets(w)
            version = st.version
            cache = self._vacated_at
            for hv in self._hosts_by_model.get(w.model, ()):
                if not hv.active or not hv.all_healthy or hv.size != size or hv.name in self.reserved:
                    continue
                key = (hv.name, version.get(hv.name, 0), allowed)
                if key in cache:
                    t = cache[key]
                else:
                    t = cache[key] = self._host_vacated_at(hv, allowed)
                if t is not None:
                    per_host.append((t, hv.name))
            if len(per_host) >= k:
                per_host.sort()
                start = per_host[k - 1][0]
                eligible = [h for t, h in per_host if t <= start]
                chosen = self._pick_hosts_by_fabric(eligible, k)
                fabrics = len({st.hosts[h].fabric for h in chosen})
                best = (start, fabrics, tuple(sorted(chosen)))
        if best is None:
            self._remember_failure(kind, w, 0)  # M plays no part in a reservation
            return
        t, _, hosts = best
        self.reserving.add(w.id)
        for h in hosts:
            self.reserved[h] = (w.id, t)
        self.dec.reserved_start[w.id] = t
        self.gen += 1

    def _host_room_over_time(self, hv: HostView, allowed: frozenset[str]) -> tuple[int, list[tuple[int, int]], int]:
        """When GPUs of ``hv`` become room for an allocated workload without a nomination whose
        rule 2 allows the budgets ``allowed``: ``(free now, [(instant, GPUs)] in order, most ever)``.

        Free GPUs count now; leaving work whose GPUs no one else is nominated for, unallocated
        work and allowed unprotected work count now; allowed protected work at the end of its
        protection (a starting attempt: M from now). Own, forbidden or nominated work never counts.
        Kept per (host, host version, allowed budgets): any change of the host's GPUs or work
        bumps its version (:meth:`ClusterState._touch`).
        """
        st = self.state
        now = self.now
        name = hv.name
        have = len(hv.free)
        times: list[tuple[int, int]] = []
        for aid in hv.attempts:
            av = st.attempts[aid]
            freed = av.on_host.get(name, 0)
            a = av.attempt
            if av.stopping:
                # §3.5: GPUs of an attempt already stopping are room from its release, those nominated
                # for another workload excepted (a reserving workload has no nomination of its own).
                nominated = st.nominated
                gone = sum(1 for g in a.gpus if g[0] == name and g[1] in hv.healthy and g not in nominated)
                if gone:
                    times.append((now if a.release_at is None else max(now, a.release_at), gone))
                continue
            if not a.allocated:
                times.append((now, freed))
            elif a.budget in allowed:
                if av.protected:
                    pu = a.protected_until
                    times.append((pu if pu is not None else now + a.min_runtime, freed))
                else:
                    times.append((now, freed))
        times.sort()
        return have, times, have + sum(f for _, f in times)

    def _host_vacated_at(self, hv: HostView, allowed: frozenset[str]) -> int | None:
        """When ``hv`` can be wholly vacated for an allocated workload without a nomination whose
        rule 2 allows the budgets ``allowed`` (seconds), or None if never: GPUs nominated for a
        workload, or work of a budget not allowed. Unallocated and allowed unprotected work
        count now, allowed protected work at the end of its protection (a starting attempt: M
        from now), leaving work not at all. Kept per (host, host version, allowed budgets).
        """
        st = self.state
        if st.nominees.get(hv.name):
            return None
        t = self.now
        for aid in hv.attempts:
            av = st.attempts[aid]
            a = av.attempt
            if av.stopping:
                if a.release_at is not None:
                    t = max(t, a.release_at)  # §3.5: room from its release
                continue
            if not a.allocated:
                continue
            if a.budget not in allowed:
                return None
            if av.protected:
                pu = a.protected_until
                t = max(t, pu if pu is not None else self.now + a.min_runtime)
        return t

    def _budget_classes(self, w: Workload) -> dict[str, int]:
        """For every budget holding allocated work: NOW/LATER (rule 2 allows), FORBIDDEN or NEVER (own).

        Shared (read-only) by workloads of one budget with the same commitment while no load changes.
        """
        key = (w.budget, w.gpus * w.min_runtime, len(self._agg_budgets), self.load_gen)
        out = self._memo_classes.get(key)
        if out is not None:
            return out
        out = self._memo_classes[key] = {}
        allowed = self._room_budgets(w)  # rule 2, asked once per budget
        for v in self._agg_budgets:
            if v == w.budget or v not in self.tree.budgets:
                out[v] = NEVER
            else:
                out[v] = NOW if v in allowed else FORBIDDEN
        return out

    def _room_levels_memo(self, w: Workload) -> tuple[int, dict[str, object]]:
        """:meth:`_room_levels`, shared by workloads that see every budget the same way.

        The levels depend on the workload only through its model, size and the class
        of every budget holding work (own, allowed, forbidden); the fair-share numbers
        are recomputed for the workload itself.
        """
        cls = self._budget_classes(w)
        key = (w.model, w.gpus, w.budget in self._agg_budgets and w.budget, tuple(cls.values()), self.gen)
        hit = self._memo_levels.get(key)
        if hit is None:
            hit = self._room_levels(w)
            self._memo_levels[key] = hit
        level, detail = hit
        detail = dict(detail)
        if level == 3 and "other_budget_key" in detail:
            detail.update(self._fair_share_detail_budgets(w, str(detail["other_budget_key"])))
        return level, detail

    def _level_table(self, model: str, cls: dict[str, int]) -> list[dict[int, tuple[str, str | None]]]:
        """For room levels 0–3 and every GPU count t: the first host (by name) with t GPUs of room.

        Level 0 counts free GPUs; 1 adds unallocated work and unprotected work rule 2 allows;
        2 adds protected work rule 2 allows; 3 adds work rule 2 forbids (with a witness budget).
        Built once per (model, budget classes, state generation): one pass over the hosts.
        """
        key = (model, tuple(cls.values()), self.gen)
        table = self._tables.get(key)
        if table is not None:
            return table
        table = [{}, {}, {}, {}]
        filled = [0, 0, 0, 0]
        for hv in self._hosts_by_model.get(model, ()):
            if not hv.active:
                continue
            h0 = len(hv.free)
            h1 = h0 + hv.unalloc
            h2 = h3 = 0
            forbidden: str | None = None
            for v, counts in self._agg.get(hv.name, {}).items():
                c = cls[v]
                if c == NOW:
                    h1 += counts[0]
                    h2 += counts[1]
                elif c == FORBIDDEN and (counts[0] or counts[1]):
                    h3 += counts[0] + counts[1]
                    if forbidden is None or v < forbidden:
                        forbidden = v  # the smallest key: the same whatever order the work was seen in
            h2 += h1
            h3 += h2
            for level, room in enumerate((h0, h1, h2, h3)):
                if room > filled[level]:
                    for t in range(filled[level] + 1, room + 1):
                        table[level][t] = (hv.name, forbidden)
                    filled[level] = room
        self._tables[key] = table
        return table

    def _gang_options(self, model: str, size: int, allowed: frozenset[str]) -> list[str]:
        """Hosts of :meth:`_gang_table` at level 0 or 1 for a workload whose rule 2 allows the
        budgets ``allowed``, best first: whole healthy hosts of ``size`` GPUs holding only
        unallocated work and unprotected work of allowed budgets, nothing leaving or nominated.
        Built once per (model, size, allowed budgets, state generation)."""
        key = (model, size, allowed, self.gen)
        cached = self._gang_opts.get(key)
        if cached is not None:
            return cached
        empty: list[str] = []
        usable: list[str] = []
        nominees = self.state.nominees
        for hv in self._hosts_by_model.get(model, ()):
            if not hv.active or not hv.all_healthy or hv.size != size or hv.stopping or nominees.get(hv.name):
                continue
            per = self._agg.get(hv.name)
            if per and any(c[1] or v not in allowed for v, c in per.items()):
                continue
            (usable if per or hv.unalloc else empty).append(hv.name)
        out = self._gang_opts[key] = sorted(empty) + sorted(usable)
        return out

    def _gang_table(self, model: str, size: int, cls: dict[str, int]) -> list[tuple[int, str, str | None]]:
        """Whole hosts of ``size`` GPUs as ``(level, name, witness budget)``, best first.

        The level of a host is the worst class of its work: 0 empty, 1 unallocated or
        allowed now, 2 allowed but protected, 3 forbidden by rule 2, 4 never (own budget,
        leaving, nominated). Built once per (model, size, budget classes, state generation).
        """
        key = ("g", model, size, tuple(cls.values()), self.gen)
        cached = self._gang_tables.get(key)
        if cached is not None:
            return cached
        levels: list[tuple[int, str, str | None]] = []
        for hv in self._hosts_by_model.get(model, ()):
            if not hv.active or not hv.all_healthy or hv.size != size:
                continue
            worst = 1 if hv.unalloc else 0
            witness = None
            for v, c in self._agg.get(hv.name, {}).items():
                if not (c[0] or c[1]):
                    continue
                lvl = (2 if c[1] else 1) if cls[v] == NOW else 3 if cls[v] == FORBIDDEN else 4
                if lvl > worst or (lvl == worst and witness is not None and v < witness):
                    worst, witness = lvl, v  # the smallest key at the worst level, whatever the order
            if worst < 4 and (hv.stopping or self.state.nominees.get(hv.name)):
                worst = 4  # leaving work or GPUs nominated for a preemptor (tables serve only workloads without one)
            levels.append((worst, hv.name, witness))
        levels.sort(key=lambda x: (x[0], x[1]))
        self._gang_tables[key] = levels
        return levels

    def _room_levels(self, w: Workload) -> tuple[int, dict[str, object]]:
        """Best room level over hosts, ignoring reservations: 0 free, 1 NOW, 2 LATER, 3 FORBIDDEN, 4 none.

        Uses the per-host, per-budget GPU counts of allocated work (unprotected, protected)
        kept up to date by the pass, so a host costs one step per budget present on it.
        """
        st = self.state
        best_level = 4
        detail: dict[str, object] = {}
        if not self._is_gang(w):
            cls = self._budget_classes(w)
            table = self._level_table(w.model, cls)
            for level in range(4):
                hit = table[level].get(w.gpus)
                if hit is not None:
                    best_level = level
                    host, witness = hit
                    detail = {"host": host}
                    if level == 2:
                        detail["protected_until"] = self._latest_needed(w, st.hosts[host])
                    if level == 3 and witness is not None:
                        detail.update(self._fair_share_detail_budgets(w, witness))
                    break
        else:
            size = st.largest[w.model]
            k = w.gpus // size
            levels = self._gang_table(w.model, size, self._budget_classes(w))
            if len(levels) >= k and levels[k - 1][0] < 4:
                best_level = levels[k - 1][0]
                witness = levels[k - 1][2]
                detail = {"hosts": [h for _, h, _ in levels[:k]]}
                if best_level == 2:
                    pus = [
                        st.attempts[aid].attempt.protected_until or self.now
                        for _, h, _ in levels[:k]
                        for aid in st.hosts[h].attempts
                    ]
                    detail["protected_until"] = max(pus) if pus else self.now
                if best_level == 3 and witness is not None:
                    detail.update(self._fair_share_detail_budgets(w, witness))
        return best_level, detail

    def _latest_needed(self, w: Workload, hv: HostView) -> int:
        """When enough allowed victims on ``hv`` will be unprotected for ``w`` (seconds)."""
        st = self.state
        have = len(hv.free)
        times = []
        for aid in hv.attempts:
            av = st.attempts[aid]
            c = self.victim_class(w, av)
            if c in (NOW, LATER):
                freed = sum(1 for h, i in av.attempt.gpus if h == hv.name and i in hv.healthy)
                times.append((av.attempt.protected_until or self.now if c == LATER else self.now, freed))
        for t, f in sorted(times):
            have += f
            if have >= w.gpus:
                return t
        return self.now

    def _fair_share_detail(self, w: Workload, av: AttemptView) -> dict[str, object]:
        return self._fair_share_detail_budgets(w, av.attempt.budget)

    def _fair_share_detail_budgets(self, w: Workload, victim_budget: str) -> dict[str, object]:
        """The ratios rule 2 compared: P's side counting its commitment, and the victim's side."""
        split = self.tree.split(w.budget, victim_budget)
        if split is None:
            return {}
        a, b = split
        return {
            "other_budget_key": victim_budget,
            "budget": self.tree.path_name(a),
            # Three decimals: enough to read, and the stored reason does not change every tick.
            "ratio": round(self.display_ratio(a, w.gpus * w.min_runtime), 3),
            "other_budget": self.tree.path_name(b),
            "other_ratio": round(self.display_ratio(b), 3),
        }

    def _explain(self, w: Workload) -> None:
        memo = ("r", w.budget, w.model, w.gpus, w.min_runtime, self.gen)
        cached = self._memo_reason.get(memo)
        if cached is not None:
            self.dec.pending[w.id] = PendingInfo(cached.reason, dict(cached.detail))
            return
        level, detail = self._room_levels_memo(w)
        if level <= 1:
            holder = None
            hosts = detail.get("hosts")
            for h in [detail.get("host"), *(hosts if isinstance(hosts, list) else [])]:
                if isinstance(h, str) and h in self.reserved and self.reserved[h][0] != w.id:
                    holder = self.reserved[h][0]
                    break
            if holder is None:
                holder = next((wid for wid, _ in self.reserved.values() if wid != w.id), None)
            info = PendingInfo(PendingReason.RESERVED_FOR_OTHER, {"reserved_for": holder, **detail})
        elif level == 2:
            info = PendingInfo(PendingReason.PROTECTED_WORK, detail)
        elif level == 3:
            info = PendingInfo(PendingReason.FAIR_SHARE, detail)
        else:
            info = PendingInfo(PendingReason.INSUFFICIENT_GPUS, {})
        if w.id in self.dec.reserved_start:
            info.detail["reserved_start"] = self.dec.reserved_start[w.id]
        self._memo_reason[memo] = info
        self.dec.pending[w.id] = PendingInfo(info.reason, dict(info.detail))

    def _reason(self, w: Workload, reason: PendingReason, detail: dict[str, object]) -> None:
        if self.snap.with_reasons:
            self.dec.pending[w.id] = PendingInfo(reason, detail)

    # ---------------------------------------------------- unallocated pass
    def _dispatch_unallocated(self, queues: dict[str, list[Workload]]) -> None:
        if not self.snap.with_reasons and not self._any_fits_free(queues):
            return  # nothing can start, and no reasons are wanted
        disp = Dispatcher(self.tree, self.load, queues)
        smallest_failed: dict[str, int] = {}
        while True:
            w = disp.next()
            if w is None:
                break
            placed = False
            if w.gpus < smallest_failed.get(w.model, 1 << 30):
                gpus = self._free_placement(w, honour_reservations=False)
                if gpus is not None:
                    self._start(w, gpus, allocated=False, unfunded=w.id in self.unfunded)
                    placed = True
                else:
                    smallest_failed[w.model] = w.gpus
            if not placed:
                if w.id in self.unfunded:
                    capper = self.tree.capped_by(w.budget)
                    name = self.tree.path_name(capper.key) if capper else ""
                    self._reason(w, PendingReason.BUDGET_CAPPED, {"budget": name, "unfunded": True})
                else:
                    self._reason(w, PendingReason.INSUFFICIENT_GPUS, {})
            disp.done(w, placed)
