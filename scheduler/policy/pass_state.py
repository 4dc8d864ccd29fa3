"""What one pass knows while it runs, and the queries its parts share.

:class:`PassState` holds the snapshot, the budget tree, the cluster state (a
:class:`~scheduler.policy.standing.Standing` the pass may change), loads, the decisions so far,
reservations and the pass's :class:`~scheduler.policy.memo.Memo`. Placement, victim search,
reservations and reasons (their own modules) read it; only the pass (core.py) decides, and it
reports every change through :meth:`PassState.changed`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from fractions import Fraction

import scheduler.policy.contract as contract
from scheduler.policy.contract import KeyContext
from scheduler.policy.dispatch import Dispatcher
from scheduler.policy.memo import Memo
from scheduler.policy.standing import Standing
from scheduler.policy.state import AttemptView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Decisions, GpuRef, Snapshot, Workload
from scheduler.policy.usage import pass_loads


def budgets_with_work(snap: Snapshot) -> set[str]:
    """The budgets with work of their own on ``snap``'s cluster now: an open attempt or a pending
    workload (what keeps an archived budget in its siblings' normalization, §3.7, through
    :meth:`BudgetTree.live`). The tick, the standing and the what-if ask here."""
    return {a.budget for a in snap.attempts} | {w.budget for w in snap.pending}


class PassState:
    """The state of one pass over ``snap`` (the arguments after it are what a caller already has)."""

    def __init__(
        self,
        snap: Snapshot,
        tree: BudgetTree | None = None,
        standing: Standing | None = None,
        pending: dict[str, Workload] | None = None,
        loads: tuple[dict[str, int], dict[str, int]] | None = None,
    ) -> None:
        self.snap = snap
        self.now = snap.now
        self.tree = tree if tree is not None else BudgetTree(snap.budgets)
        self.pending: dict[str, Workload] = pending if pending is not None else {w.id: w for w in snap.pending}
        # The standing (cluster state and aggregates) is this pass's to change: its end state is
        # what the next snapshot is synced from (scheduler.policy.standing).
        self.standing = standing if standing is not None else Standing(snap, self.pending)
        self.state = self.standing.state
        self.drains: Mapping[str, int] = self.standing.drains  # host -> scheduled drain (empty: none)
        self.noms: dict[str, tuple[GpuRef, ...]] = self.standing.noms
        if loads is None:
            loads = pass_loads(snap, self.tree, self.noms, self.pending)
        self.usage = loads[0]
        self.load: dict[str, int] = dict(loads[1])  # changed by the pass's own starts and stops
        total = self.standing.total_gpus  # the standing's hosts are the snapshot's (Standing.fits)
        self.total_gpus = total if total is not None else sum(h.size for h in snap.hosts)
        self.dec = Decisions()
        self.memo = Memo()
        self.reserved: dict[str, tuple[str, int]] = {}  # host -> (workload, reserved start)
        self.reserving: set[str] = set()
        self.unfunded: set[str] = set()
        self.disp: Dispatcher | None = None  # the allocated pass's dispatcher while it runs
        self._shares: dict[str, Fraction] | None = None
        # tests (IncrementalScheduler(check=True)): answers kept in the memo are compared with
        # a fresh computation when read
        self.check = False

    # ------------------------------------------------------------ changes
    def changed(self, *, room: bool = False) -> None:
        """A decision changed the state; ``room``: room for pending work can grow (memo.py)."""
        self.memo.changed(room=room)

    def reserved_hosts(self) -> None:
        """A reservation was made: only what reads reservations is dropped (memo.py)."""
        self.memo.reserved()

    def add_load(self, budget: str, amount: int) -> None:
        """Add ``amount`` GPU-seconds to the load of ``budget`` and its ancestors; re-rank them."""
        for node in self.tree.chain[budget]:
            self.load[node] += amount
        self.memo.changed(load=True)
        if self.disp is not None:
            self.disp.loads_changed(budget)

    # ------------------------------------------------------------ ratios
    def shares(self) -> dict[str, Fraction]:
        """Normalized shares; archived budgets without work drop out (§3.7)."""
        if self._shares is None:
            live = self.live_budgets()
            self._shares = self.tree.normalized_shares(live)
            if self.check and self._shares != (walked := self.tree.normalized_shares_walk(live)):
                raise AssertionError(f"kept normalized shares at {self.now}: {self._shares} != {walked}")
        return self._shares

    def live_budgets(self) -> set[str]:
        """Budgets that count in their siblings' normalization: not archived, or with work (§3.7).
        With no budget archived, every budget, without reading the work (under ``check``, the
        walk of :meth:`live_budgets_walk` is compared)."""
        if any(b.archived for b in self.tree.budgets.values()):
            return self.live_budgets_walk()
        live = set(self.tree.budgets)
        if self.check and live != (walked := self.live_budgets_walk()):
            raise AssertionError(f"live budgets at {self.now}: {live} != {walked}")
        return live

    def live_budgets_walk(self) -> set[str]:
        """:meth:`live_budgets` from every attempt and pending workload."""
        return self.tree.live(budgets_with_work(self.snap))

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

    # ------------------------------------------------------------ the contract, for this pass
    def room_budgets(self, w: Workload) -> frozenset[str]:
        """Budgets whose allocated work rule 2 lets ``w`` take: the one place a pass asks rule 2
        of every budget (:func:`contract.allowed_budgets`)."""
        agg_budgets = self.standing.agg_budgets
        seen = len(agg_budgets)
        mine = self.memo.allowed_of.get(w.id)  # the same question asked again of one workload
        if mine is not None and mine[0] == seen:
            return mine[1]
        out = self.allowed_at(w.budget, contract.commitment(w))
        self.memo.allowed_of[w.id] = (seen, out)
        return out

    def allowed_at(self, budget: str, c: int) -> frozenset[str]:
        """:meth:`room_budgets` of a workload of ``budget`` committing ``c`` (no nomination)."""
        agg_budgets = self.standing.agg_budgets
        key = (budget, c, len(agg_budgets))
        out = self.memo.allowed.get(key)
        if out is None:
            # rule 2 for every commitment at once, per budget until a load changes
            tkey = (budget, len(agg_budgets))
            thresholds = self.memo.thresholds.get(tkey)
            if thresholds is None:
                thresholds = self.memo.thresholds[tkey] = contract.rule2_thresholds(
                    self.tree, self.load, budget, agg_budgets
                )
            out = self.memo.allowed[key] = contract.allowed_from_thresholds(thresholds[0], thresholds[1], c)
        return out

    def allowed_floor(self, budget: str, c: int) -> int:
        """The least commitment (at least 0) that rule 2 answers as it answers ``c`` for ``budget``
        (:meth:`allowed_at`): every commitment from there to ``c`` is allowed the same budgets."""
        self.allowed_at(budget, c)  # the thresholds, kept in the memo until a load changes
        thresholds = self.memo.thresholds[(budget, len(self.standing.agg_budgets))][0]
        k = bisect.bisect_right(thresholds, c)
        floor = thresholds[k - 1] if k else -math.inf
        return 0 if floor <= 0 else int(floor)

    def budget_classes(self, w: Workload) -> dict[str, int]:
        """:func:`contract.budget_class` of every budget holding allocated work, for ``w``."""
        agg_budgets = self.standing.agg_budgets
        key = (w.budget, w.gpus * w.min_runtime, len(agg_budgets))
        out = self.memo.classes.get(key)
        if out is None:
            allowed = self.room_budgets(w)
            known = self.tree.budgets
            out = self.memo.classes[key] = {v: contract.budget_class(w, v, allowed, known) for v in agg_budgets}
        return out

    def victim_class(self, w: Workload, av: AttemptView) -> int:
        """How the attempt counts as room for ``w`` (:func:`contract.victim_class`)."""
        return contract.victim_class(av, w, self.room_budgets(w), self.tree.budgets)

    def key_context(self, w: Workload) -> KeyContext:
        """The victim key's view of this pass for preemptor ``w``."""
        cache = self.memo.sides
        tree = self.tree
        hosts = self.state.hosts

        def side(v: str) -> Fraction:
            r = cache.get((w.budget, v))
            if r is None:
                split = tree.split(w.budget, v)
                r = cache[(w.budget, v)] = -self.ratio(split[1] if split is not None else v)
            return r

        return KeyContext(side, lambda h: hosts[h].fabric, self.now)

    # ------------------------------------------------------------ shapes and reservations
    def is_gang(self, w: Workload) -> bool:
        """True when ``w`` needs more GPUs than the largest host of its model (§3.3)."""
        return w.gpus > self.state.largest.get(w.model, 0)

    def host_allowed(self, w: Workload, host: str) -> bool:
        """May ``w`` be placed on ``host`` now despite a reservation there (§3.5) or a drain
        scheduled there (:meth:`drain_allows`)?"""
        if self.drains and not self.drain_allows(w, host, self.now):
            return False
        r = self.reserved.get(host)
        if r is None or r[0] == w.id or not w.allocated:
            return True
        return self.now + w.min_runtime <= r[1]

    def drain_allows(self, w: Workload, host: str, start: int) -> bool:
        """May ``w`` start on ``host`` at ``start`` by the host's scheduled drain (docs/deploy.md
        "Scheduled drains", Slurm's maint reservation)? Not when ``w`` is allocated and its
        protection would end after the drain's instant (``start + M > drain_at``); unallocated
        work (M = 0) may. The policy's one statement of the rule (the oracle's:
        ``reference.drain_allows``)."""
        at = self.drains.get(host)
        return at is None or not w.allocated or start + w.min_runtime <= at

    # ------------------------------------------------------------ failures that stand
    def failed_before(self, kind: str, w: Workload) -> bool:
        """True when a search of ``kind`` already failed, since room last grew, for a workload
        that had at least the room ``w`` has: same model, allowed victim budgets a superset of
        ``w``'s, no more GPUs, no longer M.

        A victim or reservation search depends on a workload without a reservation or a
        nomination only through its model, size, M (hosts reserved by others) and the budgets
        whose allocated work rule 2 lets it take (and its CPU and memory requests: the same
        explicit ones, or defaults that grow with the GPUs); each of those only shrinks the room when it
        grows, and within a pass room only shrinks until it can grow again (memo.py).
        A gang's victim search fails only for too few vacatable hosts (a set without victims
        would be whole free hosts, which free placement tried first), so more GPUs fail too.
        """
        fails = self.memo.failed.get((kind, w.model, w.cpus, w.memory))
        if not fails:
            return False
        n, m = w.gpus, w.min_runtime
        for _, f_n, f_m in fails:  # rule 2's budgets are read only where GPUs and M could match
            if n >= f_n and m >= f_m:
                return self.failed_at(kind, (w.model, n, w.cpus, w.memory), m, self.room_budgets(w))
        return False

    def failed_at(
        self, kind: str, shape: tuple[str, int, int | None, int | None], m: int, allowed: frozenset[str]
    ) -> bool:
        """:meth:`failed_before` for a workload of ``shape`` (model, GPUs, CPUs, memory), M ``m``
        and allowed victim budgets ``allowed``."""
        model, n, cpus, memory = shape
        fails = self.memo.failed.get((kind, model, cpus, memory))
        if not fails:
            return False
        for f_allowed, f_n, f_m in fails:  # noqa: SIM110 (a loop, not a generator per call)
            if n >= f_n and m >= f_m and allowed <= f_allowed:
                return True
        return False

    def remember_failure(self, kind: str, w: Workload, min_runtime: int) -> None:
        """Record a failed search of ``kind`` (:meth:`failed_before`)."""
        allowed, n = self.room_budgets(w), w.gpus
        fails = self.memo.failed.setdefault((kind, w.model, w.cpus, w.memory), [])
        # Entries the new one covers (more GPUs, longer M, fewer allowed budgets) are dropped:
        # failed_before answers the same, over an antichain.
        fails[:] = [f for f in fails if not (n <= f[1] and min_runtime <= f[2] and f[0] <= allowed)]
        fails.append((allowed, n, min_runtime))
