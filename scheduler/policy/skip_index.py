"""The skipped runs' index, kept between passes (docs/policy.md "How it stays fast").

A run of the allocated dispatch without reasons (skips.py, ``Dispatcher.skip_run_to``) ends at
the first workload of its budget's queue that is not skipped: one of an array group, one with a
nomination, or one whose M is below its shape's *threshold* — the least M of the pass's failures
outright of that (budget, model, gang, CPUs, memory) with no more GPUs (``memo.outright``): a
workload of shape (model, GPUs, CPUs, memory) is skipped exactly when its M reaches it.

:class:`SkipIndex` cuts one budget's allocated pending workloads (``BudgetPending.allocated``, in
submission order) into blocks of consecutive workloads; each block knows, per shape, the least M
of its workloads, and how many belong to an array group. A block holding no group member, whose
every shape's least M reaches that shape's threshold, is skipped whole without reading its
workloads; the others are read workload by workload. ``PendingIndex`` keeps it with the lists
(every arrival and departure), so a pass pays for the blocks it passes, not for the workloads.

Invalidation: none across passes — the index reads only the workloads (immutable values) and
their order, and changes exactly when the list does; the pass's failures and nominations are
applied when a run is read. ``IncrementalScheduler(check=True)`` compares it with a fresh
cut of the list on every pass (:meth:`SkipIndex.differences`).

A run's first stop is not kept between passes: the failures' floors (``SkipRuns._outright_floor``)
move the thresholds pass to pass, so an answer kept per start and threshold key (pol31's
``first_stop_kept``) stood 1 time in 100 at day 100 of the whole trace and its key cost every run
more than the walks it saved (docs/benchmarks/speed.md, pol31b); the spans make a walk cheap.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from operator import attrgetter
from typing import Any

from scheduler.policy.types import Workload

Shape = tuple[str, int, int | None, int | None]
"""(model, GPUs, CPUs, memory): what a workload's threshold depends on besides its budget."""

shape_of: Callable[[Workload], Shape] = attrgetter("model", "gpus", "cpus", "memory")
_order = attrgetter("submitted_at", "seq", "id")  # queues.submission_order (no import: queues imports this)

BLOCK = 8
"""Blocks are split above 2 × BLOCK workloads and merged with a neighbour below BLOCK / 4."""

SPAN = 16
"""Blocks per span: a span's summary (each shape's least M, group members) lets a run pass
SPAN blocks at once (:meth:`SkipIndex.first_stop`)."""


class _Span:
    """The summary of consecutive blocks: per shape the least M of their workloads outside
    groups, and how many are group members (a block's own fields, over several)."""

    __slots__ = ("groups", "least")

    def __init__(self, blocks: Iterable[_Block]) -> None:
        self.least: dict[Shape, int] = {}
        self.groups = 0
        least = self.least
        for b in blocks:
            self.groups += b.groups
            for s, m in b.least.items():
                if m < least.get(s, m + 1):
                    least[s] = m

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Span) and (self.least, self.groups) == (other.least, other.groups)

    __hash__ = None  # type: ignore[assignment]


def _reads(b: _Block | _Span, threshold: Mapping[Shape, int]) -> bool:
    """True unless ``b`` holds no group member and every shape's least M reaches its threshold:
    only then may a run pass it without reading its workloads."""
    if b.groups:
        return True
    for s, m in b.least.items():  # noqa: SIM110 (a loop, not a generator per call)
        if m < threshold[s]:
            return True
    return False


class _Block:
    __slots__ = ("groups", "least", "ws")

    def __init__(self, ws: list[Workload]) -> None:
        self.ws = ws
        self.least: dict[Shape, int] = {}
        self.groups = 0
        for w in ws:
            self.count(w)

    def count(self, w: Workload) -> None:
        if w.group is not None:
            self.groups += 1
            return
        s = shape_of(w)
        m = self.least.get(s)
        if m is None or w.min_runtime < m:
            self.least[s] = w.min_runtime

    def uncount(self, w: Workload) -> None:
        if w.group is not None:
            self.groups -= 1
            return
        s = shape_of(w)
        if self.least[s] == w.min_runtime:  # the least may have left: read the block again
            left = [x.min_runtime for x in self.ws if x.group is None and shape_of(x) == s]
            if left:
                self.least[s] = min(left)
            else:
                del self.least[s]


