"""The allocated dispatch's rest proved idle (scheduler/policy/tail.py).

A busy trace on a small cluster, every pass through ``IncrementalScheduler(check=True)``: where
a pass proves the rest of its dispatch idle, check runs the rest anyway and fails if it decides
anything; the decisions also equal a fresh ``schedule()``'s (which keeps no index and never
proves). A proof that answers True blindly is caught by the same check.

The random queues of ``test_queue_rests_kept_across_passes_are_the_walk`` are ``FAIRWAY_TAIL_EXAMPLES``
(100 in the suite); a longer profile: ``FAIRWAY_TAIL_EXAMPLES=2000 .venv/bin/python -m pytest -q
tests/policy/test_tail.py -k queue_rests``.
"""

from __future__ import annotations

import os
from bisect import insort
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.tail as tail
import scheduler.policy.unallocated as unallocated
from scheduler.policy import IncrementalScheduler
from scheduler.policy.queues import submission_order
from scheduler.policy.skip_index import SkipIndex
from scheduler.policy.types import Workload
from scheduler.sim.simulate import TraceSim
from tests.policy.trace_checks import busy_trace, run_checked


def _count_proofs(monkeypatch: pytest.MonkeyPatch, answer: bool | None = None) -> dict[str, int]:
    seen = {"asked": 0, "idle": 0}
    real = tail.Tail.rest_idle

    def counted(self: tail.Tail) -> bool:
        got = real(self) if answer is None else answer
        seen["asked"] += 1
        seen["idle"] += got
        return got

    monkeypatch.setattr(tail.Tail, "rest_idle", counted)
    monkeypatch.setattr(tail.Tail, "whole_after_decisions", True)  # the proof asked at every chance
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_proved_idle_rest_decides_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    seen = _count_proofs(monkeypatch)
    run_checked(busy_trace(tmp_path, seed))
    assert seen["idle"] > 5 and seen["asked"] > seen["idle"]


def test_a_blind_proof_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Answering "idle" at every step cuts dispatches that would still decide: check fails."""
    _count_proofs(monkeypatch, answer=True)
    inc = IncrementalScheduler(check=True)
    with pytest.raises(AssertionError, match="proved idle"):
        TraceSim(busy_trace(tmp_path, 1), inc).run()


def test_kept_gang_host_counts_are_checked_against_the_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof's whole-host count for a gang's reservation (read from the kept whole hosts,
    kept in the pass's memo) is compared with the plain walk under check: a walk that answers
    otherwise fails it (so the comparison is reached)."""
    real = tail._gang_hosts_walk
    seen = {"walks": 0}

    def off_by_one(ps, model, allowed):  # type: ignore[no-untyped-def]
        seen["walks"] += 1
        return real(ps, model, allowed) + 1

    monkeypatch.setattr(tail, "_gang_hosts_walk", off_by_one)
    with pytest.raises(AssertionError, match="whole hosts for a gang"):
        TraceSim(busy_trace(tmp_path, 2), IncrementalScheduler(check=True)).run()
    assert seen["walks"] == 1


def test_the_proofs_rule2_is_checked_against_allowed_budgets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof's screen reads rule 2 from the pass's kept thresholds; under check each answer
    is compared with :func:`contract.allowed_budgets`: a plain answer that differs fails it."""
    import types

    import scheduler.policy.contract as contract

    fake = types.SimpleNamespace(**{k: getattr(contract, k) for k in dir(contract) if not k.startswith("__")})
    fake.allowed_budgets = lambda *a: contract.allowed_budgets(*a) | {"no such budget"}
    monkeypatch.setattr(tail, "contract", fake)
    with pytest.raises(AssertionError, match="from the pass's thresholds"):
        TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()


@pytest.mark.parametrize("seed", [4, 5])
def test_unallocated_pass_ended_early_decides_as_the_whole_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Without reasons the unallocated pass ends once every shape of its queues failed at its
    fewest GPUs (unallocated.UnallocatedRest); under check it runs on and fails if anything started
    after, and the decisions equal a fresh ``schedule()``'s. The end is reached."""
    seen = {"ended": 0}
    real = unallocated.UnallocatedRest.failed

    def counted(self, shape, gpus, starts):  # type: ignore[no-untyped-def]
        got = real(self, shape, gpus, starts)
        seen["ended"] += got
        return got

    monkeypatch.setattr(unallocated.UnallocatedRest, "failed", counted)
    run_checked(busy_trace(tmp_path, seed, unallocated_rule="fraction:0.4"))
    assert seen["ended"] > 5


