"""The host a ``protected_work`` reason names where no reservation ranking is kept
(``reason_hosts.earliest_protected``): read over ``reserve.bound_hosts`` only (``walk_bound``, tick48), compared
under ``check`` with the plain walk over every host of the model."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.reason_hosts as reason_hosts
import scheduler.policy.reserve as reserve
from scheduler.policy import IncrementalScheduler, PendingReason, Snapshot, schedule
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree

BUDGETS = ("a", "b", "c", "d")


def _cluster(seed: int, n_hosts: int, n_pending: int) -> Snapshot:
    """Random hosts (some with free GPUs), each GPU held or not by allocated work of a random
    budget (protected for a random time, some unprotected, some leaving) or unallocated work;
    pending workloads of every budget; no reservations (``max_reservations`` 0), so every
    ``protected_work`` reason reads the walk."""
    rng = random.Random(seed)
    hosts = [host(f"h{i:02d}", rng.choice((2, 4, 8))) for i in range(n_hosts)]
    attempts = []
    for h in hosts:
        g = 0
        while g < h.size:
            n = rng.randint(1, h.size - g)
            if rng.random() < 0.85:
                kind = rng.random()
                attempts.append(
                    running(
                        f"r{len(attempts)}",
                        rng.choice(BUDGETS),
                        [(h.name, g + j) for j in range(n)],
                        m=rng.choice((H, 2 * H, 4 * H, 8 * H)),
                        started=T0 - rng.choice((0, H // 2, H, 3 * H)) if kind > 0.1 else None,
                        allocated=kind > 0.2,
                        stopping=rng.random() < 0.05,
                    )
                )
            g += n
    pend = [
        pending(f"w{i}", rng.choice(BUDGETS), rng.choice((1, 1, 2, 4, 8)), m=rng.choice((H, 2 * H)), seq=i)
        for i in range(n_pending)
    ]
    usage = [lump(b, rng.randint(0, 400)) for b in BUDGETS]
    return snap(hosts, tree(*BUDGETS), attempts, pend, usage, max_reservations=0)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 24), st.integers(1, 30))
def test_the_bound_hosts_name_the_walks_protected_work_host(seed: int, n_hosts: int, n_pending: int) -> None:
    """Under ``check`` each walk over the bound's hosts is compared with the plain walk over every
    host (an AssertionError if they differ); the checked pass decides as a fresh one."""
    s = _cluster(seed, n_hosts, n_pending)
    assert IncrementalScheduler(check=True)(s) == schedule(s)


def test_the_random_clusters_reach_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clusters above give ``protected_work`` reasons without reservations (the walk's path),
    and the walks read hosts' start floors (tick49's skip)."""
    real = reason_hosts.start_floor
    floors = []
    monkeypatch.setattr(reason_hosts, "start_floor", lambda ps, hv, n: floors.append(hv.name) or real(ps, hv, n))
    seen = 0
    for seed in range(40):
        d = schedule(_cluster(seed, 12, 20))
        assert not d.reservations
        seen += sum(1 for info in d.pending.values() if info.reason == PendingReason.PROTECTED_WORK)
    assert seen > 20
    assert len(floors) > 100


def test_a_bound_that_leaves_out_the_earliest_host_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """h2's room comes first (protected 1 h, h1's 2 h); a bound that drops it names h1, and
    ``check`` says so."""
    a1 = running("A1", "a", [("h1", i) for i in range(4)], m=3 * H, started=T0 - H)
    a2 = running("A2", "a", [("h2", i) for i in range(4)], m=2 * H, started=T0 - H)
    s = snap([host("h1", 4), host("h2", 4)], tree("a", "b"), [a1, a2], [pending("P1", "b", 2)], [lump("a", 1000)])
    s = replace(s, max_reservations=0)
    info = schedule(s).pending["P1"]
    assert (info.reason, info.detail["host"], info.detail["protected_until"]) == (
        PendingReason.PROTECTED_WORK,
        "h2",
        T0 + H,
    )
    real = reserve.bound_hosts
    monkeypatch.setattr(reserve, "bound_hosts", lambda *a: [hv for hv in real(*a) if hv.name != "h2"])
    assert schedule(s).pending["P1"].detail["host"] == "h1"
    with pytest.raises(AssertionError, match="bound h1 != walk h2"):
        IncrementalScheduler(check=True)(s)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 16), st.integers(1, 20))
def test_the_start_floor_is_below_every_start(seed: int, n_hosts: int, n_pending: int) -> None:
    """``reason_hosts.start_floor`` (tick49: the walk skips a host whose floor cannot beat the best
    found) is at or below every start ``reserve.host_start`` reads in a pass, whatever the
    workload's allowed budgets."""
    s = _cluster(seed, n_hosts, n_pending)
    real = reserve.host_start

    def checked(ps, w, hv, allowed, key=None):  # type: ignore[no-untyped-def]
        t = real(ps, w, hv, allowed, key)
        if t is not None:
            floor = reason_hosts.start_floor(ps, hv, w.gpus)
            assert floor <= t, (w.id, hv.name, floor, t)
        return t

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reserve, "host_start", checked)
        schedule(s)


def test_a_floor_above_the_earliest_start_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """h1 (protected 2 h) is read first, h2 (1 h) beats it: its floor is ``T0 + H``; a floor
    that claims later skips h2, names h1, and ``check`` says so."""
    a1 = running("A1", "a", [("h1", i) for i in range(4)], m=3 * H, started=T0 - H)
    a2 = running("A2", "a", [("h2", i) for i in range(4)], m=2 * H, started=T0 - H)
    s = snap([host("h1", 4), host("h2", 4)], tree("a", "b"), [a1, a2], [pending("P1", "b", 2)], [lump("a", 1000)])
    s = replace(s, max_reservations=0)
    real = reason_hosts.start_floor
    floors = []

    def spy(ps, hv, n):  # type: ignore[no-untyped-def]
        floors.append((hv.name, real(ps, hv, n)))
        return floors[-1][1]

    monkeypatch.setattr(reason_hosts, "start_floor", spy)
    assert schedule(s).pending["P1"].detail["host"] == "h2"
    assert floors == [("h2", T0 + H)]
    monkeypatch.setattr(reason_hosts, "start_floor", lambda ps, hv, n: real(ps, hv, n) + 2 * H)
    assert schedule(s).pending["P1"].detail["host"] == "h1"
    with pytest.raises(AssertionError, match="bound h1 != walk h2"):
        IncrementalScheduler(check=True)(s)
