"""The single-host search's candidate hosts kept between searches (scheduler/policy/victim_index.py,
est46) against their plain reading ``victim_hosts.candidate_hosts_walk``: the same bounds and hosts
in the same order at every search while attempts leave between searches (hosts bumped, the index
read again only there) and the preemptor's size, budget and allowed budgets vary (hypothesis);
a kept index gone stale is caught under ``check``. ``IncrementalScheduler(check=True)`` compares
them at every search of tests/policy/test_properties.py too."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.victim_index as victim_index
import scheduler.policy.victims as victims
from scheduler.policy.pass_state import PassState
from scheduler.policy.victim_hosts import candidate_hosts_walk
from tests.policy.oracle_harness import crowded_snapshot
from tests.policy.test_contract import random_snapshots

RANDOM = list(random_snapshots(150))


def _searches(ps: PassState, rng: random.Random, leave: float) -> int:
    """Every allocated single-host pending workload of the pass in a random order, each read from
    the kept index and by the walk; between two, each attempt leaves with probability ``leave``."""
    compared = 0
    pending = [w for w in ps.snap.pending if w.allocated and not ps.is_gang(w)]
    rng.shuffle(pending)
    for w in pending[:40] * 2:
        allowed = ps.room_budgets(w)
        names = victims._victim_host_names(ps.standing, allowed)
        ctx = ps.key_context(w)
        kept = [(b, hv.name) for b, hv in victim_index.candidates(ps, ctx, w, allowed, names)]
        walk = [(b, hv.name) for b, hv in candidate_hosts_walk(ps, ctx, w, allowed, names)]
        assert kept == walk, (w.id, kept, walk)
        compared += len(walk)
        for av in list(ps.state.attempts.values()):
            if not av.stopping and rng.random() < leave:
                ps.state.mark_stopping(av)
    return compared


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.0, 0.02, 0.1, 0.3]), st.booleans())
def test_the_kept_index_gives_the_walk_as_attempts_leave(seed: int, leave: float, crowded: bool) -> None:
    snap = crowded_snapshot(seed % 1000) if crowded else RANDOM[seed % len(RANDOM)]
    _searches(PassState(snap), random.Random(seed), leave)


def test_the_kept_index_is_read_and_not_vacuous() -> None:
    """Over the crowded passes the kept index answers searches it was built for earlier."""
    compared = kept = 0
    for seed, snap in enumerate([crowded_snapshot(seed) for seed in range(300)] + RANDOM):
        ps = PassState(snap)
        compared += _searches(ps, random.Random(seed), 0.05)
        kept += len(ps.standing.candidates)
    assert compared > 200 and kept > 50


def test_a_stale_kept_index_is_caught_under_check() -> None:
    """Under ``check`` the kept hosts are compared with the walk: a host left in the index after
    it changed, without the bump that says so, is caught."""
    caught = 0
    for seed in range(200):
        ps = PassState(crowded_snapshot(seed))
        for w in ps.snap.pending:
            if not w.allocated or ps.is_gang(w):
                continue
            allowed = ps.room_budgets(w)
            names = victims._victim_host_names(ps.standing, allowed)
            ctx = ps.key_context(w)
            got = list(victim_index.candidates(ps, ctx, w, allowed, names))
            if not got:
                continue
            ix = ps.standing.candidates[(w.model, allowed)]
            assert isinstance(ix, victim_index.CandidateIndex)
            group, place = ix.of[got[0][1].name]
            hosts = ix.groups[group]
            hosts[hosts.index(place)] = (place[0] + 1, place[1])  # its start moved, no bump
            ps.check = True
            with pytest.raises(AssertionError, match="kept candidate hosts"):
                list(victim_index.candidates(ps, ctx, w, allowed, names))
            caught += 1
            break
    assert caught > 20
