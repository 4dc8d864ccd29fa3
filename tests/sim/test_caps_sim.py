"""Budget caps followed by the forward simulation of estimates (DESIGN.md §3.7, docs/estimates.md
"Caps in the simulation").

A cap is reached at ``t`` when its subtree's allocated usage over ``(t − period, t]`` is at least
its limit (``scheduler.policy.caps.capped_at``, the rule). The simulation keeps each cap's usage by
difference (``scheduler.sim.caps.CapBook``) and makes each instant at which a cap is reached or
lifted an event. Here: the books against the rule on random records (hypothesis), the kept
instants against a walk of every second, the estimates and quotes against the every-second oracle,
and the two directions on fixed cases.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.policy import Attempt, Budget, Cap, Host, OnCap, Snapshot, UsageRecord, Workload
from scheduler.policy.caps import STILL_RUNNING, cap_members, cap_usage
from scheduler.policy.types import GpuHealth
from scheduler.sim import estimate as est
from scheduler.sim.caps import CapBook
from scheduler.sim.estimate import QUOTE_ID, estimate_starts, forward, quote_starts
from tests.policy.oracle_harness import T0
from tests.sim.estimate_oracle import next_event_walk, reference_estimates
from tests.sim.test_estimate_oracle import HORIZON, limits_for, small_state

HOUR = 3600


def capped_state(seed: int) -> tuple[Snapshot, dict[str, Workload], int]:
    """``small_state`` with one or two caps (the root or any budget, ``on_cap`` either way) whose
    limit lies near the usage now, periods short enough for usage to leave them within the
    horizon, and cap records: intervals, lumps and work still running on another cluster. The
    budgets' ``capped`` flags are left random: the simulation marks them by the rule."""
    s, running, grace = small_state(seed)
    rnd = random.Random(seed ^ 0xCA95)
    keys = [b.key for b in s.budgets]
    chosen = rnd.sample(keys, min(len(keys), rnd.randint(1, 2)))
    records = []
    for _ in range(rnd.randint(0, 6)):
        budget = rnd.choice(keys)
        kind = rnd.random()
        if kind < 0.6:
            start = T0 - rnd.randint(0, 3000)
            records.append(UsageRecord(budget, start, start + rnd.randint(0, 1500), gpus=rnd.randint(1, 4)))
        elif kind < 0.85:
            records.append(UsageRecord(budget, 0, T0 - rnd.randint(0, 2000), None, rnd.randint(1, 8) * 300))
        else:
            records.append(UsageRecord(budget, T0 - rnd.randint(0, 2000), STILL_RUNNING, gpus=rnd.randint(1, 2)))
    caps = [Cap(key, 0, rnd.choice([600, 1200, 3000])) for key in chosen]
    members = cap_members(caps, s.budgets)
    used = cap_usage(caps, members, records, s.attempts, T0)
    caps = [replace(cap, limit=max(0, u + rnd.randint(-2400, 2400))) for cap, u in zip(caps, used, strict=True)]
    budgets = [
        replace(b, capped=rnd.random() < 0.5, on_cap=rnd.choice([OnCap.HOLD, OnCap.DOWNGRADE]))
        if b.key in chosen
        else b
        for b in s.budgets
    ]
    return replace(s, budgets=budgets, caps=caps, cap_records=records), running, grace


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_estimates_with_caps_equal_the_every_second_oracle(seed: int) -> None:
    s, running, grace = capped_state(seed)
    limits = limits_for(seed, s, running)
    fast = estimate_starts(s, grace=grace, horizon=HORIZON, running=running, budget_s=1e9, limits=limits)
    slow = reference_estimates(s, grace=grace, horizon=HORIZON, running=running, limits=limits)
    assert fast == slow, f"seed {seed}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 4]))
def test_shared_quote_variants_with_caps_equal_one_forward_simulation_each(seed: int, gpus: int) -> None:
    s, running, grace = capped_state(seed)
    limits = limits_for(seed, s, running)
    rnd = random.Random(seed)
    budget = rnd.choice([b.key for b in s.budgets if b.parent is not None])
    seq = max((w.seq for w in s.pending), default=0) + 1
    variants = [Workload(QUOTE_ID, budget, gpus, "H100", m, s.now, seq) for m in (0, 600, 3600, 8 * HOUR)]
    horizon = 2 * HORIZON
    shared = quote_starts(s, variants, grace=grace, horizon=horizon, budget_s=1e9, running=running, limits=limits)
    for w, (start, reached, unfunded) in zip(variants, shared, strict=True):
        with_it = replace(s, pending=[*s.pending, w])
        found, plain_reached = forward(
            with_it, grace=grace, horizon=horizon, budget_s=1e9, only=[QUOTE_ID], running=running, limits=limits
        )
        assert (start, reached) == (found.get(QUOTE_ID), plain_reached), f"seed {seed}, M {w.min_runtime}"
        assert unfunded == _started_unfunded(with_it, grace, horizon, running, limits, start), f"seed {seed}"


