"""Unit tests of the policy core, one rule of DESIGN.md §3 each."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import GpuHealth, HostState, IncrementalScheduler, OnCap, PendingReason, StopReason, schedule
from scheduler.policy.admission import infeasible_request
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Budget, Host, UsageRecord
from scheduler.policy.usage import windowed_usage
from scheduler.policy.views import budget_usage, dispatch_order
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree

W = 7 * 86400


def test_usage_counts_intervals_pro_rata_at_the_window_start():
    rec = UsageRecord("a", T0 - W - 2 * H, T0 - W + 3 * H, gpus=2)
    assert windowed_usage([rec], [], T0, W) == {"a": 2 * 3 * H}


def test_usage_counts_lumps_inside_the_window_only():
    inside = UsageRecord("a", 0, T0 - W + 1, None, 100)
    edge = UsageRecord("a", 0, T0 - W, None, 1000)  # (now − W, now]: the start is excluded
    assert windowed_usage([inside, edge], [], T0, W) == {"a": 100}


def test_usage_counts_running_allocated_attempts_but_never_unallocated_time():
    alloc = running("r1", "a", [("h", 0), ("h", 1)], m=H, started=T0 - 5 * H)
    free = running("u1", "a", [("h", 2)], m=0, started=T0 - 5 * H)
    assert windowed_usage([], [alloc, free], T0, W) == {"a": 2 * 5 * H}


def test_parent_usage_is_the_sum_of_its_children():
    s = snap([host("h1")], tree("p/a", "p/b"), usage=[lump("p/a", 10), lump("p/b", 5)])
    u = budget_usage(s)
    assert u["p"] == 15 * H and u["org"] == 15 * H


def test_tree_rejects_an_unknown_parent_and_two_roots():
    with pytest.raises(ValueError, match="unknown parent"):
        BudgetTree([Budget("a", "a", "nope")])
    with pytest.raises(ValueError, match="roots"):
        BudgetTree([Budget("a", "a", None), Budget("b", "b", None)])


def test_best_fit_picks_the_fullest_host_that_fits_and_lowest_indices():
    h1, h2 = host("h1"), host("h2")
    busy = running("x", "b", [("h2", i) for i in range(5)], m=H, started=T0)
    s = snap([h1, h2], tree("a", "b"), [busy], [pending("w", "a", 2)])
    d = schedule(s)
    assert [(st.workload, st.gpus) for st in d.starts] == [("w", (("h2", 5), ("h2", 6)))]


def test_nothing_is_placed_on_unhealthy_gpus_or_non_active_hosts():
    h1 = Host("h1", "H100", {0: GpuHealth.UNHEALTHY, 1: GpuHealth.HEALTHY}, HostState.ACTIVE)
    h2 = host("h2", 2, state=HostState.CORDONED)
    h3 = host("h3", 2, state=HostState.DRAINING)
    s = snap([h1, h2, h3], tree("a"), [], [pending("w", "a", 2), pending("u", "a", 1, m=0, seq=1)])
    d = schedule(s)
    assert [st.workload for st in d.starts] == ["u"]
    assert d.starts[0].gpus == (("h1", 1),)
    assert d.pending["w"].reason == PendingReason.INSUFFICIENT_GPUS


def test_committed_usage_alternates_equal_budgets():
    s = snap(
        [host("h1", 4)],
        tree("a", "b"),
        [],
        [pending(f"a{i}", "a", 1, seq=i) for i in range(4)] + [pending(f"b{i}", "b", 1, seq=10 + i) for i in range(4)],
    )
    d = schedule(s)
    assert sorted(st.workload for st in d.starts) == ["a0", "a1", "b0", "b1"]


def test_unallocated_never_preempts_and_is_reported_insufficient_gpus():
    full = running("x", "b", [("h1", i) for i in range(2)], m=H, started=T0 - 5 * H)
    s = snap([host("h1", 2)], tree("a", "b"), [full], [pending("u", "a", 1, m=0)], usage=[lump("b", 500)])
    d = schedule(s)
    assert d.stops == [] and d.pending["u"].reason == PendingReason.INSUFFICIENT_GPUS


def test_own_budget_allocated_work_is_never_a_victim():
    mine = running("x", "a", [("h1", 0), ("h1", 1)], m=H, started=T0 - 5 * H)
    s = snap([host("h1", 2)], tree("a", "b"), [mine], [pending("w", "a", 2)])
    d = schedule(s)
    assert d.stops == [] and d.pending["w"].reason == PendingReason.INSUFFICIENT_GPUS


def test_own_budget_unallocated_work_is_a_victim():
    mine = running("u", "a", [("h1", 0), ("h1", 1)], m=0, started=T0 - 5 * H)
    s = snap([host("h1", 2)], tree("a", "b"), [mine], [pending("w", "a", 2)])
    d = schedule(s)
    assert [(x.attempt, x.reason, x.for_workload) for x in d.stops] == [("u", StopReason.PREEMPTED, "w")]
    assert d.nominations == {"w": (("h1", 0), ("h1", 1))}


def test_rule_two_needs_a_strictly_lower_ratio_counting_the_commitment():
    # b has 10 GPU-hours; a has 8 and asks 2 GPUs × 1 h: 8 + 2 = 10 is not strictly lower.
    victim = running("v", "b", [("h1", 0), ("h1", 1)], m=H, started=T0 - 5 * H)
    base = [lump("a", 8), lump("b", 10 - 10)]
    s = snap([host("h1", 2)], tree("a", "b"), [victim], [pending("w", "a", 2)], usage=base)
    d = schedule(s)
    assert d.stops == [] and d.pending["w"].reason == PendingReason.FAIR_SHARE
    s2 = snap([host("h1", 2)], tree("a", "b"), [victim], [pending("w", "a", 2)], usage=[lump("a", 7.99)])
    assert [x.attempt for x in schedule(s2).stops] == ["v"]


def test_protected_victim_is_not_preempted_and_the_reason_says_so():
    victim = running("v", "b", [("h1", 0), ("h1", 1)], m=10 * H, started=T0 - H)
    s = snap([host("h1", 2)], tree("a", "b"), [victim], [pending("w", "a", 2)], usage=[lump("b", 1000)])
    d = schedule(s)
    assert d.stops == []
    assert d.pending["w"].reason == PendingReason.PROTECTED_WORK
    assert d.pending["w"].detail["protected_until"] == T0 + 9 * H
    assert d.reservations == {"h1": "w"} and d.reserved_start["w"] == T0 + 9 * H


def test_protected_work_reason_names_the_host_the_reservation_waits_for():
    # Room comes earlier on h2 (protected 1 h) than on h1 (2 h): the reason's host, numbers and
    # blocking work are h2's, as the reservation's (they named h1, the first by name, before).
    a1 = running("A1", "a", [("h1", i) for i in range(4)], m=3 * H, started=T0 - H)
    a2 = running("A2", "a", [("h2", i) for i in range(4)], m=2 * H, started=T0 - H)
    s = snap([host("h1", 4), host("h2", 4)], tree("a", "b"), [a1, a2], [pending("P1", "b", 2)], usage=[lump("a", 1000)])
    d = schedule(s)
    assert d.stops == [] and d.reservations == {"h2": "P1"} and d.reserved_start["P1"] == T0 + H
    info = d.pending["P1"]
    assert info.reason == PendingReason.PROTECTED_WORK
    assert (info.detail["host"], info.detail["protected_until"], info.detail["blocking"]) == ("h2", T0 + H, ["A2"])
    assert IncrementalScheduler(check=True)(s) == d  # the kept ranking's answer = the plain walk's
    no_reservation = schedule(replace(s, max_reservations=0)).pending["P1"]  # the walk, no ranking kept
    assert no_reservation.detail == {k: v for k, v in info.detail.items() if k != "reserved_start"}


def test_starting_attempts_count_as_protected():
    starting = running("s", "b", [("h1", 0)], m=H, started=None)
    s = snap([host("h1", 1)], tree("a", "b"), [starting], [pending("w", "a", 1)], usage=[lump("b", 1000)])
    assert schedule(s).stops == []


def test_victims_in_grace_are_not_picked_twice():
    leaving = running("v", "b", [("h1", 0)], m=0, started=T0 - H, stopping=True)
    other = running("u", "b", [("h1", 1)], m=0, started=T0 - H)
    s = snap([host("h1", 2)], tree("a", "b"), [leaving, other], [pending("w", "a", 1)], nominations={"w": (("h1", 0),)})
    d = schedule(s)
    assert d.stops == [] and d.starts == []
    assert d.pending["w"].reason == PendingReason.AWAITING_PREEMPTION
    assert d.nominations == {"w": (("h1", 0),)}


def test_nominated_gpus_are_taken_by_nobody_else():
    s = snap(
        [host("h1", 2)],
        tree("a", "b"),
        [],
        [pending("w", "a", 2, seq=2), pending("x", "b", 1, seq=1, m=0)],
        nominations={"w": (("h1", 0), ("h1", 1))},
    )
    d = schedule(s)
    assert [st.workload for st in d.starts] == ["w"]


def test_hold_and_cap_hold_keep_work_pending_and_cap_downgrade_runs_unfunded():
    budgets = [
        Budget("org", "org", None),
        Budget("held", "held", "org", hold=True),
        Budget("capped", "capped", "org", capped=True, on_cap=OnCap.HOLD),
        Budget("down", "down", "org", capped=True, on_cap=OnCap.DOWNGRADE),
    ]
    s = snap(
        [host("h1", 8)],
        budgets,
        [],
        [pending("h", "held", 1, seq=1), pending("c", "capped", 1, seq=2), pending("d", "down", 1, seq=3)],
    )
    d = schedule(s)
    assert [(st.workload, st.allocated, st.unfunded) for st in d.starts] == [("d", False, True)]
    assert d.pending["h"].reason == PendingReason.HELD
    assert d.pending["c"].reason == PendingReason.BUDGET_CAPPED


def test_unschedulable_requests_block_nobody():
    s = snap(
        [host("h1", 8)],
        tree("a"),
        [],
        [pending("big", "a", 12, seq=1), pending("b200", "a", 1, model="B200", seq=2), pending("ok", "a", 8, seq=3)],
    )
    d = schedule(s)
    assert [st.workload for st in d.starts] == ["ok"]
    assert d.pending["big"].reason == d.pending["b200"].reason == PendingReason.UNSCHEDULABLE


def test_gang_takes_whole_hosts_on_one_fabric_first():
    hosts = [
        host("n1", 8, fabric="f1"),
        host("n2", 8, fabric="f2"),
        host("n3", 8, fabric="f2"),
        host("n4", 8, fabric="f1"),
    ]
    d = schedule(snap(hosts, tree("a"), [], [pending("g", "a", 16)]))
    assert {h for h, _ in d.starts[0].gpus} == {"n1", "n4"}


def test_drain_preempts_unprotected_and_unallocated_work_but_keeps_protected_work():
    h1 = host("h1", 4, state=HostState.DRAINING)
    prot = running("p", "a", [("h1", 0)], m=10 * H, started=T0 - H)
    old = running("o", "a", [("h1", 1)], m=H, started=T0 - 2 * H)
    free = running("u", "a", [("h1", 2)], m=0, started=T0 - H)
    d = schedule(snap([h1], tree("a"), [prot, old, free]))
    assert sorted((x.attempt, x.reason) for x in d.stops) == [("o", StopReason.DRAINED), ("u", StopReason.DRAINED)]
    assert d.host_states == {}


def test_drain_now_ignores_protection_and_an_empty_draining_host_is_drained():
    h1 = Host("h1", "H100", {0: GpuHealth.HEALTHY}, HostState.DRAINING, {}, drain_now=True)
    prot = running("p", "a", [("h1", 0)], m=10 * H, started=T0 - H)
    assert [x.attempt for x in schedule(snap([h1], tree("a"), [prot])).stops] == ["p"]
    empty = host("h2", 2, state=HostState.DRAINING)
    assert schedule(snap([empty], tree("a"))).host_states == {"h2": HostState.DRAINED}


def test_attempt_on_an_unhealthy_gpu_is_stopped_as_gpu_fault():
    h1 = Host("h1", "H100", {0: GpuHealth.UNHEALTHY, 1: GpuHealth.HEALTHY}, HostState.ACTIVE)
    a = running("a", "a", [("h1", 0), ("h1", 1)], m=10 * H, started=T0 - H)
    d = schedule(snap([h1], tree("a"), [a]))
    assert [(x.attempt, x.reason) for x in d.stops] == [("a", StopReason.GPU_FAULT)]


def test_fair_tree_orders_programs_before_projects():
    s = snap(
        [host("h1", 1)],
        tree("p/a", "p/b", "q/c"),
        [],
        [pending("b1", "p/b", 1, seq=1), pending("c1", "q/c", 1, seq=2), pending("a1", "p/a", 1, seq=3)],
        usage=[lump("p/a", 100), lump("q/c", 60)],
    )
    assert dispatch_order(s) == ["c1", "b1", "a1"]


def test_reserved_host_admits_only_work_that_ends_protection_before_the_reserved_start():
    victim = running("v", "b", [("h1", i) for i in range(6)], m=2 * H, started=T0 - H)
    hosts = [host("h1", 8)]
    big = pending("big", "a", 8, seq=1)
    short = pending("short", "c", 1, m=H // 2, seq=2)
    long_ = pending("long", "c", 1, m=2 * H, seq=3)
    s = snap(hosts, tree("a", "b", "c"), [victim], [big, short, long_], usage=[lump("b", 1000), lump("c", 50)])
    d = schedule(s)
    assert d.reservations == {"h1": "big"}
    assert [st.workload for st in d.starts] == ["short"]
    assert d.pending["long"].reason == PendingReason.RESERVED_FOR_OTHER


def test_max_reservations_bounds_the_reservations():
    victims = [running(f"v{i}", "b", [(f"h{i}", 0)], m=2 * H, started=T0 - H) for i in range(3)]
    hosts = [host(f"h{i}", 1) for i in range(3)]
    pend = [pending(f"w{i}", "a", 1, seq=i) for i in range(3)]
    d = schedule(snap(hosts, tree("a", "b"), victims, pend, usage=[lump("b", 1000)], max_reservations=2))
    assert len(set(d.reservations.values())) == 2


@pytest.mark.parametrize(
    ("gpus", "model", "code"),
    [
        (1, "B200", "unknown_model"),
        (12, "H100", "too_many_gpus"),
        (24, "H100", "too_many_gpus"),
        (0, "H100", "invalid_gpu_count"),
    ],
)
def test_infeasible_requests_are_named(gpus, model, code):
    assert infeasible_request([("H100", 8), ("H100", 8)], model, gpus)[0] == code


def test_feasible_requests_pass():
    assert infeasible_request([("H100", 8), ("H100", 8)], "H100", 16) is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "a/x", "a/y", "b", "b/z", "c"]), min_size=1, max_size=6),
    st.dictionaries(st.sampled_from(["a", "a/x", "a/y", "b", "b/z", "c"]), st.integers(1, 5)),
    st.lists(st.sets(st.sampled_from(["org", "a", "a/x", "a/y", "b", "b/z", "c"])), min_size=1, max_size=8),
)
def test_kept_normalized_shares_are_the_walk(paths: list[str], shares: dict[str, int], lives: list[set[str]]) -> None:
    """``BudgetTree.normalized_shares`` (kept for the last live set) against the walk down the
    tree, over a sequence of live sets (repeats and changes); a caller changing the returned dict
    changes nothing kept."""
    t = BudgetTree(tree(*paths, shares=shares))
    for live in lives:
        got = t.normalized_shares(live)
        assert got == t.normalized_shares_walk(live)
        got.clear()
        assert t.normalized_shares(set(live)) == t.normalized_shares_walk(live)
