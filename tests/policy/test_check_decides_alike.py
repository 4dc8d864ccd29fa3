"""``IncrementalScheduler(check=True)`` runs every fast path's plain oracle beside it; the oracles
and the check's own searches (``SkipRuns._verify_floor``) must change nothing the pass decides:
on random clusters the checked scheduler decides as ``schedule`` and the unchecked scheduler.

chk49: ``_verify_floor`` searched a workload like a failed one at its floor of M; at a floor of 0
that workload was unallocated work, whose gang options (other hosts) the pass's memo then gave
to the next allocated gang of the same model, size and allowed budgets: it found no victims."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import scheduler.policy.gang_victims as gang_victims
from scheduler.policy import IncrementalScheduler, Snapshot, schedule
from scheduler.policy.core import Pass
from scheduler.policy.skips import SkipRuns
from scheduler.policy.types import Workload
from tests.policy import test_gang_reads, test_protected_host


def _alike(s: Snapshot) -> None:
    fresh = schedule(s)
    assert IncrementalScheduler(check=True)(s) == fresh
    assert IncrementalScheduler()(s) == fresh


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 20), st.integers(1, 25), st.sampled_from((0, 2)))
@example(311, 7, 13, 0)
@example(520414, 9, 14, 0)
@example(190287, 18, 20, 0)
def test_checked_decides_as_unchecked_with_gangs(seed: int, n_hosts: int, n_pending: int, reservations: int) -> None:
    """Gangs of 8 and 12, CPUs and memory asked and short, reservations 0 and 2."""
    _alike(test_gang_reads._cluster(seed, n_hosts, n_pending, reservations))


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 20), st.integers(1, 25), st.sampled_from((0, 2)))
def test_checked_decides_as_unchecked_on_busy_hosts(seed: int, n_hosts: int, n_pending: int, reservations: int) -> None:
    """Hosts of 2, 4 and 8 GPUs nearly full of protected and unprotected work, reservations 0 and 2."""
    s = test_protected_host._cluster(seed, n_hosts, n_pending)
    _alike(replace(s, max_reservations=reservations))


def test_the_floor_search_stays_allocated_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The floor's search asks for allocated work (M at least 1), never unallocated work, whose
    rules differ."""
    searched: list[int] = []
    real = gang_victims.search_gang

    def spy(ps: object, w: Workload) -> object:
        searched.append(w.min_runtime)
        return real(ps, w)  # type: ignore[arg-type]

    monkeypatch.setattr("scheduler.policy.victims.search_gang", spy)
    floors: list[int] = []
    real_floor = SkipRuns._verify_floor

    def counted(self: SkipRuns, w: Workload, floor: int, reclaim: object) -> None:
        floors.append(floor)
        real_floor(self, w, floor, reclaim)  # type: ignore[arg-type]

    monkeypatch.setattr(SkipRuns, "_verify_floor", counted)
    s = test_gang_reads._cluster(311, 7, 13, 0)
    assert IncrementalScheduler(check=True)(s) == schedule(s)
    assert 0 in floors  # a floor of 0 was verified
    assert searched and min(searched) >= 1


def test_the_gang_options_kept_in_a_pass_tell_allocated_work_from_unallocated() -> None:
    """Unallocated work reads other levels of the whole hosts than allocated work
    (``gang_victims.vacate_level``; h04 here): the pass's memo keeps the two answers apart."""
    s = test_gang_reads._cluster(311, 7, 13, 0)
    w1 = next(w for w in s.pending if w.id == "w1")
    p = Pass(s)
    alone = gang_victims.gang_options(p, w1, 4)
    p = Pass(s)
    unallocated = gang_victims.gang_options(p, replace(w1, id="u", min_runtime=0), 4)
    assert unallocated != alone
    assert gang_victims.gang_options(p, w1, 4) == alone