def _started_unfunded(
    s: Snapshot, grace: int, horizon: int, running: dict[str, Workload], limits: dict[str, int], start: int | None
) -> bool:
    """unfunded46, the plain reading: the quote's workload, allocated (M > 0), is estimated at the
    simulation's own start of it (not brought earlier by a reservation) and its attempt then is
    unallocated: the pass downgraded it at its budget's cap."""
    end = s.now + horizon
    fw = est.Forward(s, grace, running, limits, end)
    fw.tick()
    while QUOTE_ID not in fw.started and fw.now < end:
        fw.now = fw.next_event(end)
        fw.tick()
    at = fw.started.get(QUOTE_ID)
    if start is None or at != start:
        return False
    attempt = fw.attempts[f"forward:{QUOTE_ID}:{at}"]
    return fw.known[QUOTE_ID].min_runtime > 0 and not attempt.allocated


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_the_kept_caps_equal_the_rule_at_every_instant(seed: int) -> None:
    """At every instant of a forward simulation, and of clones taken on the way, the budgets the
    books mark capped are those the rule marks over the plain records and the open attempts, and
    the next event is the plain walk's, every second scanned for a cap reached or lifted."""
    s, running, grace = capped_state(seed)
    end = s.now + 2 * HORIZON
    fw = est.Forward(s, grace, running, limits_for(seed, s, running), end)
    rnd = random.Random(seed ^ 0xB00C)
    fw.tick()
    for _ in range(60):
        if rnd.random() < 0.2:
            fw = fw.clone()
        assert fw.caps is not None
        assert fw.capped == fw.caps.plain_at(fw.attempts.values(), fw.now), f"seed {seed} at {fw.now}"
        assert {b.key for b in fw.base.budgets if b.capped} >= fw.capped
        kept = fw.next_event(end)
        assert kept == next_event_walk(fw, end), f"seed {seed} at {fw.now}"
        fw.now = kept
        if fw.now >= end:
            break
        fw.tick()


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(0, 400),
    st.lists(
        st.tuples(
            st.integers(-60, 60),
            st.integers(-60, 60),
            st.one_of(st.none(), st.integers(0, 3)),
            st.integers(0, 50),
            st.integers(0, 9),
            st.booleans(),
        ),
        max_size=10,
    ),
)
def test_a_cap_book_equals_the_rule_and_finds_each_change_exactly(
    period: int, limit: int, items: list[tuple[int, int, int | None, int, int, bool]]
) -> None:
    """CapBook (one cap's usage kept by difference) gives at every query the usage the rule
    counts (``cap_usage``: windowed usage over the period of the records and open attempts), and
    ``next_change`` the first later second at which ``reached`` turns, found by asking the rule at
    every second; with intervals, lumps, open attempts (an open interval, closed later by moving
    its end), records whose instants have already passed."""
    cap = Cap("a", limit, period)
    members = {"a": (0,)}
    book = CapBook(cap)
    records: list[UsageRecord] = []
    attempts: dict[str, Attempt] = {}
    t = -80
    for n, (start, end, gpus, amount, step, open_attempt) in enumerate(items):
        if open_attempt and gpus:
            a = Attempt(f"x{n}", "w", "a", tuple(("h", i) for i in range(gpus)), True, 0, start)
            attempts[a.id] = a
            book.interval(gpus, start, STILL_RUNNING)
        else:
            r = UsageRecord("a", start, end, gpus, amount if gpus is None else 0)
            records.append(r)
            book.add(r)
        t += step
        if attempts and step % 3 == 0:  # close the oldest open attempt at t
            a = attempts.pop(next(iter(attempts)))
            records.append(UsageRecord("a", a.started_at or 0, t, gpus=len(a.gpus)))
            book.interval(len(a.gpus), a.started_at or 0, STILL_RUNNING, -1)
            book.interval(len(a.gpus), a.started_at or 0, t)
        used = book.advance(t)
        assert used == cap_usage([cap], members, records, attempts.values(), t)[0], f"at {t}"
        horizon = t + 2 * period + 130
        was = cap.reached(used)
        plain = next(
            (
                u
                for u in range(t + 1, horizon + 1)
                if cap.reached(cap_usage([cap], members, records, attempts.values(), u)[0]) != was
            ),
            float("inf"),
        )
        assert book.next_change(horizon) == plain, f"at {t}"


# --- the two directions, on fixed cases --------------------------------------------------


def _two_budgets(on_cap: OnCap) -> list[Budget]:
    return [Budget("org", "org", None), Budget("a", "a", "org", on_cap=on_cap), Budget("b", "b", "org")]


