"""The engine hands the policy the same view of a pending workload while it is unchanged
(``SimWorkload.as_pending``): the incremental policy follows views by identity, and a fresh object
per snapshot made it drop and re-add every pending workload on every pass. The plain views
(``plain_pending``, a fresh object each time) are the oracle: the same random clusters decide the
same with either."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import Budget, Decisions, GpuHealth, Host, IncrementalScheduler, Snapshot
from scheduler.policy.usage import UsageLedger, windowed_usage
from scheduler.sim.engine import Engine, SimWorkload
from tests.policy.oracle_harness import Tally, build_cluster, play


def _decisions(seed: int) -> list[tuple[int, str]]:
    e, events, horizon = build_cluster(seed, Tally())
    e.scheduler = IncrementalScheduler()  # the policy the simulators run (not the harness's compare)
    seen: list[tuple[int, str]] = []
    e.on_decisions = lambda dec: seen.append(
        (e.now, repr((dec.starts, dec.stops, dec.reserved_start, sorted(dec.pending.items()))))
    )
    play(e, events, horizon)
    return seen


@pytest.mark.parametrize("seed", range(40))
def test_kept_views_decide_as_fresh_views(seed, monkeypatch):
    kept = _decisions(seed)
    monkeypatch.setattr(SimWorkload, "as_pending", SimWorkload.plain_pending)
    assert kept == _decisions(seed)


def test_a_view_is_kept_while_equal_and_replaced_when_a_field_changes():
    w = SimWorkload("w1", "org/a", 2, "H100", 600, 0, 1)
    first = w.as_pending()
    assert w.as_pending() is first
    w.gpus = 4
    changed = w.as_pending()
    assert changed is not first and changed == replace(first, gpus=4) == w.plain_pending()
    w.state = "running"  # not part of the view
    assert w.as_pending() is changed


class _Both:
    """The engine's policy for one random cluster: every pass, the snapshot (kept views, the
    pending workloads kept with their changes, the usage ledger) against the plain snapshot (fresh views of a walk
    over every workload, the records as a plain list): the same attempts, pending workloads and
    records, the same windowed usage, and the same decisions from one incremental policy fed the
    kept snapshots (it reads the ledger) and one fed the plain ones (it walks the records)."""

    def __init__(self, e: Engine) -> None:
        self.e = e
        self.kept = IncrementalScheduler(check=True)  # check: the ledger's loads against a walk, too
        self.plain = IncrementalScheduler()
        self.passes = 0

    def __call__(self, snap: Snapshot) -> Decisions:
        plain = self.e.plain_snapshot()
        at = f"seed {self.e.seed} at {snap.now}"  # type: ignore[attr-defined]
        assert list(snap.attempts) == list(plain.attempts), at
        assert list(snap.pending) == list(plain.pending), at
        assert list(snap.usage) == list(plain.usage), at
        assert isinstance(snap.usage, UsageLedger), at
        closed = windowed_usage(plain.usage, (), snap.now, snap.window)
        assert snap.usage.windowed(snap.now, snap.window) == {b: v for b, v in closed.items() if v}, at
        dec = self.kept(snap)
        want = self.plain(plain)
        assert _canon(dec) == _canon(want), at
        self.passes += 1
        return dec


def _canon(dec: Decisions) -> str:
    return repr(
        (
            sorted(map(repr, dec.starts)),
            sorted(map(repr, dec.stops)),
            sorted(dec.nominations.items()),
            sorted(dec.reservations.items()),
            sorted(dec.reserved_start.items()),
            sorted(dec.host_states.items()),
            sorted((k, v.reason) for k, v in dec.pending.items()),
        )
    )


@pytest.mark.parametrize("seed", range(40))
def test_each_pass_sees_and_decides_as_with_the_plain_snapshot(seed):
    e, events, horizon = build_cluster(seed, Tally())
    both = e.scheduler = _Both(e)
    play(e, events, horizon)
    assert both.passes > 0


def test_the_pending_views_follow_every_change_of_the_book():
    """Workloads added, replaced, removed, renamed, finished, moved out of a final state, put in a
    second engine or under another key (none of which the engine does itself but the first and
    the state changes): each snapshot's pending workloads are the plain walk's, and an incremental
    policy following the changes they carry keeps the index a fresh grouping would build."""
    e, other = Engine(start=0), Engine(start=0)
    e.add_host(Host("h0", "H100", {0: GpuHealth.HEALTHY}))
    e.add_budget(Budget("org", "org", None))
    policy = IncrementalScheduler(check=True)

    def same() -> None:
        snap = e.snapshot()
        assert list(snap.pending) == list(e.plain_snapshot().pending)
        policy(snap)  # check: the kept index against a fresh grouping

    ws = [SimWorkload(f"w{i}", "org", 2, "H100", 0, i, i) for i in range(8)]
    for w in ws[:5]:
        e.submit(w)
        same()
    ws[1].state = "succeeded"
    same()
    ws[1].state = "pending"  # back from a final state
    same()
    ws[3].gpus = 4  # a new view
    same()
    e.workloads["w2"] = ws[5]  # replaced under its id
    same()
    del e.workloads["w0"]
    same()
    ws[4].id = "w4b"  # renamed
    same()
    e.workloads.update({"w6": ws[6]})
    e.cancel("w3")
    same()
    e.workloads["alias"] = ws[6]  # under two keys
    same()
    other.submit(ws[7])
    e.submit(ws[7])  # in two engines: only the last tells
    other.submit(ws[6])
    ws[6].state = "running"
    same()
    e.workloads = {"w5": ws[5]}  # a plain dict: walked every time
    same()
