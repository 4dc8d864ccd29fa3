"""The skipped runs' index (scheduler/policy/skip_index.py) against a plain walk of its list.

Random arrivals and departures (blocks split and merged: ``BLOCK`` made small), after each: the
index equals a fresh cut of the list (``differences``), and from every start its first stop is
the plain walk's for random thresholds.
"""

from __future__ import annotations

from bisect import insort

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.skip_index as skip_index
from scheduler.policy.queues import submission_order
from scheduler.policy.skip_index import Shape, SkipIndex, shape_of
from scheduler.policy.types import Workload

SHAPES = [("H100", 1, None, None), ("H100", 2, None, None), ("A100", 1, None, None), ("H100", 1, 4, None)]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Workload], list[int], dict[Shape, int]]:
    pool = []
    for i in range(draw(st.integers(1, 60))):
        model, gpus, cpus, memory = draw(st.sampled_from(SHAPES))
        pool.append(
            Workload(
                f"w{i}",
                "b",
                gpus,
                model,
                draw(st.integers(1, 9)),
                draw(st.integers(0, 20)),
                i,
                cpus=cpus,
                memory=memory,
                group=draw(st.sampled_from((None, None, None, None, None, "g"))),
            )
        )
    ops = draw(st.lists(st.integers(0, len(pool) - 1), max_size=120))  # each toggles one workload
    thresholds = {s: draw(st.integers(0, 11)) for s in SHAPES}
    return pool, ops, thresholds


def _plain(ordered: list[Workload], i: int, thresholds: dict[Shape, int]) -> Workload | None:
    for w in ordered[i:]:
        if w.group is not None or w.min_runtime < thresholds[shape_of(w)]:
            return w
    return None


@pytest.mark.parametrize(("block", "span"), [(1, 1), (1, 4), (2, 3), (8, 16), (32, 2)])
@settings(max_examples=120, deadline=None)
@given(histories())
def test_skip_index_is_the_plain_walk(
    block: int, span: int, history: tuple[list[Workload], list[int], dict[Shape, int]]
) -> None:
    """Spans of ``span`` blocks: a run passes a span whose summary needs no reading at once."""
    pool, ops, thresholds = history
    old = skip_index.BLOCK, skip_index.SPAN
    skip_index.BLOCK, skip_index.SPAN = block, span
    try:
        index, ordered = SkipIndex(), []
        present: set[int] = set()
        for op in ops:
            w = pool[op]
            if op in present:
                present.discard(op)
                ordered.remove(w)
                index.remove(w)
            else:
                present.add(op)
                insort(ordered, w, key=submission_order)
                index.add(w)
            assert index.differences(ordered) == []
            for i, start in enumerate(ordered):
                assert index.first_stop(start, thresholds) is _plain(ordered, i, thresholds)
            least: dict[Shape, int] = {}  # the least M per shape over the list, groups included
            for w in ordered:
                least[shape_of(w)] = min(least.get(shape_of(w), w.min_runtime), w.min_runtime)
            assert index.least_all() == least
            assert index.differences(ordered) == []  # with the kept least
        assert SkipIndex(ordered).differences(ordered) == []
    finally:
        skip_index.BLOCK, skip_index.SPAN = old


def test_a_span_kept_after_its_blocks_changed_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A span's summary not dropped when one of its blocks changes (a skipped invalidation):
    ``differences`` (compared under check) names it and the run passes a workload it must stop at."""
    monkeypatch.setattr(skip_index, "BLOCK", 1)
    monkeypatch.setattr(skip_index, "SPAN", 4)
    ws = [Workload(f"w{i}", "b", 1, "H100", 5, i, i) for i in range(12)]
    index = SkipIndex(ws)
    monkeypatch.setattr(SkipIndex, "_changed", lambda self, i, count=False: None)
    thresholds = {("H100", 1, None, None): 5}
    assert index.first_stop(ws[0], thresholds) is None  # every span read: none needs reading
    short = Workload("x", "b", 1, "H100", 1, 1, 100)
    index.add(short)  # into block 1 (span 0), below the threshold: the run must stop there
    assert index.differences(sorted([*ws, short], key=submission_order)) != []
    assert index.first_stop(ws[0], thresholds) is None  # the stale span passes it
    assert index.first_stop_walk(ws[0], thresholds) is short


@settings(max_examples=120, deadline=None)
@given(histories(), st.lists(st.dictionaries(st.sampled_from(SHAPES), st.integers(0, 11)), min_size=1, max_size=4))
def test_first_stops_between_changes_are_the_plain_walk(
    history: tuple[list[Workload], list[int], dict[Shape, int]], others: list[dict[Shape, int]]
) -> None:
    """``first_stop`` between arrivals and departures (the spans kept across them), under
    thresholds that come back as a backlog's failures do pass after pass: every answer is the
    plain walk's."""
    pool, ops, base = history
    tables = [base, *({**base, **o} for o in others)]
    index, ordered = SkipIndex(), []
    present: set[int] = set()
    for k, op in enumerate(ops):
        w = pool[op]
        if op in present:
            present.discard(op)
            ordered.remove(w)
            index.remove(w)
        else:
            present.add(op)
            insort(ordered, w, key=submission_order)
            index.add(w)
        assert index.differences(ordered) == []
        for j in range(2):
            thresholds = tables[(k + j) % len(tables)]
            for i, start in enumerate(ordered):
                assert index.first_stop(start, thresholds) is _plain(ordered, i, thresholds)
