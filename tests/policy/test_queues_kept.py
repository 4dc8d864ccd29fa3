"""What the speed work of issue 12 keeps or shortcuts, against a plain computation.

- ``Dispatcher.skip_run`` (and ``skip_run_to``, the run's end found in one call) is the loop
  ``next(); done(w, False)`` over the skipped workloads;
- ``PendingIndex`` (kept between passes by difference, by comparing lists or by following a
  ``PendingLog``'s changes) equals ``queues.group`` of the same pending workloads, over random
  sequences of arrivals, departures and replacements;
- ``QueueBuilder`` classifies a budget as a whole only where workload by workload says the same
  (reasons included);
- ``submission_sorted`` (three stable sorts) is ``sorted`` by ``submission_order``;
- the gang reason table's set tests (``reason_tables.gang_level_by_sets``) give ``reason_tables.gang_level``;
- ``Pass._skipped_like`` (a run of one shape skipped at once, with the first one's reason) decides
  what ``Pass._skipped`` asked of every workload decides, reasons included; without reasons
  (``Pass._run_end_bare``, the least M skipped per shape, a run in one loop) too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.contract as contract
from bench.synth import make_settled
from scheduler.policy import Decisions, IncrementalScheduler, Snapshot, reason_tables, schedule
from scheduler.policy.core import Pass
from scheduler.policy.dispatch import Dispatcher
from scheduler.policy.pending import PendingIndex, PendingLog
from scheduler.policy.queues import QueueBuilder, group, submission_order, submission_sorted
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Budget, OnCap, PendingReason, Workload
from tests.policy.builders import tree
from tests.policy.oracle_harness import crowded_snapshot

LEAVES = ("a/x", "a/y", "b", "c/z")


def _workloads(draw: st.DrawFn, n: int) -> list[Workload]:
    out = []
    for i in range(n):
        out.append(
            Workload(
                f"w{i}",
                draw(st.sampled_from(LEAVES)),
                draw(st.sampled_from((1, 2, 8, 16))),
                draw(st.sampled_from(("H100", "A100"))),
                draw(st.sampled_from((0, 600, 3600))),
                draw(st.integers(0, 5)),
                i,
                waiting=draw(st.sampled_from((False, False, False, True))),
                hold=draw(st.sampled_from(("", "", "", "", "user", "admin"))),
            )
        )
    return out


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[Workload], dict[str, int], list[int]]:
    ws = _workloads(draw, draw(st.integers(1, 30)))
    load = {k: draw(st.integers(0, 50)) for k in ("org", "a", "c", *LEAVES)}
    skip = draw(st.lists(st.integers(0, 29), max_size=30))
    return ws, load, skip


def _order(ws: list[Workload], load: dict[str, int], skip: set[int], fast: bool) -> list[str]:
    budgets = BudgetTree(tree(*LEAVES))
    queues: dict[str, list[Workload]] = {}
    for w in sorted(ws, key=submission_order):
        queues.setdefault(w.budget, []).append(w)
    disp = Dispatcher(budgets, load, queues, in_order=True)
    seen: list[str] = []

    def skipped(w: Workload) -> bool:
        seen.append(w.id)
        return w.seq in skip

    def end(q: list[Workload], i: int) -> int:
        while i < len(q) and skipped(q[i]):
            i += 1
        return i

    while (w := disp.next()) is not None:
        seen.append(w.id)
        if w.seq in skip and fast:
            if w.seq % 2:
                disp.skip_run(w, skipped)
            else:
                disp.skip_run_to(w, end)
            continue
        admitted = w.seq % 3 == 0 and w.seq not in skip
        disp.done(w, admitted)
        if admitted:
            load[w.budget] += w.gpus
            disp.loads_changed(w.budget)
    return seen


@settings(max_examples=150, deadline=None)
@given(runs())
def test_skip_run_is_the_plain_loop(case: tuple[list[Workload], dict[str, int], list[int]]) -> None:
    ws, load, skip = case
    plain = _order(ws, dict(load), set(skip), fast=False)
    fast = _order(ws, dict(load), set(skip), fast=True)
    # the fast loop asks skipped() once for each workload it passes over, and stops at the first
    # it does not skip: that one is then returned by next() (seen twice); drop those repeats
    dedup = [wid for i, wid in enumerate(fast) if i == 0 or wid != fast[i - 1]]
    assert dedup == plain


@st.composite
def histories(draw: st.DrawFn) -> list[list[Workload]]:
    pool = _workloads(draw, 25)
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        chosen = draw(st.lists(st.integers(0, 24), unique=True, max_size=25))
        step = []
        for i in chosen:
            w = pool[i]
            if draw(st.booleans()):  # a new object of the same workload (the engine re-creates views)
                w = Workload(w.id, w.budget, w.gpus, w.model, w.min_runtime, w.submitted_at, w.seq)
                pool[i] = w
            step.append(w)
        steps.append(step)
    return steps


@settings(max_examples=100, deadline=None)
@given(histories())
def test_pending_index_equals_a_fresh_grouping(steps: list[list[Workload]]) -> None:
    """Both ways of keeping the index: comparing whole lists (``sync``) and following a
    producer's changes (``follow``, scheduler/policy/pending.py)."""
    compared, followed, log = PendingIndex(), PendingIndex(), PendingLog()
    before: dict[str, Workload] = {}
    seen = {id(compared): ({}, -1), id(followed): ({}, -1)}  # index -> (least, version) last step
    for i, step in enumerate(steps):
        pending = {w.id: w for w in step}
        for w in before.values():
            if pending.get(w.id) is not w:
                log.remove(w)
        for w in pending.values():
            if before.get(w.id) is not w:
                log.add(w)
        before = pending
        changes = log.cut()
        compared.sync(dict(pending))
        if not followed.follow(changes):
            assert i == 0  # only the first changes start the following
            followed.sync(dict(pending))
            followed.start_following(changes)
        fresh = group(sorted(step, key=submission_order))
        for index in (compared, followed):
            kept = index.budgets
            assert set(kept) == set(fresh)
            for b, bp in fresh.items():
                k = kept[b]
                assert [id(w) for w in k.ordered] == [id(w) for w in bp.ordered]
                assert [id(w) for w in k.allocated] == [id(w) for w in bp.allocated]
                assert [id(w) for w in k.unallocated] == [id(w) for w in bp.unallocated]
                assert k.shapes == bp.shapes
            assert index.by_id == pending
            assert set(index.shapes) == {(PendingIndex.coarse(w), w.min_runtime) for w in step}
            least: dict[object, int] = {}
            for w in step:
                c = PendingIndex.coarse(w)
                least[c] = min(least.get(c, w.min_runtime), w.min_runtime)
            assert index.least == least
            # the screen's shapes kept until least changes, against the walk; least changed ->
            # a new version (the key of the screen's kept requests)
            kept_list, walked = index.screen_shapes(), index.screen_shapes_walk()
            assert [id(w) for w in kept_list] == [id(w) for w in walked]
            last_least, last_version = seen[id(index)]
            assert last_least == least or index.least_version != last_version
            seen[id(index)] = (dict(least), index.least_version)
    assert followed.followed == max(0, len(steps) - 1)