def test_an_unallocated_pass_ended_blindly_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ending the unallocated pass at its first failure cuts starts that would still come: check fails."""

    def blind(self, shape, gpus, starts):  # type: ignore[no-untyped-def]
        if self.ended is None:
            self.ended = starts
        return True

    monkeypatch.setattr(unallocated.UnallocatedRest, "failed", blind)
    with pytest.raises(AssertionError, match="after its end"):
        TraceSim(busy_trace(tmp_path, 4, unallocated_rule="fraction:0.4"), IncrementalScheduler(check=True)).run()


@pytest.mark.parametrize("seed", [4, 5])
def test_unallocated_shapes_from_the_index_are_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The unallocated rest's shapes and nominations come from the pending index's coarse shapes
    where a queue is its budget's kept list (``unallocated.rest_shapes``); under check each pass
    compares them with the walk of every queue (``rest_shapes_walk``). The index path is taken."""
    seen = {"kept": 0}
    real = unallocated.rest_shapes

    def counted(queues, noms, grouped, coarse, pending):  # type: ignore[no-untyped-def]
        got = real(queues, noms, grouped, coarse, pending)
        seen["kept"] += grouped is not None and any(
            b in grouped and q is grouped[b].unallocated for b, q in queues.items()
        )
        return got

    monkeypatch.setattr(unallocated, "rest_shapes", counted)
    run_checked(busy_trace(tmp_path, seed, unallocated_rule="fraction:0.4"))
    assert seen["kept"] > 20, seen


def test_unallocated_shapes_missing_from_the_index_are_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index read that misses the kept queues' coarse shapes answers otherwise than the walk: check fails."""
    real = unallocated.rest_shapes

    def forgets(queues, noms, grouped, coarse, pending):  # type: ignore[no-untyped-def]
        return real(queues, noms, grouped, [] if coarse is not None else None, pending)

    monkeypatch.setattr(unallocated, "rest_shapes", forgets)
    with pytest.raises(AssertionError, match="shapes from the index"):
        run_checked(busy_trace(tmp_path, 4, unallocated_rule="fraction:0.4"))


def test_a_rest_dropped_blindly_as_failed_outright_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof leaves out the rest's shapes that fail outright as a handled workload did
    (``tail._failed_outright``); leaving out every shape cuts dispatches that would still decide."""
    monkeypatch.setattr(tail, "_failed_outright", lambda *a: True)
    with pytest.raises(AssertionError, match="proved idle"):
        TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_queue_proved_idle_and_shapes_failed_outright_decide_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A queue's own rest is proved idle (``Tail._leaf_idle``, reached) where the whole rest is
    not, and shapes are left out of the rest as failed outright (``_failed_outright``, reached);
    under check the dispatch walks them anyway and they decide nothing, and the decisions equal
    ``schedule()``'s (which never proves). By default the whole rest's proof is asked at the
    dispatch's first step only, never after the dispatch decided something (pol36: it seldom holds
    there). (trim48: one checked run of each trace counts both; the same runs of seeds 2 and 3
    were played once per count; fast51: and the whole rest's, a run of seed 1 of its own before.)"""
    seen = {"asked": 0, "idle": 0, "out": 0, "before": 0, "after": 0}
    real_leaf, real_out, real_rest = tail.Tail._leaf_idle, tail._failed_outright, tail.Tail.rest_idle

    def leaf_counted(self: tail.Tail, leaf: str) -> bool:
        got = real_leaf(self, leaf)
        seen["asked"] += 1
        seen["idle"] += got
        return got

    def out_counted(*a):  # type: ignore[no-untyped-def]
        got = real_out(*a)
        seen["out"] += got
        return got

    def rest_counted(self: tail.Tail) -> bool:
        seen["after" if self.decided_once else "before"] += 1
        return real_rest(self)

    monkeypatch.setattr(tail.Tail, "_leaf_idle", leaf_counted)
    monkeypatch.setattr(tail, "_failed_outright", out_counted)
    monkeypatch.setattr(tail.Tail, "rest_idle", rest_counted)
    run_checked(busy_trace(tmp_path, seed))
    assert seen["idle"] > 5 and seen["asked"] > seen["idle"]
    if seed in (2, 3):
        assert seen["out"] > 5
    assert seen["before"] > 0 and seen["after"] == 0  # the whole rest is asked only before a decision


