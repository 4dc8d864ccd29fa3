"""The single-host reservation's ranking kept in the pass's memo (reserve._earliest_single)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import scheduler.policy.reserve as reserve
from scheduler.policy import IncrementalScheduler, schedule
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree


def _crowded(n_hosts: int, n_pending: int):  # type: ignore[no-untyped-def]
    """Every host full of budget a's protected work, ending an hour apart (later on lower names);
    b, far less served, waits with workloads of one shape: each reserves the next host."""
    hosts = [host(f"h{i}") for i in range(n_hosts)]
    attempts = [
        running(f"a{i}", "a", [(f"h{i}", g) for g in range(8)], m=(n_hosts - i + 1) * H, started=T0 - H)
        for i in range(n_hosts)
    ]
    pend = [pending(f"w{i}", "b", 4, m=H, seq=i) for i in range(n_pending)]
    return snap(hosts, tree("a", "b"), attempts, pend, [lump("a", 5000)])


@pytest.mark.parametrize(("n_hosts", "n_pending"), [(1, 3), (4, 3), (6, 10)])
def test_kept_ranking_decides_as_the_walk(monkeypatch: pytest.MonkeyPatch, n_hosts: int, n_pending: int) -> None:
    ranked = []

    class Counted(reserve.Ranking):
        def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
            ranked.append(1)
            super().__init__(*args, **kw)

    calls = []
    real_earliest = reserve._earliest_single

    def earliest(*args, **kw):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real_earliest(*args, **kw)

    monkeypatch.setattr(reserve, "Ranking", Counted)
    monkeypatch.setattr(reserve, "_earliest_single", earliest)
    s = _crowded(n_hosts, n_pending)
    fresh = schedule(s)
    ranked.clear()
    calls.clear()
    dec = IncrementalScheduler(check=True)(s)  # every answer compared with the walk (ps.check)
    assert dec == fresh
    held = {wid: h for h, wid in dec.reservations.items()}
    assert len(held) == min(n_hosts, n_pending, s.max_reservations)
    assert (
        sorted(held.values(), key=lambda h: dec.reserved_start[[w for w, x in held.items() if x == h][0]])
        == [f"h{i}" for i in reversed(range(n_hosts))][: len(held)]
    )
    assert len(ranked) == 1 < len(calls)  # one ranking, read by every later workload of the shape


def test_kept_ranking_walks_on_past_reserved_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host leaving (a stopping attempt on all its GPUs): each search can start now on the
    first host not reserved, so rankings stop early and later searches walk on from there, past
    hosts another shape reserved meanwhile."""
    hosts = [host(f"h{i}") for i in range(6)]
    attempts = [running(f"a{i}", "a", [(f"h{i}", g) for g in range(8)], stopping=True) for i in range(6)]
    pend = [pending(f"w{i}", "b", 4 if i % 2 else 8, m=H, seq=i) for i in range(5)]
    s = snap(hosts, tree("a", "b"), attempts, pend)
    fresh = schedule(s)
    dec = IncrementalScheduler(check=True)(s)  # every answer compared with the walk (ps.check)
    assert dec == fresh
    assert dec.reservations == {f"h{i}": f"w{i}" for i in range(5)}
    assert set(dec.reserved_start.values()) == {T0}


def test_kept_host_starts_decide_as_fresh_passes_as_time_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same cluster at later instants (protections ending one by one): each host's start
    instant is kept between passes while its version stands (``Standing.starts``) and read
    again with the new ``now`` (reserve.host_start); the decisions are a fresh pass's at every
    instant, under ``check`` every kept answer equals a fresh one, and later passes compute
    fewer room profiles than the first."""

    computed: list[int] = []
    real = reserve._single_start

    def counted(*args, **kw):  # type: ignore[no-untyped-def]
        computed.append(1)
        return real(*args, **kw)

    crowded = _crowded(6, 10)
    # one more host, its GPUs held by an attempt already stopping, release unknown: room from
    # ``now`` (a start instant that moves with time, clamped)
    leaving = running("x", "a", [("h9", g) for g in range(8)], started=T0 - 2 * H, stopping=True)
    base = replace(crowded, hosts=[*crowded.hosts, host("h9")], attempts=[*crowded.attempts, leaving])
    instants = [T0, T0 + 60, T0 + 600, T0 + H + 1, T0 + H + 60, T0 + 3 * H, T0 + 3 * H + 5]
    for check in (True, False):
        policy = IncrementalScheduler(check=check)
        per_pass = []
        for now in instants:
            s = replace(base, now=now)
            fresh = schedule(s)
            monkeypatch.setattr(reserve, "_single_start", counted)
            computed.clear()
            assert policy(s) == fresh
            per_pass.append(len(computed))
            monkeypatch.setattr(reserve, "_single_start", real)
        if not check:
            assert per_pass[1] < per_pass[0] and per_pass[2] < per_pass[0], per_pass