@st.composite
def classified(draw: st.DrawFn) -> tuple[list[Budget], list[Workload], set[tuple[str, int]]]:
    budgets = []
    for b in tree(*LEAVES):
        if b.key in LEAVES or b.key in ("a", "c"):
            b = Budget(
                b.key,
                b.name,
                b.parent,
                hold=draw(st.booleans()),
                capped=draw(st.booleans()),
                on_cap=draw(st.sampled_from(list(OnCap))),
            )
        budgets.append(b)
    bad = set(draw(st.lists(st.sampled_from([(m, g) for m in ("H100", "A100") for g in (1, 2, 8, 16)]), max_size=2)))
    return budgets, _workloads(draw, draw(st.integers(0, 30))), bad


@settings(max_examples=150, deadline=None)
@given(classified())
def test_whole_budgets_classify_as_each_workload(
    case: tuple[list[Budget], list[Workload], set[tuple[str, int]]],
) -> None:
    budgets, ws, bad = case
    grouped = group(sorted(ws, key=submission_order))
    out = []
    for with_reasons, each in ((False, False), (True, False), (True, True)):
        reasons: dict[str, PendingReason] = {}
        qb = QueueBuilder(
            BudgetTree(budgets),
            lambda m, g, *_resources: (m, g) in bad,
            lambda w, r, _d, out=reasons: out.__setitem__(w.id, r),
            lambda w, out=reasons: (
                (w.waiting or bool(w.hold))
                and (out.__setitem__(w.id, PendingReason.DEPENDENCY if w.waiting else PendingReason.HELD) or True)
            ),
            with_reasons=with_reasons,
        )
        if each:  # the plain classification: every budget workload by workload
            for b in sorted(grouped):
                if b in qb.tree.budgets:
                    qb._each(b, grouped[b].ordered)
            alloc, unalloc = qb.alloc_q, qb.unalloc_q
        else:
            alloc, unalloc = qb.build(grouped)
        ids = (
            {k: [w.id for w in q] for k, q in alloc.items() if q},
            {k: [w.id for w in q] for k, q in unalloc.items() if q},
        )
        out.append((ids, qb.unfunded, reasons if with_reasons else None))
    assert out[0][:2] == out[1][:2] == out[2][:2]
    assert out[1][2] == out[2][2]  # with reasons, the same reasons as workload by workload


def _plain(snap: Snapshot, monkeypatch: pytest.MonkeyPatch) -> Decisions:
    """``schedule`` with every skipped workload asked of :meth:`Pass._skipped` itself (a run
    without reasons too: ``Pass._run_end_bare`` replaced by the plain loop)."""

    def plain_end(self: Pass, first: Workload) -> Callable[[list[Workload], int], int]:
        def end(q: list[Workload], i: int) -> int:
            while i < len(q) and self._skipped(q[i]):
                i += 1
            return i

        return end

    with monkeypatch.context() as m:
        m.setattr(Pass, "_skipped_like", lambda self, first: self._skipped)
        m.setattr(Pass, "_run_end_bare", plain_end)
        return schedule(snap)


