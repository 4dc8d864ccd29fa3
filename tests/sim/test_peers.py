"""Each peer policy on a case where its documented behaviour is known (scheduler/sim/peers.py)."""

from __future__ import annotations

from scheduler.policy import StopReason
from scheduler.sim.peers import FifoPolicy, KaiTimesharePolicy, KueueDrsPolicy, SlurmFairsharePolicy
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree


def started(dec) -> list[str]:  # noqa: ANN001
    return [s.workload for s in dec.starts]


def test_fifo_starts_in_submission_order_and_backfills_without_reservation() -> None:
    hosts = [host("h1", 4)]
    att = [running("r", "a", [("h1", 0), ("h1", 1)])]  # 2 of 4 GPUs busy
    pend = [
        pending("big", "a", 4, seq=1, submitted=T0 - 30),  # oldest, does not fit
        pending("one", "b", 1, seq=2, submitted=T0 - 20),
        pending("two", "b", 2, seq=3, submitted=T0 - 10),  # no longer fits after "one"
        pending("one-b", "a", 1, seq=4, submitted=T0),
    ]
    dec = FifoPolicy()(snap(hosts, tree("a", "b"), att, pend))
    assert started(dec) == ["one", "one-b"]  # anything that fits starts, in submission order
    assert not dec.stops and not dec.nominations  # never preempts, never reserves


def test_fifo_gang_takes_whole_free_hosts() -> None:
    hosts = [host("h1", 4), host("h2", 4), host("h3", 4)]
    att = [running("r", "a", [("h2", 0)])]
    dec = FifoPolicy()(snap(hosts, tree("a"), att, [pending("g", "a", 8)]))
    assert dec.starts[0].gpus == tuple((h, i) for h in ("h1", "h3") for i in range(4))


def test_slurm_factor_is_two_to_the_minus_usage_over_shares() -> None:
    p = SlurmFairsharePolicy(half_life_s=7 * 86400)
    budgets = tree("a", "b", shares={"a": 3, "b": 1})
    hosts = [host("h1", 4)]
    # a runs 3 GPUs for one day, b 1 GPU: observed at two calls one day apart.
    att = [
        running("ra", "a", [("h1", 0), ("h1", 1), ("h1", 2)], started=T0),
        running("rb", "b", [("h1", 3)], started=T0),
    ]
    p(snap(hosts, budgets, att, now=T0))
    f = p.factors(snap(hosts, budgets, att, now=T0 + 86400))
    # usage fractions 3/4 and 1/4 (decay is common to both), shares 3/4 and 1/4: U/S = 1 for both
    assert abs(f["a"] - 0.5) < 1e-9 and abs(f["b"] - 0.5) < 1e-9


def test_slurm_orders_by_factor_then_age_and_never_preempts() -> None:
    p = SlurmFairsharePolicy()
    budgets = tree("heavy", "light")
    hosts = [host("h1", 2)]
    busy = [running("r1", "heavy", [("h1", 0), ("h1", 1)], started=T0)]
    p(snap(hosts, budgets, busy, now=T0))
    pend = [
        pending("old-heavy", "heavy", 1, seq=1, submitted=T0),
        pending("new-light", "light", 1, seq=2, submitted=T0 + 10),
    ]
    dec = p(snap(hosts, budgets, busy, pend, now=T0 + 3600))
    assert not dec.starts and not dec.stops  # full: waits, preempts nothing
    dec = p(snap(hosts, budgets, [running("r2", "heavy", [("h1", 1)], started=T0)], pend, now=T0 + 7200))
    assert started(dec) == ["new-light"]  # one GPU free: the lower-usage budget's job, though younger


def test_kueue_reclaims_borrowed_gpus_for_a_budget_within_its_nominal_quota() -> None:
    hosts = [host("h1", 4)]  # nominal quota 2 GPUs each
    att = [
        running("a1", "a", [("h1", 0)], started=T0 - 3 * H),
        running("a2", "a", [("h1", 1)], started=T0 - 2 * H),
        running("a3", "a", [("h1", 2)], started=T0 - 1 * H),  # a borrows 1 over its 2
        running("b1", "b", [("h1", 3)], started=T0 - 1 * H),
    ]
    dec = KueueDrsPolicy()(snap(hosts, tree("a", "b"), att, [pending("b2", "b", 1)]))
    assert [(s.attempt, s.reason, s.for_workload) for s in dec.stops] == [("a3", StopReason.PREEMPTED, "b2")]
    assert dec.nominations == {"b2": (("h1", 2),)}


def test_kueue_does_not_reclaim_from_a_budget_within_its_quota_nor_beyond_the_own_quota() -> None:
    hosts = [host("h1", 4)]
    att = [running(f"a{i}", "a", [("h1", i)]) for i in range(2)] + [
        running(f"b{i}", "b", [("h1", 2 + i)]) for i in range(2)
    ]
    dec = KueueDrsPolicy()(snap(hosts, tree("a", "b"), att, [pending("b3", "b", 1)]))
    assert not dec.stops  # b would exceed its nominal quota; a does not borrow


def test_kueue_admits_the_lowest_dominant_resource_share_first() -> None:
    hosts = [host("h1", 4)]
    att = [running(f"a{i}", "a", [("h1", i)]) for i in range(3)]  # a borrows 1
    pend = [pending("a-new", "a", 1, seq=1, submitted=T0 - 100), pending("b-new", "b", 1, seq=2)]
    dec = KueueDrsPolicy()(snap(hosts, tree("a", "b"), att, pend))
    assert started(dec) == ["b-new"]  # share of b with the workload is 0 < a's


def test_kai_time_based_fair_share_shrinks_the_over_quota_of_a_heavy_past_user() -> None:
    p = KaiTimesharePolicy(k=1.0)
    hosts = [host("h1", 8)]
    budgets = tree("a", "b", "c")
    # c has no demand: its deserved GPUs go to a and b by max(0, W + k(W - U)).
    pend = [pending(f"a{i}", "a", 1, seq=i) for i in range(8)] + [
        pending(f"b{i}", "b", 1, seq=10 + i) for i in range(8)
    ]
    s = snap(hosts, budgets, [], pend, usage=[lump("a", 30), lump("b", 10)], now=T0)
    fair = p._targets(s, {})
    # deserved 8/3 each; W = 1/3; U_a = 3/4, U_b = 1/4: weights max(0, 2/3 - 3/4) = 0 and 2/3 - 1/4 = 5/12
    assert abs(fair["a"] - 8 / 3) < 1e-9
    assert abs(fair["b"] - 16 / 3) < 1e-9
    dec = p(s)
    got = started(dec)
    assert len(got) == 8  # over-quota work is allowed on idle GPUs
    assert sum(w.startswith("a") for w in got) == 3  # GPUs in use over fair share decide the order


def test_kai_reclaims_from_a_queue_above_its_fair_share() -> None:
    p = KaiTimesharePolicy()
    hosts = [host("h1", 4)]
    att = [running(f"a{i}", "a", [("h1", i)], started=T0 - (4 - i) * H) for i in range(4)]
    dec = p(snap(hosts, tree("a", "b"), att, [pending("b0", "b", 1)]))
    assert [(s.attempt, s.for_workload) for s in dec.stops] == [("a3", "b0")]  # most recently started
    assert not dec.starts
