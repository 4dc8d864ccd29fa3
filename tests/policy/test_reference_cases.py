"""Minimal snapshots behind the oracle comparison (tests/policy/test_reference.py).

The first tests check the reference scheduler itself on DESIGN.md's own worked example
(docs/policy.md, tests/scenarios/P04). The cases after them are the smallest snapshots found
where ``schedule()`` disagreed with the reference and DESIGN.md sides with the reference (faults
(a), (b), (e), (f) of docs/policy.md, all fixed): each names the sentence that decides it. A
fault found later gets an ``xfail(strict=False)`` case here and a filter branch in
tests/policy/oracle_harness.py ``known_fault`` until it is fixed.
"""

from __future__ import annotations

import pytest

from scheduler.policy import (
    Attempt,
    Budget,
    GpuHealth,
    Host,
    HostState,
    PendingReason,
    Snapshot,
    StopReason,
    UsageRecord,
    Workload,
    schedule,
)
from scheduler.policy.reference import reference_schedule
from tests.policy.oracle_harness import decisions_view, differences

T0 = 1_767_571_200
H = 3600
TWO = [Budget("org", "org", None), Budget("a", "a", "org"), Budget("b", "b", "org")]


def host(name: str, size: int, fabric: str = "f0") -> Host:
    return Host(name, "H100", {i: GpuHealth.HEALTHY for i in range(size)}, HostState.ACTIVE, {"fabric": fabric})


def p04(now: int) -> Snapshot:
    """docs/policy.md's worked example: A holds h1 with four 2-GPU attempts, B has nothing."""
    attempts = [
        Attempt("A1", "A1", "a", (("h1", 0), ("h1", 1)), True, H, T0 - 5 * H),
        Attempt("A2", "A2", "a", (("h1", 2), ("h1", 3)), True, H, T0 - 3 * H),
        Attempt("A3", "A3", "a", (("h1", 4), ("h1", 5)), True, H, T0 - 2 * H),
        Attempt("A4", "A4", "a", (("h1", 6), ("h1", 7)), True, H, T0 - 1800),
    ]
    pending = [Workload("B1", "b", 4, "H100", H, T0, 1)]
    if now > T0:
        attempts = [
            attempts[0],
            attempts[3],
            Attempt("b1", "B1", "b", tuple(("h1", i) for i in range(2, 6)), True, H, T0),
        ]
        pending = [Workload("B2", "b", 3, "H100", H, now, 2)]
    usage = [UsageRecord("a", T0 - 86400, T0 - 86400, None, 379 * H)]
    return Snapshot(now, [host("h1", 8)], TWO, attempts, pending, usage)


@pytest.mark.parametrize("scheduler", [reference_schedule, schedule], ids=["reference", "schedule"])
def test_worked_example_preempts_the_most_recently_started_pair(scheduler) -> None:  # noqa: ANN001
    dec = scheduler(p04(T0))
    assert sorted((s.attempt, s.reason, s.for_workload) for s in dec.stops) == [
        ("A2", StopReason.PREEMPTED, "B1"),
        ("A3", StopReason.PREEMPTED, "B1"),
    ]
    assert dec.nominations == {"B1": tuple(("h1", i) for i in range(2, 6))}
    assert dec.pending["B1"].reason == PendingReason.AWAITING_PREEMPTION


@pytest.mark.parametrize("scheduler", [reference_schedule, schedule], ids=["reference", "schedule"])
def test_worked_example_reserves_h1_until_the_protection_ends(scheduler) -> None:  # noqa: ANN001
    dec = scheduler(p04(T0 + 300))
    assert not dec.stops and not dec.starts
    assert dec.pending["B2"].reason == PendingReason.PROTECTED_WORK
    assert dec.reservations == {"h1": "B2"}
    assert dec.reserved_start == {"B2": T0 + 1800}


def assert_agree(snap: Snapshot) -> None:
    diff = differences(snap, schedule(snap), reference_schedule(snap))
    assert not diff, "\n".join(diff)


# ----------------------------------------------------------------------------- fault (a)
def second_preemptor() -> Snapshot:
    """h1: GPUs 0-1 free, unallocated A3 on GPU 2 (started later) and A4 on GPU 3. P2 and P3
    (budget b, 3 GPUs each) come in that order: P2 preempts A3 and is nominated GPUs 0-2; for P3
    only A4's one GPU is left, which cannot make room."""
    attempts = [
        Attempt("a3", "A3", "c", (("h1", 2),), False, 0, T0 - 700),
        Attempt("a4", "A4", "b", (("h1", 3),), False, 0, T0 - 2000),
    ]
    budgets = [*TWO, Budget("c", "c", "org")]
    pending = [Workload("P2", "b", 3, "H100", 600, T0 - 8, 2), Workload("P3", "b", 3, "H100", 1800, T0 - 7, 3)]
    return Snapshot(T0, [host("h1", 4)], budgets, attempts, pending)