def test_a_queue_proved_idle_blindly_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Answering "idle" for every queue passes queues that would still decide: check fails."""
    monkeypatch.setattr(tail.Tail, "_leaf_idle", lambda self, leaf: True)
    with pytest.raises(AssertionError, match="proved idle"):
        TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()


def test_a_queue_proved_idle_is_passed_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without check, a queue proved idle is passed at once: fewer workloads handled, the same
    decisions on every pass as with the per-queue proof off."""
    import scheduler.policy.core as core

    def run(leaf_proofs: bool) -> tuple[list[object], int]:
        handled = {"n": 0}
        real = core.Pass._handle_allocated

        def counted(self: core.Pass, w: object) -> bool:
            handled["n"] += 1
            return real(self, w)  # type: ignore[arg-type]

        with monkeypatch.context() as m:
            m.setattr(core.Pass, "_handle_allocated", counted)
            if not leaf_proofs:
                m.setattr(tail.Tail, "_leaf_idle", lambda self, leaf: False)
            inc = IncrementalScheduler()
            seen: list[object] = []

            def record(snap):  # type: ignore[no-untyped-def]
                dec = inc(snap)
                seen.append(dec)
                return dec

            TraceSim(busy_trace(tmp_path, 2), record).run()
        return seen, handled["n"]

    with_proofs, fewer = run(True)
    without, more = run(False)
    assert with_proofs == without and fewer < more


def test_unallocated_shapes_from_the_index_on_random_queues() -> None:
    """``unallocated.rest_shapes`` against the walk on random pending sets kept by a
    ``PendingIndex``: some budgets' queues its kept lists, others lists of the pass's own (a
    capped budget's whole list), nominations on random workloads of either."""
    import random

    from scheduler.policy.pending import PendingIndex
    from tests.policy.builders import pending

    rng = random.Random(7)
    nominated = 0
    for _ in range(200):
        index = PendingIndex()
        ws = [
            pending(
                f"w{i}",
                rng.choice("abc"),
                rng.choice([1, 2, 4, 8]),
                m=rng.choice([0, 0, 60]),
                seq=i,
                model=rng.choice(["H100", "A100"]),
            )
            for i in range(rng.randint(1, 30))
        ]
        index.sync({w.id: w for w in ws})
        queues = {}
        for b, bp in index.budgets.items():
            if not bp.unallocated:
                continue
            queues[b] = bp.unallocated if rng.random() < 0.7 else list(bp.ordered)
        noms = {w.id: () for w in rng.sample(ws, min(len(ws), rng.randint(0, 3)))}
        got = unallocated.rest_shapes(queues, noms, index.budgets, index.least.keys(), index.by_id)
        assert got == unallocated.rest_shapes_walk(queues, noms)
        nominated += got[1]
    assert nominated > 20


