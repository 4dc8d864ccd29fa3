"""Read-only views of a snapshot for people and tests: usage, ranking, queue order."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from scheduler.policy.dispatch import NEVER, Dispatcher, submission_key
from scheduler.policy.pass_state import PassState
from scheduler.policy.types import Snapshot, Workload
from scheduler.policy.usage import windowed_usage


def budget_usage(snap: Snapshot) -> dict[str, int]:
    """``U(b)`` for every budget, subtree included, in GPU-seconds (§3.1)."""
    p = PassState(snap)
    return dict(p.usage)


def budget_ratios(snap: Snapshot) -> dict[str, float]:
    """``r(b) = (U + C) / E`` for every budget (§1), as floats for display."""
    p = PassState(snap)
    return {k: p.display_ratio(k) for k in p.tree.budgets}


def entitlements(snap: Snapshot) -> dict[str, int]:
    """``E(b) = s(b) × GPUs × W`` in GPU-seconds (rounded down), for display."""
    p = PassState(snap)
    total = p.total_gpus * snap.window
    return {k: int(s * total) for k, s in p.shares().items()}


def ratio_order(snap: Snapshot, keys: Sequence[str]) -> list[str]:
    """``keys`` sorted by exact ratio, then oldest pending workload, then name (§3.2)."""
    p = PassState(snap)
    oldest: dict[str, tuple[int, int]] = {}
    for w in snap.pending:
        for node in p.tree.chain.get(w.budget, ()):
            k = submission_key(w)
            if k < oldest.get(node, NEVER):
                oldest[node] = k

    def key(b: str) -> tuple[Fraction, tuple[int, int], str]:
        return (p.ratio(b), oldest.get(b, NEVER), p.tree.budgets[b].name)

    return sorted(keys, key=key)


def dispatch_order(snap: Snapshot) -> list[str]:
    """Pending workload ids in the order dispatch would consider them now (nothing admitted).

    Allocated workloads first, then unallocated ones (they fill what is left, §3.6).
    """
    p = PassState(snap)
    alloc: dict[str, list[Workload]] = {}
    unalloc: dict[str, list[Workload]] = {}
    for w in snap.pending:
        if w.budget in p.tree.budgets:
            (alloc if w.allocated else unalloc).setdefault(w.budget, []).append(w)
    out: list[str] = []
    for queues in (alloc, unalloc):
        d = Dispatcher(p.tree, p.load, queues)
        while (nxt := d.next()) is not None:
            out.append(nxt.id)
            d.done(nxt, admitted=False)
    return out


__all__ = ["budget_ratios", "budget_usage", "dispatch_order", "entitlements", "ratio_order", "windowed_usage"]
