"""The scheduling contract in one place (scheduler/policy/contract.py, DESIGN.md §3.4).

Swapping two victim criteria in the contract's key changes every consumer alike. Two checks:

- against the reference scheduler (scheduler/policy/reference.py, an independent reading whose
  ``victim_key`` takes its criteria in the order of ``reference.CRITERIA``, by name): the same two
  criteria are swapped in both, and ``schedule()`` must decide what ``reference_schedule()``
  decides on every pass of random clusters and crowded passes of tests/policy/oracle_harness.py —
  every fast-path consumer (reclaim index, single-host and gang searches, their bounds) follows
  the one swapped statement;
- against a brute force here over the contract's own ``victim_class`` and ``victim_key``, on
  denser single passes than the harness reaches (hosts of 8 GPUs full of up to 8 attempts, gangs
  over 5 full hosts): the fast path's victims equal every inclusion-minimal sufficient set
  enumerated and ordered by the (swapped) key.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from itertools import combinations

import pytest

from scheduler.policy import Snapshot, contract, reference, room_index, schedule
from scheduler.policy.pass_state import PassState
from scheduler.policy.reference import reference_schedule
from scheduler.policy.types import Attempt
from tests.policy.builders import T0, H, host, lump, pending, snap, tree
from tests.policy.oracle_harness import Tally, compare_once, crowded_snapshot, decisions_view, run_cluster

DEFAULT = contract.CRITERIA


def swapped(i: int, j: int) -> tuple[contract.Criterion, ...]:
    """The criteria with numbers ``i`` and ``j`` (1-based, as in DESIGN.md §3.4) exchanged."""
    c = list(DEFAULT)
    c[i - 1], c[j - 1] = c[j - 1], c[i - 1]
    return tuple(c)


def swap_both(monkeypatch: pytest.MonkeyPatch, i: int, j: int) -> None:
    """Swap criteria ``i`` and ``j`` in the contract and, by name, in the reference."""
    monkeypatch.setattr(contract, "CRITERIA", swapped(i, j))
    names = list(reference.CRITERIA)
    names[i - 1], names[j - 1] = names[j - 1], names[i - 1]
    monkeypatch.setattr(reference, "CRITERIA", tuple(names))


ORDERS = {"default": DEFAULT, "gpus<->victims": swapped(2, 3), "sides<->starts": swapped(4, 5)}

SWAPS: dict[str, tuple[int, int] | None] = {
    "default": None,
    "allocated<->gpus": (1, 2),
    "gpus<->victims": (2, 3),
    "victims<->sides": (3, 4),
    "sides<->starts": (4, 5),
    "allocated<->starts": (1, 5),
}
CHANGES_CROWDED = {"allocated<->gpus", "gpus<->victims", "allocated<->starts"}
"""Swaps that change the reference's decisions on some of the crowded passes below (the others
are shown to matter by the targeted tests at the end)."""


CROWDED_SEEDS = range(300)


@cache
def default_crowded_views() -> dict[int, dict[str, object]]:
    """The reference's decisions on the crowded passes under DESIGN.md's order: the same for
    every swap below, so decided once (under the contract's own order, as no swap is applied
    while it is first called: the test asserts it)."""
    assert contract.CRITERIA == DEFAULT and tuple(reference.CRITERIA) == tuple(c.__name__ for c in DEFAULT)
    return {
        seed: decisions_view(snap, reference_schedule(snap))
        for seed, snap in ((seed, crowded_snapshot(seed)) for seed in CROWDED_SEEDS)
    }


def test_the_reference_names_the_contracts_criteria_in_its_order():
    assert tuple(c.__name__ for c in contract.CRITERIA) == reference.CRITERIA


@pytest.mark.parametrize("order", SWAPS)
def test_schedule_follows_a_swapped_key_as_the_reference_does(order, monkeypatch):
    # Given the crowded passes' decisions under DESIGN.md's order
    seeds = CROWDED_SEEDS
    before = default_crowded_views()
    # and two criteria swapped in both the contract and the reference (or none)
    pair = SWAPS[order]
    if pair is not None:
        swap_both(monkeypatch, *pair)
    # When 150 random clusters run through the simulator and 300 crowded passes are decided
    tally = Tally()
    for seed in range(150):
        run_cluster(seed, tally, quick=True)
    after: dict[int, dict[str, object]] = {}
    for seed in seeds:
        compare_once(seed, tally, after)  # the reference's decisions under the swapped order
    # Then schedule() decides what the reference decides on every pass
    for seed, s, diff in tally.unknown[:1]:
        pytest.fail(f"{order}, seed {seed}, now={s.now}:\n" + "\n".join(diff) + f"\n{s!r}")
    assert tally.preemptions > 100  # the comparison is not vacuous
    changed = sum(after[seed] != before[seed] for seed in seeds)
    assert (changed > 0) == (order in CHANGES_CROWDED)


def brute_force(s: Snapshot) -> set[str] | None:
    """Attempt ids the contract says the only pending workload preempts, or None (no preemption)."""
    ps = PassState(s)
    (w,) = s.pending
    st = ps.state
    if any(len(hv.free) >= w.gpus for hv in st.hosts.values() if hv.model == w.model and hv.active):
        return None  # it starts on free GPUs
    ctx = ps.key_context(w)
    best: tuple[tuple[object, ...], set[str]] | None = None
    for hv in st.hosts.values():
        cands = [st.attempts[a] for a in hv.attempts if ps.victim_class(w, st.attempts[a]) == contract.NOW]
        for k in range(1, len(cands) + 1):
            for subset in combinations(cands, k):
                freed = [v.on_host.get(hv.name, 0) for v in subset]
                got = len(hv.free) + sum(freed)
                if got < w.gpus or any(got - f >= w.gpus for f in freed):
                    continue  # not sufficient, or not inclusion-minimal
                key = contract.victim_key(ctx, list(subset), [hv.name])
                if best is None or key < best[0]:
                    best = (key, {v.attempt.id for v in subset})
    return None if best is None else best[1]


def brute_force_gang(s: Snapshot) -> set[str] | None:
    """As :func:`brute_force` for a gang: every set of k whole hosts whose work is all class NOW."""
    ps = PassState(s)
    (w,) = s.pending
    st = ps.state
    size = st.largest[w.model]
    k = w.gpus // size
    whole = [hv for hv in st.hosts.values() if hv.model == w.model and hv.active and hv.size == size]
    if sum(len(hv.free) == size for hv in whole) >= k:
        return None  # it starts on whole free hosts
    ctx = ps.key_context(w)
    options = [hv for hv in whole if all(ps.victim_class(w, st.attempts[a]) == contract.NOW for a in hv.attempts)]
    best: tuple[tuple[object, ...], set[str]] | None = None
    for combo in combinations(options, k):
        victims = {a: st.attempts[a] for hv in combo for a in hv.attempts}
        if not victims:
            continue
        key = contract.victim_key(ctx, [victims[a] for a in sorted(victims)], [hv.name for hv in combo])
        if best is None or key < best[0]:
            best = (key, set(victims))
    return None if best is None else best[1]


def fast_path(s: Snapshot) -> set[str] | None:
    d = schedule(s)
    if d.starts:
        return None
    stops = {x.attempt for x in d.stops}
    if stops:
        (w,) = s.pending
        assert len(d.nominations[w.id]) == w.gpus  # §3.4 rule 3
    return stops or None


def oracle(s: Snapshot) -> set[str] | None:
    """What the reference scheduler preempts for the only pending workload, as :func:`fast_path`."""
    d = reference_schedule(s)
    return None if d.starts else ({x.attempt for x in d.stops} or None)


def random_snapshots(n: int, gangs: bool = False) -> Iterator[Snapshot]:
    rng = random.Random(12)
    for _ in range(n):
        if gangs:
            hosts = [host(f"h{i}", 4, fabric=f"f{i % 3}") for i in range(rng.randint(2, 5))]
        else:
            hosts = [host(f"h{i}", rng.choice([4, 8]), fabric=f"f{i % 2}") for i in range(rng.randint(1, 3))]
        attempts = []
        for hv in hosts:
            i = 0
            size = len(hv.gpu_health)
            while i < size:
                g = rng.randint(1, 3)
                if rng.random() < 0.2:
                    i += g  # leave them free
                    continue
                allocated = rng.random() < 0.7
                m = rng.choice([H, 4 * H]) if allocated else 0
                started = T0 - rng.choice([1, 2, 3, 5]) * H
                gpus = tuple((hv.name, j) for j in range(i, min(i + g, size)))
                aid = f"x{len(attempts)}"
                attempts.append(Attempt(aid, aid, rng.choice(["a", "b", "c"]), gpus, allocated, m, started))
                i += g
        usage = [lump(b, rng.randint(0, 300)) for b in ("a", "b", "c")]
        w = pending("w", rng.choice(["a", "b", "c"]), rng.choice([8, 12]) if gangs else rng.randint(1, 8))
        yield snap(hosts, tree("a", "b", "c"), attempts, [w], usage)


@pytest.mark.parametrize("order", ORDERS)
def test_the_fast_path_chooses_the_victims_the_contract_key_says_under_any_order(order, monkeypatch):
    # Given the contract's key with two criteria swapped (or not)
    monkeypatch.setattr(contract, "CRITERIA", ORDERS[order])
    # When 300 random clusters each get one allocated workload that may preempt
    # Then the fast path preempts exactly the set a brute force under the same key picks.
    preempted = 0
    for s in random_snapshots(300):
        want = brute_force(s)
        assert fast_path(s) == want, s
        preempted += want is not None
    assert preempted > 50  # the comparison is not vacuous


@pytest.mark.parametrize("order", ORDERS)
def test_the_gang_search_chooses_the_hosts_the_contract_key_says_under_any_order(order, monkeypatch):
    # Given the contract's key with two criteria swapped (or not)
    monkeypatch.setattr(contract, "CRITERIA", ORDERS[order])
    # When 300 random clusters of 4-GPU hosts each get one allocated gang of 8 or 12 GPUs
    # Then the fast path preempts exactly the set a brute force under the same key picks.
    preempted = 0
    for s in random_snapshots(300, gangs=True):
        want = brute_force_gang(s)
        assert fast_path(s) == want, s
        preempted += want is not None
    assert preempted > 20  # the comparison is not vacuous


def test_swapping_gpus_and_victims_changes_the_choice_everywhere(monkeypatch):
    # Given h1 with one 3-GPU unallocated attempt (latest started), and h2 with two 1-GPU
    # unallocated attempts; w needs 2 GPUs and none is free.
    h1, h2 = host("h1", 3), host("h2", 2)
    big = Attempt("big", "big", "b", tuple(("h1", i) for i in range(3)), False, 0, T0 - H)
    one = Attempt("one", "one", "b", (("h2", 0),), False, 0, T0 - 2 * H)
    two = Attempt("two", "two", "b", (("h2", 1),), False, 0, T0 - 3 * H)
    s = snap([h1, h2], tree("a", "b"), [big, one, two], [pending("w", "a", 2)])
    # Then by §3.4 fewer GPUs preempted (2) beats fewer victims (1)...
    assert fast_path(s) == brute_force(s) == {"one", "two"}
    # ...and with criteria 2 and 3 swapped in the contract, fewer victims wins, for both.
    assert oracle(s) == {"one", "two"}
    swap_both(monkeypatch, 2, 3)
    assert not contract.counts_lead()
    assert fast_path(s) == brute_force(s) == oracle(s) == {"big"}


def test_swapping_sides_and_start_times_changes_the_choice_everywhere(monkeypatch):
    # Given two unprotected 2-GPU attempts on h1: b's (more over-served, started earlier) and c's
    # (less over-served, started later); w of a needs 2 GPUs.
    h1 = host("h1", 4)
    vb = Attempt("vb", "vb", "b", (("h1", 0), ("h1", 1)), True, H, T0 - 5 * H)
    vc = Attempt("vc", "vc", "c", (("h1", 2), ("h1", 3)), True, H, T0 - 2 * H)
    s = snap([h1], tree("a", "b", "c"), [vb, vc], [pending("w", "a", 2)], [lump("b", 400), lump("c", 100)])
    # Then by §3.4 the most over-served side goes first...
    assert fast_path(s) == brute_force(s) == {"vb"}
    # ...and with criteria 4 and 5 swapped, the most recently started does, for both.
    assert oracle(s) == {"vb"}
    swap_both(monkeypatch, 4, 5)
    assert contract.counts_lead()
    assert fast_path(s) == brute_force(s) == oracle(s) == {"vc"}


def test_the_room_index_is_checked_against_fresh_room_profiles():
    # Given a cluster's standing, the index of its room profiles (Standing.agg) agrees with a
    # fresh contract.host_room on every host for every pending allocated workload...
    from scheduler.policy.incremental import room_index_differences
    from scheduler.policy.standing import Standing
    from scheduler.policy.tree import BudgetTree
    from scheduler.policy.usage import pass_loads

    s = next(iter(random_snapshots(1)))
    standing = Standing(s)
    tree_ = BudgetTree(s.budgets)
    load = pass_loads(s, tree_, standing.noms, {w.id: w for w in s.pending})[1]
    assert room_index_differences(standing, tree_, load, s.pending) == []
    # ...and a stale index entry is reported.
    host_name, per = next((h, d) for h, d in standing.agg.items() if d)
    next(iter(per.values()))[0] += 1
    assert any(host_name in d for d in room_index_differences(standing, tree_, load, s.pending))


def test_rule2_thresholds_answer_as_rule2_for_every_commitment() -> None:
    """:func:`contract.rule2_thresholds` (rule 2 for all commitments at once, used by
    ``PassState.room_budgets``) and :func:`contract.allowed_reader` (the screen's, asked again
    per budget) allow exactly what :func:`contract.allowed_budgets` allows."""
    from scheduler.policy.tree import BudgetTree
    from scheduler.policy.types import Budget

    rnd = random.Random(12)
    for _ in range(300):
        budgets = [Budget("org", "org", None)]
        for i in range(rnd.randint(1, 4)):
            budgets.append(Budget(f"p{i}", f"p{i}", "org", shares=rnd.randint(1, 4)))
            for j in range(rnd.randint(0, 3)):
                budgets.append(Budget(f"p{i}/q{j}", f"q{j}", f"p{i}", shares=rnd.randint(1, 4)))
        t = BudgetTree(budgets)
        keys = [b.key for b in budgets]
        load = {k: rnd.choice([0, rnd.randint(0, 50) * 3600, rnd.randint(0, 10**7)]) for k in keys}
        for k in keys:  # a parent's load is its children's sum (ties are frequent at 0)
            if t.children[k]:
                load[k] = sum(load[c] for c in t.children[k]) + rnd.choice([0, 0, 3600])
        some = {k for k in [*keys, "gone"] if rnd.random() < 0.6}
        reader = contract.allowed_reader(t, load, some)
        for p in keys:
            thresholds = contract.rule2_thresholds(t, load, p, [*keys, "gone"])
            for c in {0, 1, 3599, 3600, 7200, rnd.randint(0, 10**7), *(int(x) for x in thresholds[0] if abs(x) < 1e18)}:
                for cc in (c - 1, c, c + 1):
                    if cc < 0:
                        continue
                    assert contract.allowed_from_thresholds(*thresholds, cc) == contract.allowed_budgets(
                        t, load, p, cc, [*keys, "gone"]
                    ), (p, cc)
                    # the screen's reader (thresholds kept per budget, asked again) over a subset
                    assert reader(p, cc) == contract.allowed_budgets(t, load, p, cc, some), (p, cc)


def test_the_room_base_answers_as_the_room_profile() -> None:
    """A reservation reads :class:`room_index.RoomBase` (kept between passes per host version) in
    place of :func:`contract.host_room`: for every host, allocated workload, rule 2's budgets
    (the pass's, and random subsets of the tree's other budgets) and instant, the same
    ``over_time`` and ``vacated_at`` (crowded instants: leaving, starting, protected,
    unallocated and nominated work)."""
    from scheduler.policy.tree import BudgetTree
    from tests.policy.oracle_harness import crowded_snapshot

    rnd = random.Random(13)
    seen = {"events": 0, "vacated": 0, "nominated": 0}
    snaps = [crowded_snapshot(seed) for seed in range(150)] + list(random_snapshots(60))
    for i, s in enumerate(snaps[:100:2]):  # some with a nomination (of a pending workload, on owned GPUs or not)
        h = s.hosts[0]
        gpus = tuple((h.name, j) for j in sorted(rnd.sample(sorted(h.gpu_health), rnd.randint(1, 2))))
        snaps.append(replace(s, nominations={s.pending[i % len(s.pending)].id: gpus}))
    for s in snaps:
        ps = PassState(s)
        st = ps.state
        known = BudgetTree(s.budgets).budgets
        for w in s.pending:
            if not w.allocated:
                continue
            others = sorted(k for k in known if k != w.budget)
            choices = [ps.room_budgets(w), frozenset(), frozenset(others)]
            choices += [frozenset(rnd.sample(others, rnd.randint(0, len(others)))) for _ in range(3)]
            for allowed in choices:
                for now in (s.now, s.now + rnd.randint(1, 4 * H)):
                    for hv in st.hosts.values():
                        base = room_index.room_base(st, hv)
                        room = contract.host_room(st, hv, w, allowed, known, now)
                        assert base.over_time(allowed, now) == room.over_time(now), (hv.name, w.id, allowed)
                        assert base.vacated_at(allowed, now) == room.vacated_at(now), (hv.name, w.id, allowed)
                        seen["events"] += bool(room.over_time(now)[1])
                        seen["vacated"] += room.vacated_at(now) is not None
                        seen["nominated"] += room.nominated
    assert seen["events"] > 100 and seen["vacated"] > 100 and seen["nominated"] > 100, seen
