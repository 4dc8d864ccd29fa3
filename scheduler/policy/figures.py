"""A budget's standing in numbers: the one place U, C, E, r, rank, demand and attainment are computed.

Every surface that shows a budget's figures reads :func:`budget_figures` (through
``scheduler.reports.budget_standings`` on the server): the budgets page, the API's
``budgets/tree/``, ``fairway budgets`` and ``fairway share``, Prometheus, the pyramid's per-budget
impact, the admin what-if's actual column and the why-pending numbers. The figures come from the
same :class:`~scheduler.policy.pass_state.PassState` a scheduling pass builds, so what people read
is what the tick ranks by.

Definitions (DESIGN.md §1, §3.1, §3.2, §8), all in GPU-seconds over the window ``(now − W, now]``:

- ``U(b)``: allocated usage of the subtree (:func:`scheduler.policy.usage.windowed_usage`);
- ``C(b)``: committed usage, protection still ahead plus ``gpus × M`` of nominated workloads
  (:func:`scheduler.policy.usage.committed_usage`);
- ``E(b) = s(b) × GPUs × W``; ``r(b) = (U + C) / E`` (exact, a Fraction);
- rank: 1 = first among its live siblings (exact ratio, then oldest pending work, then name);
- demand: :func:`workload_demand` of the time each workload could run (:func:`asking_span`)
  summed over the subtree; attainment: :func:`attainment`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from scheduler.policy.dispatch import NEVER, submission_key
from scheduler.policy.pass_state import PassState
from scheduler.policy.types import PendingReason, Snapshot


@dataclass(frozen=True, slots=True)
class BudgetFigures:
    """One budget's figures at one instant (GPU-seconds; ratios and shares exact)."""

    key: str
    usage: int
    committed: int
    load: int
    """``U + C``, what siblings are ranked by."""
    share: Fraction
    entitlement: Fraction
    ratio: Fraction | None
    """``(U + C) / E``; None when ``E`` is 0 (no share)."""
    rank: int | None
    """1 = most deserving among its live siblings; None for the root and budgets out of normalization."""
    siblings: int
    demand: int
    attainment: Fraction | None
    """:func:`attainment` of ``usage``; None when ``min(E, demand)`` is 0."""

    def ratio_with(self, commitment: int) -> Fraction | None:
        """``r`` counting a further ``commitment`` GPU-seconds (a pending workload's ``gpus × M``,
        as rule 2 of §3.4 compares it); None when the budget has no entitlement."""
        return Fraction(self.load + commitment) / self.entitlement if self.entitlement else None


NOT_ASKING = frozenset(
    {PendingReason.UNSCHEDULABLE, PendingReason.DEPENDENCY, PendingReason.HELD, PendingReason.BUDGET_CAPPED}
)
"""Pending reasons (DESIGN.md §3.8) under which a workload asks for nothing: it could not start
whatever other budgets did (no hardware fits it, it waits for other work, its budget is on hold
or at its cap). Its wait is no demand (docs/standing.md, "Demand is work that could run")."""


def asking_span(
    present_from: float, present_to: float, ready_at: float | None, waiting_since: float | None
) -> tuple[float, float]:
    """The part ``(lo, hi)`` of a workload's presence ``[present_from, present_to)`` (epoch
    seconds) in which it asked for GPUs (DESIGN.md §8, docs/standing.md): from ``ready_at``, the
    instant its prerequisites (``after``) became final (None: it had none), and not in its
    current wait when that wait is for a reason of :data:`NOT_ASKING` (``waiting_since``: the
    start of that wait; None: it is not waiting for one). ``hi <= lo`` means it asked for nothing.
    """
    lo = present_from if ready_at is None else max(present_from, ready_at)
    hi = present_to if waiting_since is None else min(present_to, waiting_since)
    return lo, hi


def workload_demand(gpus: int, present_s: int, need_s: int | None) -> int:
    """GPU-seconds one allocated workload asked for inside a window (DESIGN.md §8).

    ``present_s``: the seconds it was pending or running inside the window while it could run
    (:func:`asking_span`); ``need_s``: the run
    time it still needed there (None when unknown, i.e. not finished: it asks for all its
    presence). A waiting workload asks for GPUs × the run time it needs, never more
    (docs/simulation.md, "Metrics": without the cap a burst of short jobs waiting their turn
    counts many times its work as demand, and a budget that got all it could use looks starved).
    """
    present = max(0, present_s)
    return gpus * (present if need_s is None else min(present, max(0, need_s)))


