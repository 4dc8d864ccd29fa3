"""The share tree: normalized shares, usage roll-up and exact sibling comparisons.

Fair Tree ordering (Slurm docs, fair_tree.html) with GPU-time over a window instead
of decayed usage: siblings are ordered by ``r = (U + C) / E`` (DESIGN.md §1, §3.2).
Siblings share their parent's normalized share and the cluster's GPU count and
window, so ``r(A) < r(B)`` is exactly ``load(A) × shares(B) < load(B) × shares(A)``
with integer loads in GPU-seconds: no floating point decides an order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from fractions import Fraction

from scheduler.policy.types import Budget


class BudgetTree:
    """An immutable view of the budget tree of one snapshot.

    Raises ValueError on a budget whose parent is unknown, a cycle, or more than
    one root.
    """

    def __init__(self, budgets: Iterable[Budget]) -> None:
        self.budgets: dict[str, Budget] = {b.key: b for b in budgets}
        self.children: dict[str, list[str]] = {k: [] for k in self.budgets}
        roots = []
        for b in self.budgets.values():
            if b.parent is None:
                roots.append(b.key)
            elif b.parent not in self.budgets:
                raise ValueError(f"budget {b.name!r} has unknown parent {b.parent!r}")
            else:
                self.children[b.parent].append(b.key)
        if len(roots) > 1:
            raise ValueError(f"the share tree has {len(roots)} roots; exactly one is allowed")
        self.root: str | None = roots[0] if roots else None
        for kids in self.children.values():
            kids.sort(key=lambda k: self.budgets[k].name)
        # Ancestor chains, root first, the budget itself last.
        self.chain: dict[str, tuple[str, ...]] = {}
        for key in self.budgets:
            path = []
            node: str | None = key
            seen = set()
            while node is not None:
                if node in seen:
                    raise ValueError(f"the share tree has a cycle through {self.budgets[node].name!r}")
                seen.add(node)
                path.append(node)
                node = self.budgets[node].parent
            self.chain[key] = tuple(reversed(path))
        self._held = {k: any(self.budgets[a].hold for a in self.chain[k]) for k in self.budgets}
        self._splits: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._split_shares: dict[str, dict[str, tuple[str, str, int, int]]] = {}
        self._capped = {k: self._first_capped(k) for k in self.budgets}

    def _first_capped(self, key: str) -> Budget | None:
        for a in reversed(self.chain[key]):
            if self.budgets[a].capped:
                return self.budgets[a]
        return None

    def is_leaf(self, key: str) -> bool:
        """True when the budget has no children (workloads are submitted to leaves)."""
        return not self.children[key]

    def held(self, key: str) -> bool:
        """True when the budget or one of its ancestors is on hold (§3.7)."""
        return self._held[key]

    def capped_by(self, key: str) -> Budget | None:
        """The nearest budget on the path (the budget itself first) whose cap is reached."""
        return self._capped[key]

    def path_name(self, key: str) -> str:
        """``program/project`` style name from below the root."""
        names = [self.budgets[k].name for k in self.chain[key][1:]]
        return "/".join(names) if names else self.budgets[key].name

    def split(self, p: str, v: str) -> tuple[str, str] | None:
        """Children ``(A, B)`` of the lowest common ancestor of ``p`` and ``v`` containing each.

        None when one contains the other (including ``p == v``).
        """
        key = (p, v)
        try:
            return self._splits[key]
        except KeyError:
            pass
        cp, cv = self.chain[p], self.chain[v]
        out = None
        for i in range(min(len(cp), len(cv))):
            if cp[i] != cv[i]:
                out = (cp[i], cv[i])
                break
        self._splits[key] = out
        return out

    def split_shares(self, p: str) -> dict[str, tuple[str, str, int, int]]:
        """Every budget ``v`` with a :meth:`split` ``(A, B)`` from ``p``: ``(A, B, shares of A,
        shares of B)`` (rule 2's inputs but the loads), computed once per ``p``."""
        out = self._split_shares.get(p)
        if out is None:
            out = self._split_shares[p] = {}
            for v in self.budgets:
                split = self.split(p, v)
                if split is not None:
                    a, b = split
                    out[v] = (a, b, self.budgets[a].shares, self.budgets[b].shares)
        return out

    def rule2(self, load: Mapping[str, int], p: str, commitment: int, v: str) -> bool:
        """§3.4 rule 2: may work of budget ``p`` committing ``commitment`` GPU-seconds take
        allocated work of budget ``v``? ``r(A)`` with the commitment strictly below ``r(B)``,
        ``(A, B)`` = :meth:`split`; ``load`` is ``U + C`` per budget in GPU-seconds. Never for
        ``v == p`` (or one containing the other)."""
        if v == p:
            return False
        split = self.split(p, v)
        if split is None:
            return False
        a, b = split
        return (load[a] + commitment) * self.budgets[b].shares < load[b] * self.budgets[a].shares

    def live(self, busy: Iterable[str]) -> set[str]:
        """The budgets that count in their siblings' normalization (§3.7): every non-archived budget,
        and an archived one while it or a budget below it has unfinished work (``busy``: budgets
        with work; unknown keys ignored). The tick, the budgets page and the what-if all ask here."""
        busy_tree: set[str] = set()
        for b in busy:
            if b in self.chain:
                busy_tree.update(self.chain[b])
        return {k for k, b in self.budgets.items() if not b.archived or k in busy_tree}

    _normalized: tuple[frozenset[str], dict[str, Fraction]] | None = None
    """The last :meth:`normalized_shares` with its live set (a class default: a tree pickled
    before it was kept reads as having none)."""

    def normalized_shares(self, live: set[str]) -> dict[str, Fraction]:
        """``s(b)`` for every budget: shares over the live siblings' shares × ``s(parent)``.

        ``live`` holds the budgets that count in normalization: every non-archived
        budget, plus archived ones that still have work (§3.7). A budget outside
        ``live`` has dropped out: its share is 0 (entitled to nothing; it has nothing to rank),
        and so is every budget under it. Before (left40) it was computed as if it were live, a
        figure no surface should show: with its live siblings' it summed to more than its parent.
        Kept for the last live set (the tree is immutable, and a kept tree is asked again
        with the same set every pass); a copy is returned. Its oracle is
        :meth:`normalized_shares_walk` (``check``, tests/policy/test_policy_unit.py).
        """
        key = frozenset(live)
        kept = self._normalized
        if kept is None or kept[0] != key:
            kept = self._normalized = (key, self.normalized_shares_walk(key))
        return dict(kept[1])

    def normalized_shares_walk(self, live: Set[str]) -> dict[str, Fraction]:
        """:meth:`normalized_shares` computed down the tree."""
        out: dict[str, Fraction] = {}
        if self.root is None:
            return out
        out[self.root] = Fraction(1)
        stack = [self.root]
        while stack:
            node = stack.pop()
            kids = self.children[node]
            total = sum(self.budgets[k].shares for k in kids if k in live)
            for k in kids:
                out[k] = out[node] * Fraction(self.budgets[k].shares, total) if k in live and total else Fraction(0)
                stack.append(k)
        return out

    def roll_up(self, per_budget: Mapping[str, int]) -> dict[str, int]:
        """Sum a per-budget quantity over subtrees (a parent's usage is its children's sum)."""
        total = dict.fromkeys(self.budgets, 0)
        for key, value in per_budget.items():
            if key in total and value:
                for a in self.chain[key]:
                    total[a] += value
        return total


class SiblingRatio:
    """A sort key comparing siblings' ratios exactly: ``load / shares`` by cross-multiplication."""

    __slots__ = ("load", "shares")

    def __init__(self, load: int, shares: int) -> None:
        self.load = load
        self.shares = shares

    def __lt__(self, other: SiblingRatio) -> bool:
        return self.load * other.shares < other.load * self.shares

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SiblingRatio):
            return NotImplemented
        return self.load * other.shares == other.load * self.shares

    def __hash__(self) -> int:
        return hash(Fraction(self.load, self.shares))

    def __repr__(self) -> str:
        return f"SiblingRatio({self.load}/{self.shares})"
