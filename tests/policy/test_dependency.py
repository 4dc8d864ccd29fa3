"""The ``dependency`` pending reason (DESIGN.md §3.8): unmet ``after`` lists and array groups'
``%N`` caps, in its place in the reason order, within one pass, in the fast path and the oracle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import Budget, PendingReason, schedule
from scheduler.policy.reference import reference_schedule
from tests.policy.builders import host, pending, running, snap, tree
from tests.policy.oracle_harness import compare_once, crowded_snapshot, differences

BOTH = pytest.mark.parametrize("decide", [schedule, reference_schedule], ids=["fast", "oracle"])


@BOTH
def test_a_workload_waiting_on_its_after_list_gets_dependency_and_blocks_nobody(decide) -> None:
    s = snap(
        [host("h1", 4)],
        tree("A"),
        pend=[replace(pending("W1", "A", 2, seq=1), waiting=True), pending("W2", "A", 2, seq=2)],
    )
    dec = decide(s)
    assert [st.workload for st in dec.starts] == ["W2"]
    assert dec.pending["W1"].reason == PendingReason.DEPENDENCY
    assert dec.pending["W1"].detail == {"after": True}


@BOTH
def test_dependency_comes_after_unschedulable_and_before_held(decide) -> None:
    budgets = [b if b.key != "A" else Budget("A", "A", "org", hold=True) for b in tree("A")]
    s = snap(
        [host("h1", 4)],
        budgets,
        pend=[
            replace(pending("BIG", "A", 5, seq=1), waiting=True),  # 5 GPUs never fit a 4-GPU host
            replace(pending("W", "A", 1, seq=2), waiting=True),
            pending("HELD", "A", 1, seq=3),
        ],
    )
    dec = decide(s)
    assert {w: str(i.reason) for w, i in dec.pending.items()} == {
        "BIG": "unschedulable",
        "W": "dependency",
        "HELD": "held",
    }


@BOTH
@pytest.mark.parametrize("holding, started", [(0, 2), (1, 1), (2, 0), (3, 0)])
def test_a_group_cap_holds_within_one_pass(decide, holding: int, started: int) -> None:
    members = [replace(pending(f"G{i}", "A", 1, seq=i), group="7") for i in range(4)]
    s = snap([host("h1", 8)], tree("A"), pend=[*members, pending("X", "A", 1, seq=9)], group_limits={"7": (2, holding)})
    dec = decide(s)
    got = sorted(st.workload for st in dec.starts)
    assert got == sorted([f"G{i}" for i in range(started)] + ["X"])
    for i in range(started, 4):
        assert dec.pending[f"G{i}"].reason == PendingReason.DEPENDENCY
        assert dec.pending[f"G{i}"].detail == {"group": "7", "limit": 2}


@BOTH
def test_the_cap_counts_unallocated_members_too(decide) -> None:
    members = [replace(pending(f"U{i}", "A", 1, m=0, seq=i), group="g") for i in range(3)]
    dec = decide(snap([host("h1", 8)], tree("A"), pend=members, group_limits={"g": (1, 0)}))
    assert [st.workload for st in dec.starts] == ["U0"]
    assert {w: str(i.reason) for w, i in dec.pending.items()} == {"U1": "dependency", "U2": "dependency"}


def test_a_nominated_member_of_a_full_group_loses_its_nomination() -> None:
    # P was nominated (its victims leaving) in an earlier pass; a member has started since.
    victim = running("V", "B", [("h1", 0), ("h1", 1)], m=0, stopping=True)
    s = snap(
        [host("h1", 2)],
        tree("A", "B"),
        [victim],
        [replace(pending("P", "A", 2, seq=1), group="g")],
        nominations={"P": (("h1", 0), ("h1", 1))},
        group_limits={"g": (1, 1)},
    )
    fast, ref = schedule(s), reference_schedule(s)
    assert differences(s, fast, ref) == []
    assert fast.nominations == {}
    assert fast.pending["P"].reason == PendingReason.DEPENDENCY


def test_the_crowded_generator_compares_dependencies_and_caps() -> None:
    for seed in range(60):
        tally = compare_once(seed)
        assert not tally.unknown, tally.unknown[0][2]
    mixed = sum(any(w.waiting or w.group for w in crowded_snapshot(seed).pending) for seed in range(60))
    assert mixed > 10  # the generator really mixes them in


def test_estimates_skip_what_only_an_end_could_release() -> None:
    from scheduler.sim.estimate import estimate_starts

    members = [replace(pending(f"G{i}", "A", 1, seq=i), group="g") for i in range(3)]
    s = snap(
        [host("h1", 8)],
        tree("A"),
        pend=[*members, replace(pending("W", "A", 1, seq=5), waiting=True), pending("X", "A", 1, seq=6)],
        group_limits={"g": (2, 1)},
    )
    assert set(estimate_starts(s)) == {"G0", "X"}  # one slot left in g; W waits for an end