def test_the_reference_preempts_only_what_makes_room() -> None:
    dec = reference_schedule(second_preemptor())
    assert [(s.attempt, s.for_workload) for s in dec.stops] == [("a3", "P2")]
    assert dec.nominations == {"P2": (("h1", 0), ("h1", 1), ("h1", 2))}


def test_schedule_preempts_only_what_makes_room() -> None:
    assert_agree(second_preemptor())


# ----------------------------------------------------------------------------- fault (b)
def grace_in_snapshot() -> Snapshot:
    """h0's four GPUs are held by X (budget a), stopping for P (budget b), which was nominated
    only (h0, 0). Q (budget a, 2 GPUs) is blocked: (h0, 1..3) are being freed for nobody."""
    x = Attempt("x", "X", "a", tuple(("h0", i) for i in range(4)), True, 600, T0 - H, stopping=True)
    pending = [Workload("P", "b", 1, "H100", 600, T0 - 60, 1), Workload("Q", "a", 2, "H100", 600, T0 - 30, 2)]
    return Snapshot(T0, [host("h0", 4)], TWO, [x], pending, nominations={"P": (("h0", 0),)})


def grace_in_pass() -> Snapshot:
    """The same, decided within one pass: P preempts X (only (h0, 0) nominated), then Q blocks."""
    x = Attempt("x", "X", "a", tuple(("h0", i) for i in range(4)), True, 600, T0 - H)
    pending = [Workload("P", "b", 1, "H100", 600, T0 - 60, 1), Workload("Q", "a", 2, "H100", 600, T0 - 30, 2)]
    return Snapshot(T0, [host("h0", 4)], TWO, [x], pending)


def test_the_reference_reserves_the_gpus_being_freed_for_nobody() -> None:
    """DESIGN.md §3.5: the earliest start counts GPUs "free from the release of an attempt
    already stopping (inside its grace period and not nominated for another workload, whatever
    its budget or class)"; only (h0, 0) is nominated for P, so (h0, 1..3) are free for Q at
    the release (docs/policy.md "Readings": nominations are per GPU)."""
    for snap in (grace_in_snapshot(), grace_in_pass()):
        dec = reference_schedule(snap)
        assert dec.reservations == {"h0": "Q"} and dec.reserved_start == {"Q": T0}
        assert dec.nominations == {"P": (("h0", 0),)}


@pytest.mark.parametrize("make", [grace_in_snapshot, grace_in_pass], ids=["in-snapshot", "in-pass"])
def test_schedule_reserves_the_gpus_being_freed_for_nobody(make) -> None:  # noqa: ANN001
    assert_agree(make())


def released_later(release_at: int | None) -> Snapshot:
    """X (budget a) holds h0, stopping with its GPUs expected back at ``release_at``; Q (budget
    a, 2 GPUs) is blocked and nobody is nominated."""
    x = Attempt(
        "x", "X", "a", tuple(("h0", i) for i in range(4)), True, 600, T0 - H, stopping=True, release_at=release_at
    )
    return Snapshot(T0, [host("h0", 4)], TWO, [x], [Workload("Q", "a", 2, "H100", 600, T0 - 30, 2)])


@pytest.mark.parametrize(
    ("release_at", "start"), [(T0 + 120, T0 + 120), (None, T0), (T0 - 5, T0)], ids=["ahead", "unknown", "overdue"]
)
@pytest.mark.parametrize("scheduler", [reference_schedule, schedule], ids=["reference", "schedule"])
def test_a_reservation_counts_a_stopping_attempt_from_its_release(scheduler, release_at, start) -> None:  # noqa: ANN001
    """DESIGN.md §3.5: GPUs "free from the release of an attempt already stopping": the release is
    ``release_at`` (stop + grace); unknown or already due, it is now."""
    dec = scheduler(released_later(release_at))
    assert dec.reservations == {"h0": "Q"} and dec.reserved_start == {"Q": start}


# ----------------------------------------------------------------------------- fault (e)
def two_of_one_shape() -> Snapshot:
    """X (budget a) holds h0 under protection; W2 and W7 (budget b, same shape) are blocked.
    W2 reserves h0; W7 finds no host left to reserve."""
    x = Attempt("x", "X", "a", tuple(("h0", i) for i in range(4)), True, H, T0 - 600)
    pending = [Workload("W2", "b", 2, "H100", 1800, T0 - 60, 1), Workload("W7", "b", 2, "H100", 1800, T0 - 30, 2)]
    return Snapshot(T0, [host("h0", 4)], TWO, [x], pending, max_reservations=2)


