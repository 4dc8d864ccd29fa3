"""Iterative hierarchical dispatch order (DESIGN.md §3.2).

Budgets are ordered top-down: among the children of one parent, lower ratio
first, ties to the budget whose oldest pending workload was submitted earlier,
then by name; the leaf order is the depth-first walk of that ordering (Slurm's
Fair Tree, fair_tree.html). After each admission the caller updates loads and
the order is recomputed along one root-to-leaf path only: a lazy heap per inner
node keeps the cost at O(depth × log(children)) per step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from operator import attrgetter

from scheduler.policy.tree import BudgetTree, SiblingRatio
from scheduler.policy.types import Workload

NEVER = (1 << 62, 1 << 62)
"""Oldest-pending key of a subtree with nothing pending."""


submission_key: Callable[[Workload], tuple[int, int]] = attrgetter("submitted_at", "seq")
"""Order within a budget: original submission time, then submission sequence number."""


class Dispatcher:
    """Yields pending workloads in dispatch order while the caller admits or skips them.

    ``queues`` maps a leaf budget key to its workloads; ``load`` maps every budget
    key to ``U + C`` in GPU-seconds and is read live (the caller mutates it and
    then calls :meth:`loads_changed`).
    """

    def __init__(
        self,
        tree: BudgetTree,
        load: Mapping[str, int],
        queues: Mapping[str, list[Workload]],
        *,
        in_order: bool = False,
    ) -> None:
        """``in_order``: every queue is already in submission order (the pass builds them so)."""
        self.tree = tree
        self.load = load
        if in_order:
            self.queues = {k: v for k, v in queues.items() if v and k in tree.budgets}
        else:
            self.queues = {k: sorted(v, key=submission_key) for k, v in queues.items() if v and k in tree.budgets}
        self.pos = dict.fromkeys(self.queues, 0)
        self.admitted: set[str] = set()
        self.first_open = dict.fromkeys(self.queues, 0)
        # Nodes that have queued work somewhere below them.
        self.active_children: dict[str, list[str]] = {}
        self.live: set[str] = set()
        self.oldest: dict[str, tuple[int, int]] = {}
        self.version: dict[str, int] = {}
        for leaf in self.queues:
            chain = tree.chain[leaf]
            for parent, child in zip(chain, chain[1:], strict=False):
                kids = self.active_children.setdefault(parent, [])
                if child not in kids:
                    kids.append(child)
            for node in chain:
                self.live.add(node)
        for leaf, q in self.queues.items():
            self.oldest[leaf] = submission_key(q[0])
        for node in self._bottom_up():
            if node not in self.queues:
                self.oldest[node] = min(self.oldest[c] for c in self.active_children[node])
        self.heaps: dict[str, list[tuple[SiblingRatio, tuple[int, int], str, int, str]]] = {}
        for parent, kids in self.active_children.items():
            heap = []
            for c in kids:
                self.version[c] = 0
                heap.append(self._entry(c))
            heapq.heapify(heap)
            self.heaps[parent] = heap

    def _bottom_up(self) -> list[str]:
        nodes = [n for n in self.live]
        nodes.sort(key=lambda n: -len(self.tree.chain[n]))
        return nodes

    def _entry(self, node: str) -> tuple[SiblingRatio, tuple[int, int], str, int, str]:
        b = self.tree.budgets[node]
        return (SiblingRatio(self.load[node], b.shares), self.oldest[node], b.name, self.version[node], node)

    def _refresh(self, node: str) -> None:
        parent = self.tree.budgets[node].parent
        self.version[node] = self.version.get(node, 0) + 1
        if parent is not None and node in self.live:
            heapq.heappush(self.heaps[parent], self._entry(node))

    def _best_child(self, parent: str) -> str | None:
        heap = self.heaps.get(parent)
        while heap:
            entry = heap[0]
            node = entry[4]
            if node in self.live and entry[3] == self.version[node]:
                return node
            heapq.heappop(heap)
        return None

    def next(self) -> Workload | None:
        """The next workload to consider, or None when every queue is exhausted."""
        root = self.tree.root
        if root is None or root not in self.live:
            return None
        node = root
        while node not in self.queues:
            child = self._best_child(node)
            if child is None:  # pragma: no cover - live nodes always have a live child
                return None
            node = child
        return self.queues[node][self.pos[node]]

    def done(self, w: Workload, admitted: bool) -> None:
        """Mark the workload returned by :meth:`next` as handled (admitted or skipped)."""
        leaf = w.budget
        self.pos[leaf] += 1
        changed_oldest = False
        if admitted:
            self.admitted.add(w.id)
            q = self.queues[leaf]
            i = self.first_open[leaf]
            while i < len(q) and q[i].id in self.admitted:
                i += 1
            self.first_open[leaf] = i
            new = submission_key(q[i]) if i < len(q) else NEVER
            if new != self.oldest[leaf]:
                self.oldest[leaf] = new
                changed_oldest = True
        if self.pos[leaf] >= len(self.queues[leaf]):
            self._exhaust(leaf)
        if changed_oldest:
            self._propagate_oldest(leaf)

    def skip_run(self, w: Workload, skipped: Callable[[Workload], bool]) -> None:
        """:meth:`done` (not admitted) for ``w``, the workload :meth:`next` returned, and then for
        each following workload of its budget's queue for which ``skipped`` is true (it handles
        the workload and says so), stopping at the first false.

        Exactly the loop ``next(); done(x, False)`` over those workloads: a skip changes nothing
        :meth:`next` reads but the position in this queue, so it keeps returning this queue's
        next workload until the queue ends; ``skipped`` must change no load (the caller's rule).
        """
        leaf = w.budget
        q = self.queues[leaf]
        n = len(q)
        i = self.pos[leaf] + 1
        while i < n and skipped(q[i]):
            i += 1
        self.pos[leaf] = i
        if i >= n:
            self._exhaust(leaf)

    def skip_run_to(self, w: Workload, end: Callable[[list[Workload], int], int]) -> None:
        """:meth:`skip_run` with the run's end found by ``end(queue, i)``: the index of the first
        workload from ``i`` on that is not skipped (``len(queue)`` when none), handling each
        skipped one as ``skipped`` does in :meth:`skip_run` (one call for the run)."""
        leaf = w.budget
        q = self.queues[leaf]
        i = end(q, self.pos[leaf] + 1)
        self.pos[leaf] = i
        if i >= len(q):
            self._exhaust(leaf)

    def _exhaust(self, leaf: str) -> None:
        node: str | None = leaf
        while node is not None:
            if node in self.queues:
                dead = self.pos[node] >= len(self.queues[node])
            else:
                dead = not any(c in self.live for c in self.active_children[node])
            if not dead:
                break
            self.live.discard(node)
            node = self.tree.budgets[node].parent

    def _propagate_oldest(self, leaf: str) -> None:
        chain = self.tree.chain[leaf]
        for node in reversed(chain[:-1]):
            new = min(self.oldest[c] for c in self.active_children[node])
            if new == self.oldest[node]:
                break
            self.oldest[node] = new
        self.loads_changed(leaf)

    def loads_changed(self, budget: str) -> None:
        """Re-rank the path from ``budget`` to the root after its load (or oldest key) changed."""
        for node in self.tree.chain[budget][1:]:
            if node in self.live:
                self._refresh(node)
