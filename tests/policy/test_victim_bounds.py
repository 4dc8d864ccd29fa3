"""The victim search's fast paths against plain computations (scheduler/policy/victims.py).

- ``contract.key_bound``: the host order of the single-host search. On crowded and random
  passes, under the contract's order and two swapped ones, every host that holds a victim set
  is a candidate, the candidates come in ascending bound order, and every inclusion-minimal
  sufficient set there (plain enumeration over ``contract.victim_class``) has a key at least
  its host's bound: so stopping at the first bound above the best key loses nothing.
- ``victim_hosts.candidate_hosts`` (est63): one loop over the hosts with the heap ordered by
  ``victim_hosts.bound_order``, against its plain reading ``candidate_hosts_walk`` (ranks among the
  kept hosts' budgets, the heap by ``key_bound``), on the same passes and orders, every host of
  the model and only the victim hosts; ``victim_hosts.bound_order`` against ``(key_bound, host)`` on random
  bounds under random orders of the criteria, one dropped (hypothesis).
- ``gang_victims.vacate_level``: the gang search's host levels, against the room index's full
  counts (``room_index.indexed_counts(...).worst()``).
- The victim rows kept between passes are checked against fresh rows by
  ``IncrementalScheduler(check=True)`` on every pass of tests/policy/test_properties.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.gang_victims as gang_victims
import scheduler.policy.victim_hosts as victim_hosts
import scheduler.policy.victims as victims
from scheduler.policy import Snapshot, contract, room_index
from scheduler.policy.pass_state import PassState
from scheduler.policy.reclaim import ReclaimIndex
from scheduler.policy.types import Workload
from scheduler.policy.victim_hosts import candidate_hosts, candidate_hosts_walk
from tests.policy.oracle_harness import crowded_snapshot
from tests.policy.test_contract import ORDERS, random_snapshots


def snapshots() -> list[Snapshot]:
    return [crowded_snapshot(seed) for seed in range(150)] + list(random_snapshots(150))


def plain_sets(ps: PassState, w: Workload, name: str) -> list[tuple[tuple[object, ...], list[str]]]:
    """Every inclusion-minimal sufficient victim set on one host, with its key (GPUs, CPUs and memory)."""
    st = ps.state
    hv = st.hosts[name]
    allowed = ps.room_budgets(w)
    cands = [
        st.attempts[a]
        for a in hv.attempts
        if st.attempts[a].on_host.get(name, 0) > 0
        and contract.victim_class(st.attempts[a], w, allowed, ps.tree.budgets) == contract.NOW
    ]
    vics = [(c, c.on_host[name]) for c in cands]
    sets = victims.minimal_sets_with_resources(st, hv, w, vics, len(hv.free))
    ctx = ps.key_context(w)
    out = []
    for mask, _ in sets:
        chosen = [vics[i][0] for i in range(len(vics)) if mask >> i & 1]
        out.append((contract.victim_key(ctx, chosen, [name]), [c.attempt.id for c in chosen]))
    return out


@pytest.mark.parametrize("order", ORDERS)
def test_the_key_bound_is_below_every_victim_set_of_its_host(order, monkeypatch):
    monkeypatch.setattr(contract, "CRITERIA", ORDERS[order])
    checked = 0
    for s in snapshots():
        ps = PassState(s)
        for w in s.pending:
            if not w.allocated or ps.is_gang(w):
                continue
            allowed = ps.room_budgets(w)
            ctx = ps.key_context(w)
            got = list(candidate_hosts(ps, ctx, w, allowed, None))  # every host of the model
            bounds = [b for b, _ in got]
            assert bounds == sorted(bounds)
            bound = {hv.name: b for b, hv in got}
            for hv in ps.state.hosts.values():
                if hv.model != w.model or not hv.active:
                    continue
                sets = plain_sets(ps, w, hv.name)
                if sets:
                    assert hv.name in bound, (s, w.id, hv.name)
                for key, _ in sets:
                    assert key >= bound[hv.name], (s, w.id, key, bound[hv.name])
                    checked += 1
    assert checked > 200  # not vacuous


@pytest.mark.parametrize("order", ORDERS)
def test_the_candidate_hosts_come_as_their_walk_gives_them(order, monkeypatch):
    """The one-loop host order equals the plain one (bounds and hosts, in order), for every host
    of the model and for the victim hosts of the allowed budgets (the search's ``names``)."""
    monkeypatch.setattr(contract, "CRITERIA", ORDERS[order])
    compared = 0
    for s in snapshots():
        ps = PassState(s)
        for w in s.pending:
            if not w.allocated or ps.is_gang(w):
                continue
            allowed = ps.room_budgets(w)
            ctx = ps.key_context(w)
            for names in (None, victims._victim_host_names(ps.standing, allowed)):
                fast = [(b, hv.name) for b, hv in candidate_hosts(ps, ctx, w, allowed, names)]
                walk = [(b, hv.name) for b, hv in candidate_hosts_walk(ps, ctx, w, allowed, names)]
                assert fast == walk, (s, w.id, names)
                compared += len(walk)
    assert compared > 500  # not vacuous


def test_a_wrong_candidate_order_is_caught_under_check(monkeypatch):
    """Under ``check`` the search compares the heap with the walk: a host order that differs
    (the leading counts read backwards) is caught."""
    monkeypatch.setattr(victim_hosts, "bound_order", lambda: lambda b: (-b[1], -b[2], b[0]))
    caught = 0
    for s in snapshots():
        ps = PassState(s)
        ps.check = True
        for w in s.pending:
            if not w.allocated or ps.is_gang(w):
                continue
            allowed = ps.room_budgets(w)
            walk = list(candidate_hosts_walk(ps, ps.key_context(w), w, allowed, None))
            if len({b[:2] for b, _ in walk}) < 2:
                continue  # the backwards order may give the same hosts in the same order
            with pytest.raises(AssertionError, match="candidate hosts"):
                list(candidate_hosts(ps, ps.key_context(w), w, allowed, None))
            caught += 1
    assert caught > 20


def _unbounded(*_: object) -> int:
    """A criterion :func:`contract.key_bound` knows no bound of (it stops there)."""
    return 0


BOUNDS = st.builds(
    contract.SetBound,
    st.sampled_from(["h1", "h2", "h10", "a"]),
    st.integers(0, 4),
    st.integers(-2, 4),
    st.tuples(st.just(0), st.integers(0, 3)),
    st.integers(-5, 0),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(BOUNDS, min_size=2, max_size=8), st.permutations(range(len(contract.CRITERIA))), st.integers(0, 8))
def test_bound_order_sorts_as_the_key_bound_and_host(bounds, perm, cut):
    """Under any order of the criteria, the first ``cut`` of them (a criterion with no bound
    after: key_bound stops there), ``victim_hosts.bound_order`` sorts as ``(key_bound, host)``."""
    orig = contract.CRITERIA
    criteria = tuple(orig[i] for i in perm)[:cut] + (_unbounded,) + tuple(orig[i] for i in perm)[cut:]
    try:
        contract.CRITERIA = criteria  # type: ignore[misc] (monkeypatch is function-scoped)
        fast = sorted(bounds, key=victim_hosts.bound_order())
        plain = sorted(bounds, key=lambda b: (contract.key_bound(b), b.host))
    finally:
        contract.CRITERIA = orig  # type: ignore[misc]
    assert [(contract.key_bound(b), b.host) for b in fast] == [(contract.key_bound(b), b.host) for b in plain]


def test_vacate_level_is_the_indexed_level():
    seen = {0: 0, 1: 0, None: 0}
    for s in snapshots():
        ps = PassState(s)
        for w in s.pending:
            allowed = ps.room_budgets(w)
            classes = ps.budget_classes(w)
            for hv in ps.state.hosts.values():
                full = room_index.indexed_counts(ps.state, hv, ps.standing.agg.get(hv.name), classes).worst()
                want = full if full <= 1 else None
                assert gang_victims.vacate_level(ps, w, hv, allowed) == want, (s, w.id, hv.name)
                seen[want] += 1
    assert all(seen.values()), seen  # every answer seen


def test_reclaim_entries_only_on_hosts_with_unallocated_work():
    """``ReclaimIndex.best`` builds its heaps from the hosts with unallocated work only: every
    other host has no entry (its :meth:`ReclaimIndex._entry` is None for every size)."""
    entries = 0
    for s in snapshots():
        ps = PassState(s)
        index = ReclaimIndex(ps.state, ps.standing.hosts_by_model)
        for hv in ps.state.hosts.values():
            for n in range(1, hv.size + 1):
                e = index._entry(hv, n)
                assert e is None or hv.unalloc, (s, hv.name, n)
                entries += e is not None
    assert entries > 20  # not vacuous