def test_the_reference_gives_a_reserved_start_only_to_the_holder() -> None:
    dec = reference_schedule(two_of_one_shape())
    assert dec.reserved_start == {"W2": T0 + 3000}
    assert dec.pending["W2"].reason == dec.pending["W7"].reason == PendingReason.PROTECTED_WORK
    assert dec.pending["W2"].detail["reserved_start"] == T0 + 3000
    assert "reserved_start" not in dec.pending["W7"].detail


def test_schedule_gives_a_reserved_start_only_to_the_holder() -> None:
    snap = two_of_one_shape()
    dec = schedule(snap)
    assert "reserved_start" not in dec.pending["W7"].detail
    assert_agree(snap)


def test_views_compare_what_matters() -> None:
    """The comparison sees reasons, victims and reserved starts (a self-check of the harness)."""
    view = decisions_view(p04(T0), reference_schedule(p04(T0)))
    assert view["pending"] == {"B1": ("awaiting_preemption", ("A2", "A3"), "h1")}


# ----------------------------------------------------------------------------- reading (f)
def starting_victim() -> Snapshot:
    """Two unallocated attempts on h0: U1 still starting (not confirmed), U2 running for 100 s.
    P (allocated, 2 GPUs) needs one of them; every criterion before start times ties."""
    attempts = [
        Attempt("u1", "U1", "a", (("h0", 0), ("h0", 1)), False, 0, None),
        Attempt("u2", "U2", "a", (("h0", 2), ("h0", 3)), False, 0, T0 - 100),
    ]
    return Snapshot(T0, [host("h0", 4)], TWO, attempts, [Workload("P", "b", 2, "H100", 600, T0, 1)])


def test_the_reference_counts_a_starting_victim_as_the_most_recently_started() -> None:
    """DESIGN.md §3.4 victim choice: "most recently started first"; an attempt not yet
    confirmed started is the most recent one (docs/policy.md "Readings")."""
    dec = reference_schedule(starting_victim())
    assert [s.attempt for s in dec.stops] == ["u1"]


def test_schedule_counts_a_starting_victim_as_the_most_recently_started() -> None:
    assert_agree(starting_victim())


# ----------------------------------------------------------------------------- reading (1)
def nominated(victim_leaving: bool) -> Snapshot:
    """P was nominated (h0, 0..1); h1 has 2 GPUs free now. Its victim X is still in its grace
    period (``victim_leaving``) or already gone."""
    attempts = [Attempt("x", "X", "a", (("h0", 0), ("h0", 1)), True, 600, T0 - H, stopping=True)]
    return Snapshot(
        T0,
        [host("h0", 2), host("h1", 2)],
        TWO,
        attempts if victim_leaving else [],
        [Workload("P", "b", 2, "H100", 600, T0 - 60, 1)],
        nominations={"P": (("h0", 0), ("h0", 1))},
    )


@pytest.mark.parametrize("scheduler", [reference_schedule, schedule], ids=["reference", "schedule"])
def test_a_nominated_workload_that_can_start_elsewhere_now_does(scheduler) -> None:  # noqa: ANN001
    """DESIGN.md §3.4: "if it can start now elsewhere, it does, and its nomination is dropped"."""
    dec = scheduler(nominated(victim_leaving=True))
    assert [(s.workload, s.gpus) for s in dec.starts] == [("P", (("h1", 0), ("h1", 1)))]
    assert dec.nominations == {}


@pytest.mark.parametrize("scheduler", [reference_schedule, schedule], ids=["reference", "schedule"])
def test_a_nominated_workload_whose_gpus_are_free_starts_on_them(scheduler) -> None:  # noqa: ANN001
    """docs/policy.md "Readings" (1): once its nominated GPUs are all free it takes them, even
    if best fit would tie or prefer another host."""
    dec = scheduler(nominated(victim_leaving=False))
    assert [(s.workload, s.gpus) for s in dec.starts] == [("P", (("h0", 0), ("h0", 1)))]


def test_the_reference_is_an_independent_reading() -> None:
    """The oracle imports only the dataclasses, none of the fast path's machinery (issue 12)."""
    import ast
    from pathlib import Path

    import scheduler.policy.reference as ref

    tree = ast.parse(Path(ref.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m and m.startswith("scheduler")} == {"scheduler.policy.types"}