class SkipIndex:
    """One budget's allocated pending workloads in blocks (module docstring)."""

    __slots__ = ("blocks", "derived", "firsts", "spans", "whole")

    def __init__(self, ordered: Iterable[Workload] = ()) -> None:
        ws = list(ordered)
        self.blocks = [_Block(ws[i : i + BLOCK]) for i in range(0, len(ws), BLOCK)]
        self.firsts = [_order(b.ws[0]) for b in self.blocks]
        # the least M of each shape over the whole list, group members included (least_all),
        # built when first read, kept by each add, dropped by the removal of a least
        self.whole: dict[Shape, int] | None = None
        # the summary of blocks [k·SPAN, (k+1)·SPAN) at k, built when first read (None: to build
        # again); a change of a block drops its span's, a change of the blocks' count from there on
        self.spans: list[_Span | None] = []
        # what a reader derived from the list (the tail's rest of the queue, tail.queue_rest)
        # with the key it read besides: dropped at every arrival and departure
        self.derived: tuple[Any, ...] | None = None

    def _changed(self, i: int, *, count: bool = False) -> None:
        """Block ``i`` changed (``count``: blocks were added or removed from ``i`` on)."""
        k = i // SPAN
        if count:
            del self.spans[k:]
        elif k < len(self.spans):
            self.spans[k] = None

    def _span(self, k: int) -> _Span:
        spans = self.spans
        while len(spans) <= k:
            spans.append(None)
        got = spans[k]
        if got is None:
            got = spans[k] = _Span(self.blocks[k * SPAN : (k + 1) * SPAN])
        return got

    def __len__(self) -> int:
        return sum(len(b.ws) for b in self.blocks)

    def add(self, w: Workload) -> None:
        self.derived = None
        whole = self.whole
        if whole is not None and w.min_runtime < whole.get(s := shape_of(w), w.min_runtime + 1):
            whole[s] = w.min_runtime
        key = _order(w)
        if not self.blocks:
            self.blocks.append(_Block([w]))
            self.firsts.append(key)
            self._changed(0, count=True)
            return
        i = max(0, bisect_right(self.firsts, key) - 1)
        b = self.blocks[i]
        insort(b.ws, w, key=_order)
        b.count(w)
        if b.ws[0] is w:
            self.firsts[i] = key
        if len(b.ws) > 2 * BLOCK:
            half = len(b.ws) // 2
            self.blocks[i : i + 1] = [_Block(b.ws[:half]), _Block(b.ws[half:])]
            self.firsts.insert(i + 1, _order(b.ws[half]))
            self._changed(i, count=True)
        else:
            self._changed(i)

    def remove(self, w: Workload) -> None:
        self.derived = None
        if self.whole is not None and self.whole.get(shape_of(w)) == w.min_runtime:
            self.whole = None  # the least of its shape may have left: read the blocks again
        key = _order(w)
        i = bisect_right(self.firsts, key) - 1
        b = self.blocks[i]
        j = bisect_left(b.ws, key, key=_order)
        del b.ws[j]
        b.uncount(w)
        if not b.ws:
            del self.blocks[i], self.firsts[i]
            self._changed(i, count=True)
            return
        if j == 0:
            self.firsts[i] = _order(b.ws[0])
        self._changed(i)
        if len(b.ws) < BLOCK // 4:
            self._merge(i)

    def _merge(self, i: int) -> None:
        """Merge block ``i`` into a neighbour when both fit in one block."""
        for a in (i - 1, i):
            if a >= 0 and a + 1 < len(self.blocks) and len(self.blocks[a].ws) + len(self.blocks[a + 1].ws) <= 2 * BLOCK:
                self.blocks[a : a + 2] = [_Block(self.blocks[a].ws + self.blocks[a + 1].ws)]
                del self.firsts[a + 1]
                self._changed(a, count=True)
                return

    def first_stop(self, start: Workload, threshold: Mapping[Shape, int]) -> Workload | None:
        """The first workload from ``start`` on (in submission order) that is in an array group
        or whose M is below ``threshold[its shape]``; None when there is none. A span of blocks
        whose summary needs no reading (:func:`_reads`) is passed at once; its oracle is
        :meth:`first_stop_walk` (block by block: ``check`` and tests/policy/test_skip_index.py)."""
        key = _order(start)
        i = bisect_right(self.firsts, key) - 1
        blocks = self.blocks
        j = bisect_left(blocks[i].ws, key, key=_order)
        n = len(blocks)
        while i < n:
            if not i % SPAN and not j and not _reads(self._span(i // SPAN), threshold):
                i += SPAN
                continue
            b = blocks[i]
            if _reads(b, threshold):
                for w in islice(b.ws, j, None):
                    if w.group is not None or w.min_runtime < threshold[shape_of(w)]:
                        return w
            i, j = i + 1, 0
        return None

    def first_stop_walk(self, start: Workload, threshold: Mapping[Shape, int]) -> Workload | None:
        """:meth:`first_stop` block by block, no span summary read (its oracle)."""
        key = _order(start)
        i = bisect_right(self.firsts, key) - 1
        blocks = self.blocks
        b = blocks[i]
        j = bisect_left(b.ws, key, key=_order)
        while True:
            # the block is read unless it holds no group member and every shape's least M
            # reaches its threshold (the test inline: one call less per block passed)
            read = b.groups
            if not read:
                for s, m in b.least.items():
                    if m < threshold[s]:
                        read = 1
                        break
            if read:
                for w in islice(b.ws, j, None):
                    if w.group is not None or w.min_runtime < threshold[shape_of(w)]:
                        return w
            i += 1
            if i == len(blocks):
                return None
            b, j = blocks[i], 0

    def least_all(self) -> dict[Shape, int]:
        """Per shape, the least M of the whole list's workloads, array-group members included:
        what every workload the dispatch may still reach in this queue asks at most
        (``tail.Tail``). Kept: an arrival lowers its shape's least, a departure that was its
        shape's least makes it read the blocks again (:meth:`differences` compares)."""
        whole = self.whole
        if whole is None:
            whole = self.whole = _least_all(self.blocks)
        return whole

    def differences(self, allocated: list[Workload]) -> list[str]:
        """How this index differs from a fresh cut of ``allocated`` (empty when it does not)."""
        out = []
        flat = [w for b in self.blocks for w in b.ws]
        if len(flat) != len(allocated) or any(a is not b for a, b in zip(flat, allocated, strict=False)):
            out.append("workloads")
        for b, first in zip(self.blocks, self.firsts, strict=True):
            fresh = _Block(b.ws)
            if not b.ws or len(b.ws) > 2 * BLOCK or first != _order(b.ws[0]):
                out.append(f"block at {first}")
            if (b.least, b.groups) != (fresh.least, fresh.groups):
                out.append(f"block at {first}: {b.least, b.groups} != {fresh.least, fresh.groups}")
        if len(self.firsts) != len(self.blocks):
            out.append("firsts")
        if self.whole is not None and self.whole != _least_all(self.blocks):
            out.append("least over the list")
        for k, span in enumerate(self.spans):
            if span is not None and span != (fresh_span := _Span(self.blocks[k * SPAN : (k + 1) * SPAN])):
                out.append(f"span {k}: {span.least, span.groups} != {fresh_span.least, fresh_span.groups}")
        return out


def _least_all(blocks: list[_Block]) -> dict[Shape, int]:
    """Per shape, the least M over every block (group members read one by one)."""
    out: dict[Shape, int] = {}
    for b in blocks:
        if b.groups:
            for w in b.ws:
                s = shape_of(w)
                if w.min_runtime < out.get(s, w.min_runtime + 1):
                    out[s] = w.min_runtime
        else:
            for s, m in b.least.items():
                if m < out.get(s, m + 1):
                    out[s] = m
    return out


__all__ = ["BLOCK", "Shape", "SkipIndex", "shape_of"]
