"""A workload's own hold (docs/jobs.md "Hold and release"; Slurm's ``scontrol hold``): reason
``held`` in its place of §3.8's order, never started, no nomination kept, no estimated start, in
the fast path, the oracle and the forward simulation alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import Hold, IncrementalScheduler, PendingReason, schedule
from scheduler.policy.reference import reference_schedule
from scheduler.policy.screen import nothing_to_do, ready_starts
from scheduler.policy.tree import BudgetTree
from scheduler.sim.estimate import estimate_starts
from tests.policy.builders import T0, H, host, pending, running, snap, tree
from tests.policy.oracle_harness import crowded_snapshot, differences

BOTH = pytest.mark.parametrize("decide", [schedule, reference_schedule], ids=["fast", "oracle"])


@BOTH
@pytest.mark.parametrize("kind", [Hold.USER, Hold.ADMIN])
def test_a_held_workload_never_starts_and_blocks_nobody(decide, kind: Hold) -> None:
    s = snap([host("h1", 4)], tree("A"), pend=[replace(pending("W1", "A", 2, seq=1), hold=kind), pending("W2", "A", 2)])
    dec = decide(s)
    assert [st.workload for st in dec.starts] == ["W2"]
    assert dec.pending["W1"].reason == PendingReason.HELD
    assert dec.pending["W1"].detail == {"hold": str(kind)}


@BOTH
def test_a_held_unallocated_workload_never_starts(decide) -> None:
    s = snap([host("h1", 4)], tree("A"), pend=[replace(pending("U", "A", 1, m=0), hold=Hold.USER)])
    dec = decide(s)
    assert dec.starts == []
    assert dec.pending["U"].reason == PendingReason.HELD


@BOTH
def test_unschedulable_and_dependency_come_before_a_hold(decide) -> None:
    s = snap(
        [host("h1", 4)],
        tree("A"),
        pend=[
            replace(pending("BIG", "A", 5, seq=1), hold=Hold.USER),  # 5 GPUs never fit a 4-GPU host
            replace(pending("DEP", "A", 1, seq=2), hold=Hold.ADMIN, waiting=True),
            replace(pending("H", "A", 1, seq=3), hold=Hold.ADMIN),
        ],
    )
    reasons = {w: str(i.reason) for w, i in decide(s).pending.items()}
    assert reasons == {"BIG": "unschedulable", "DEP": "dependency", "H": "held"}


@BOTH
def test_a_held_group_member_leaves_the_groups_slot_to_its_siblings(decide) -> None:
    members = [replace(pending(f"G{i}", "A", 1, seq=i), group="7") for i in range(3)]
    members[0] = replace(members[0], hold=Hold.USER)
    s = snap([host("h1", 4)], tree("A"), pend=members, group_limits={"7": (1, 0)})
    dec = decide(s)
    assert [st.workload for st in dec.starts] == ["G1"]
    assert dec.pending["G0"].reason == PendingReason.HELD
    assert dec.pending["G2"].reason == PendingReason.DEPENDENCY


def _nominated_then_held() -> object:
    # b's unprotected work is leaving for p (stopping, GPUs back in 30 s); p is held meanwhile.
    work = [running(f"b{i}", "B", [("h1", i)], started=T0 - 2 * H, m=H) for i in range(4)]
    leaving = [replace(work[0], stopping=True, release_at=T0 + 30), *work[1:]]
    held = replace(pending("p", "A", 1), hold=Hold.USER)
    return snap([host("h1", 4)], tree("A", "B"), leaving, [held], nominations={"p": (("h1", 0),)})


@BOTH
def test_a_held_nominee_drops_its_nomination(decide) -> None:
    s = _nominated_then_held()
    dec = decide(s)
    assert dec.nominations == {}
    assert dec.starts == []
    assert dec.pending["p"].reason == PendingReason.HELD


def test_a_held_nominee_agrees_with_the_oracle_and_is_not_idle() -> None:
    s = _nominated_then_held()
    assert differences(s, schedule(s), reference_schedule(s)) == []
    assert not nothing_to_do(s, BudgetTree(s.budgets), nominations=True)
    assert ready_starts(s, BudgetTree(s.budgets)) is None


def test_a_held_workload_has_no_estimated_start_and_keeps_its_place_once_released() -> None:
    victim = running("v", "B", [("h1", 0), ("h1", 1)], m=3 * H, started=T0 - H)
    first = pending("W", "A", 2, seq=1)
    s = snap([host("h1", 2)], tree("A", "B"), [victim], [replace(first, hold=Hold.ADMIN), pending("X", "A", 2, seq=2)])
    est = estimate_starts(s, grace=30)
    assert "W" not in est
    assert est == {"X": T0 + 2 * H + 30}
    # Released, it is back in front of X: its submission time and sequence never changed.
    released = replace(s, pending=[first, pending("X", "A", 2, seq=2)])
    assert estimate_starts(released, grace=30) == {"W": T0 + 2 * H + 30}


def test_the_incremental_scheduler_follows_holds_toggled_between_passes() -> None:
    """The kept pending index follows workloads by identity: a hold set or released between
    passes is a new view of the workload, and the kept state decides as a fresh pass does."""
    sched = IncrementalScheduler(check=True)
    for seed in range(40):
        s = crowded_snapshot(seed)
        for toggled in (
            s,
            replace(s, pending=[replace(w, hold=Hold.NONE if w.hold else Hold.USER) for w in s.pending]),
            s,
        ):
            assert sched(toggled) == schedule(toggled)