def _case(on_cap: OnCap, *, limit: int, a_started_ago: int, b_limit: int) -> tuple[Snapshot, dict[str, int]]:
    """One host of 2 GPUs: ``a`` runs 1 GPU (allocated, started ``a_started_ago`` s ago, no
    wall-time limit), ``b`` the other (protected for 8 h, stopped by its wall-time limit
    ``b_limit`` s from now); ``a``'s 1-GPU workload waits. ``a`` has a cap of ``limit``
    GPU-seconds a day."""
    host = Host("h", "H100", {0: GpuHealth.HEALTHY, 1: GpuHealth.HEALTHY})
    attempts = [
        Attempt("ra", "wa", "a", (("h", 0),), True, HOUR, T0 - a_started_ago),
        Attempt("rb", "wb", "b", (("h", 1),), True, 8 * HOUR, T0 - 60),
    ]
    pending = [Workload("p", "a", 1, "H100", HOUR, T0 - 30, 1)]
    snap = Snapshot(T0, [host], _two_budgets(on_cap), attempts, pending, caps=[Cap("a", limit, 24 * HOUR)])
    return snap, {"wb": 60 + b_limit}


def test_a_budget_whose_running_work_reaches_its_cap_starts_its_next_work_unfunded_after_the_crossing() -> None:
    # Given a's running GPU at 1.5 GPU-hours of a 2 GPU-hour cap (reached 30 min from now) and b's
    # GPU freed by its wall-time limit 50 min from now
    snap, limits = _case(OnCap.DOWNGRADE, limit=2 * HOUR, a_started_ago=90 * 60, b_limit=50 * 60)
    fw = est.Forward(snap, 30, None, limits, T0 + 24 * HOUR)
    assert fw.capped == frozenset()
    # When the simulation runs until a's workload starts
    fw.tick()
    while "p" not in fw.started:
        fw.now = fw.next_event(T0 + 24 * HOUR)
        fw.tick()
        if fw.now == T0 + 30 * 60:
            assert fw.capped == {"a"}  # the crossing is an instant of the simulation
    # Then it starts at b's release, after the crossing: unfunded, as unallocated work
    assert fw.started["p"] == T0 + 50 * 60 + 30
    (started,) = [a for a in fw.attempts.values() if a.workload == "p"]
    assert not started.allocated


def test_a_budget_whose_running_work_reaches_its_cap_with_hold_gets_no_start_after_the_crossing() -> None:
    snap, limits = _case(OnCap.HOLD, limit=2 * HOUR, a_started_ago=90 * 60, b_limit=50 * 60)
    assert estimate_starts(snap, grace=30, limits=limits, horizon=24 * HOUR, budget_s=1e9) == {}
    # Below the cap until after b's release, it starts there, allocated
    snap, limits = _case(OnCap.HOLD, limit=2 * HOUR, a_started_ago=30 * 60, b_limit=50 * 60)
    assert estimate_starts(snap, grace=30, limits=limits, horizon=24 * HOUR, budget_s=1e9) == {"p": T0 + 50 * 60 + 30}


def test_a_cap_that_lifts_as_old_usage_leaves_the_period_gives_the_instant_of_the_lift() -> None:
    # Given a at its cap of 1 GPU-hour a day by 2 GPU-hours charged 23 h ago (an hour long), nothing
    # of a running, and a free GPU
    host = Host("h", "H100", {0: GpuHealth.HEALTHY, 1: GpuHealth.HEALTHY})
    old = UsageRecord("a", T0 - 24 * HOUR, T0 - 23 * HOUR, gpus=2)
    pending = [Workload("p", "a", 1, "H100", HOUR, T0 - 30, 1)]
    budgets = [replace(b, capped=b.key == "a") for b in _two_budgets(OnCap.HOLD)]
    snap = Snapshot(T0, [host], budgets, [], pending, caps=[Cap("a", HOUR, 24 * HOUR)], cap_records=[old])
    # Then it starts at the first second its usage in the period is below an hour: 2 GPUs ×
    # (T0 − 23 h − (t − 24 h)) < 3600 from t = T0 + 30 min + 1 s
    assert estimate_starts(snap, grace=30, budget_s=1e9) == {"p": T0 + 30 * 60 + 1}
    assert reference_estimates(snap, grace=30, horizon=31 * 60 + 5) == {"p": T0 + 30 * 60 + 1}


def test_states_where_following_the_caps_moves_an_estimate_equal_the_oracle() -> None:
    """The random states above in which following the caps changes some estimate (against the
    simulation with every budget's ``capped`` kept as it is at the start), about one in eight:
    the first eight such seeds, each against the every-second oracle (the property is not vacuous)."""
    hits = 0
    for seed in range(400):
        s, running, grace = capped_state(seed)
        limits = limits_for(seed, s, running)
        fast = estimate_starts(s, grace=grace, horizon=HORIZON, running=running, budget_s=1e9, limits=limits)
        frozen = replace(s, caps=(), cap_records=(), budgets=est.Forward(s, grace, running, limits).base.budgets)
        if fast == estimate_starts(frozen, grace=grace, horizon=HORIZON, running=running, budget_s=1e9, limits=limits):
            continue
        assert fast == reference_estimates(s, grace=grace, horizon=HORIZON, running=running, limits=limits), seed
        hits += 1
        if hits == 8:
            return
    raise AssertionError(f"only {hits} such states")