@pytest.mark.parametrize("size", [(3, 60, 1), (12, 400, 2), (40, 1500, 3)])
def test_skipped_runs_decide_as_each_workload(size: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    hosts, workloads, seed = size
    for after in (600, 3600):
        snap = make_settled(hosts, workloads, seed=seed, after=after).snapshot()
        assert snap.with_reasons
        fast = schedule(snap)
        assert len(fast.pending) > workloads // 3  # a busy cluster: long runs of blocked workloads
        assert fast == _plain(snap, monkeypatch)


def test_skipped_runs_decide_as_each_workload_crowded(monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(300):
        snap = crowded_snapshot(seed)
        assert schedule(snap) == _plain(snap, monkeypatch), seed


@pytest.mark.parametrize("size", [(3, 60, 1), (12, 400, 2), (40, 1500, 3)])
def test_skipped_runs_without_reasons_decide_as_each_workload(
    size: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without reasons (simulations) a run skips by the least M skipped per shape
    (``Pass._run_end_bare``, the whole run in one loop), or, in ``IncrementalScheduler``, reads it
    from the kept skip index (scheduler/policy/skip_index.py): the same decisions as asking
    ``_skipped`` of each workload."""
    hosts, workloads, seed = size
    for after in (600, 3600):
        snap = replace(make_settled(hosts, workloads, seed=seed, after=after).snapshot(), with_reasons=False)
        plain = _plain(snap, monkeypatch)
        assert schedule(snap) == plain
        assert IncrementalScheduler(check=True)(snap) == plain
    for seed in range(300):
        snap = replace(crowded_snapshot(seed), with_reasons=False)
        plain = _plain(snap, monkeypatch)
        assert schedule(snap) == plain, seed
        assert IncrementalScheduler(check=True)(snap) == plain, seed


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from(("a", "b", "c", "d"))),
        max_size=40,
    )
)
def test_submission_sorted_is_sorted_by_submission_order(keys: list[tuple[int, int, str]]) -> None:
    ws = [Workload(wid, "b", 1, "H100", 0, at, seq) for at, seq, wid in keys]  # ties and repeats included
    assert [id(w) for w in submission_sorted(ws)] == [id(w) for w in sorted(ws, key=submission_order)]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from("abcdef"), st.sampled_from((contract.NOW, contract.FORBIDDEN, contract.NEVER)), min_size=6
    ),
    st.dictionaries(st.sampled_from("abcdef"), st.tuples(st.integers(0, 3), st.integers(0, 3))),
    st.integers(0, 4),
)
def test_gang_level_by_sets_is_the_plain_level(
    cls: dict[str, int], per: dict[str, tuple[int, int]], unalloc: int
) -> None:
    """A host's ``Standing.agg`` entry ``per`` (zero entries included) and unallocated GPUs."""
    items = [(v, c[1] > 0) for v, c in per.items() if c[0] or c[1]]
    plain = reason_tables.gang_level(cls, 1 if unalloc else 0, items)
    never = frozenset(v for v, c in cls.items() if c == contract.NEVER)
    forbidden = frozenset(v for v, c in cls.items() if c == contract.FORBIDDEN)
    held = frozenset(v for v, _ in items)
    busy = 1 if unalloc or held else 0
    by_sets = reason_tables.gang_level_by_sets(never, forbidden, False, held, any(c[1] > 0 for c in per.values()), busy)
    assert by_sets == plain
    assert reason_tables.gang_level_by_sets(never, forbidden, True, held, False, busy) == 4


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(("x", "y")), st.sampled_from((1, 2)), st.integers(0, 5)), min_size=1, max_size=14
    ),
    st.lists(st.integers(0, 13), max_size=60),
)
def test_kept_screen_shapes_are_the_walk(shapes: list[tuple[str, int, int]], ops: list[int]) -> None:
    """``PendingIndex.screen_shapes`` (kept until the least M of some coarse shape changes) against
    its walk after every arrival or departure, on few coarse shapes holding many Ms (a shape's
    least leaving while others stay); every change of ``least`` gives a new ``least_version``."""
    pool = [
        Workload(f"w{i}", LEAVES[0] if b == "x" else LEAVES[1], gpus, "H100", m, i, i)
        for i, (b, gpus, m) in enumerate(shapes)
    ]
    index, pending = PendingIndex(), {}
    for op in ops:
        w = pool[op % len(pool)]
        if w.id in pending:
            del pending[w.id]
        else:
            pending[w.id] = w
        least, version = dict(index.least), index.least_version
        index.sync(dict(pending))
        assert [id(x) for x in index.screen_shapes()] == [id(x) for x in index.screen_shapes_walk()]
        assert index.least == least or index.least_version != version