def test_kept_rests_and_thresholds_are_reused_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue's rest (``Tail._rest``) and a budget's skip thresholds are kept in the pass's memo
    while that budget's failures outright stand (``Memo.outright_of``) and read again; under check
    each kept answer is compared with a fresh one, so a memo that is not told of a new failure
    (``Memo.failed_outright`` doing nothing) is caught."""
    import scheduler.policy.memo as memo

    real = tail.Tail._rest_kept
    seen = {"rest": 0, "fresh": 0}
    real_rest = tail.Tail._rest

    def counted_fresh(self: tail.Tail, leaf: str) -> tail.Rest | None:
        seen["fresh"] += 1
        return real(self, leaf)

    def counted_rest(self: tail.Tail, leaf: str) -> tail.Rest | None:
        seen["rest"] += 1
        return real_rest(self, leaf)

    monkeypatch.setattr(tail.Tail, "_rest_kept", counted_fresh)
    monkeypatch.setattr(tail.Tail, "_rest", counted_rest)
    TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler()).run()
    assert seen["rest"] > seen["fresh"] > 0  # some reads are of rests kept in the memo
    monkeypatch.setattr(memo.Memo, "failed_outright", lambda self, budget: None)
    with pytest.raises(AssertionError, match="kept (rest|skip thresholds)"):
        TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()


_MODELS = st.sampled_from(["H100", "A100"])
_GPUS = st.sampled_from([1, 2, 4, 8, 16])
_MS = st.integers(1, 6).map(lambda k: k * 60)


@settings(max_examples=int(os.environ.get("FAIRWAY_TAIL_EXAMPLES", "100")), deadline=None)  # 200 before fast51
@given(st.data())
def test_queue_rests_kept_across_passes_are_the_walk(data: st.DataObject) -> None:
    """``tail.queue_rest`` (a queue's rest kept on its ``SkipIndex`` between passes, dropped at
    each arrival and departure, recomputed where a failure outright of the budget shares a key)
    against ``queue_rest_walk`` over the plain list, after every change of a random queue, with
    random largest hosts and random failures outright; while neither the queue nor the largest
    hosts changed, the kept rest is the one read."""
    pool = [
        Workload(
            f"w{i}",
            "b",
            data.draw(_GPUS),
            data.draw(_MODELS),
            data.draw(_MS),
            data.draw(st.integers(0, 9)),
            i,
            cpus=data.draw(st.sampled_from([None, None, 4])),
        )
        for i in range(data.draw(st.integers(1, 20)))
    ]
    index, queue = SkipIndex(), []
    last: dict[str, int] | None = None
    for _ in range(data.draw(st.integers(1, 30))):
        changed = data.draw(st.booleans())
        if changed:
            w = data.draw(st.sampled_from(pool))
            if w in queue:
                queue.remove(w)
                index.remove(w)
            else:
                insort(queue, w, key=submission_order)
                index.add(w)
        largest = {"H100": data.draw(st.sampled_from([8, 4])), "A100": 8}
        outright: dict[tuple[str, str, bool, int | None, int | None], list[tuple[int, int]]] = {}
        for w in data.draw(st.lists(st.sampled_from(pool), max_size=2)):
            key = ("b", w.model, w.gpus > largest[w.model], w.cpus, w.memory)
            outright.setdefault(key, []).append((data.draw(_GPUS), data.draw(_MS)))
        kept = index.derived
        got = tail.queue_rest(index, "b", largest, outright)
        assert got == tail.queue_rest_walk(queue, "b", largest, outright)
        if not changed and largest == last and kept is not None:
            assert index.derived is kept
        last = largest


def test_a_queue_rest_kept_across_a_change_of_its_queue_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue's rest kept on its index after an arrival (``SkipIndex.add`` not dropping it) is
    caught by the check of every read against ``Tail._rest_fresh``."""
    real = SkipIndex.add

    def add_keeping(self: SkipIndex, w: Workload) -> None:
        kept = self.derived
        real(self, w)
        self.derived = kept

    monkeypatch.setattr(SkipIndex, "add", add_keeping)
    with pytest.raises(AssertionError, match="kept rest"):
        TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()