def attainment(delivered: float | Fraction, entitlement: float | Fraction, demand: float | Fraction) -> Fraction | None:
    """Entitlement attainment = delivered ÷ min(entitlement, demand), capped at 1 (DESIGN.md §8).

    Capped: a budget served beyond its entitlement from idle GPUs is fully served
    (docs/simulation.md). None when ``min(entitlement, demand)`` is 0 (nothing was owed).
    """
    owed = Fraction(min(entitlement, demand))
    if owed <= 0:
        return None
    return min(Fraction(1), Fraction(delivered) / owed)


def owed(entitlement: float | Fraction, demand: float | Fraction) -> Fraction:
    """GPU-seconds owed over the window: ``min(entitlement, demand)`` (the attainment's denominator)."""
    return max(Fraction(0), Fraction(min(entitlement, demand)))


def budget_figures(snap: Snapshot, demand: Mapping[str, int] | None = None) -> dict[str, BudgetFigures]:
    """The figures of every budget of ``snap``, by key.

    ``demand``: per budget (own workloads only, usually leaves), GPU-seconds of
    :func:`workload_demand` inside the window; rolled up the tree here. Raises ValueError on a
    malformed tree (:class:`~scheduler.policy.tree.BudgetTree`).
    """
    ps = PassState(snap)
    tree = ps.tree
    shares = ps.shares()
    live = ps.live_budgets()
    capacity = ps.total_gpus * snap.window
    committed = {k: ps.load[k] - ps.usage[k] for k in tree.budgets}
    dem = tree.roll_up(demand or {})
    oldest: dict[str, tuple[int, int]] = {}
    for w in snap.pending:
        first = submission_key(w)
        for node in tree.chain.get(w.budget, ()):
            if first < oldest.get(node, NEVER):
                oldest[node] = first
    rank: dict[str, tuple[int, int]] = {}
    for kids in tree.children.values():
        ranked = sorted(
            (k for k in kids if k in live), key=lambda b: (ps.ratio(b), oldest.get(b, NEVER), tree.budgets[b].name)
        )
        for i, k in enumerate(ranked, 1):
            rank[k] = (i, len(ranked))
    out: dict[str, BudgetFigures] = {}
    for k in tree.budgets:
        s = shares.get(k, Fraction(0))
        ent = s * capacity
        u = ps.usage[k]
        pos = rank.get(k)
        out[k] = BudgetFigures(
            key=k,
            usage=u,
            committed=committed[k],
            load=ps.load[k],
            share=s,
            entitlement=ent,
            ratio=Fraction(ps.load[k]) / ent if ent else None,
            rank=pos[0] if pos else None,
            siblings=pos[1] if pos else 0,
            demand=dem.get(k, 0),
            attainment=attainment(u, ent, dem.get(k, 0)),
        )
    return out


def usage_curve(snap: Snapshot, points: int) -> dict[str, list[int]]:
    """Cumulative ``U`` of every budget (subtree, GPU-seconds) at ``points`` evenly spaced instants
    from the window's start to ``now`` (the last is ``U`` itself): the data of a usage-against-
    entitlement plot. O(records × points); the budgets page uses a few dozen points."""
    from scheduler.policy.tree import BudgetTree
    from scheduler.policy.usage import windowed_usage

    tree = BudgetTree(snap.budgets)
    start = snap.now - snap.window
    n = max(2, points)
    out: dict[str, list[int]] = {k: [] for k in tree.budgets}
    for i in range(n):
        t = start + (snap.window * i) // (n - 1)
        # usage in (start, t]: the window ending at t, minus nothing before start
        part = windowed_usage(snap.usage, snap.attempts, t, t - start) if t > start else {}
        rolled = tree.roll_up(part)
        for k in tree.budgets:
            out[k].append(rolled.get(k, 0))
    return out


__all__ = [
    "NOT_ASKING",
    "BudgetFigures",
    "asking_span",
    "attainment",
    "budget_figures",
    "owed",
    "usage_curve",
    "workload_demand",
]
