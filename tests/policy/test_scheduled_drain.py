"""drain58: a host with a drain scheduled at T starts, before T, no allocated work whose protection
would end after T (Slurm's maint reservation); unallocated work still starts there, work already
running is unchanged, and the estimates (the policy run forward) see it and the drain at T
(docs/deploy.md "Scheduled drains"). Each case is checked against the oracle too."""

from __future__ import annotations

from dataclasses import replace

from scheduler.policy import HostState, IncrementalScheduler, PendingReason, Snapshot, schedule
from scheduler.policy.reference import reference_schedule
from scheduler.sim.estimate import estimate_starts
from tests.policy.builders import T0, H, host, pending, running, snap, tree
from tests.policy.oracle_harness import differences


def _both(s: Snapshot):  # noqa: ANN202
    """The pass, after checking the oracle and the incremental scheduler (checked) decide the same."""
    dec = schedule(s)
    assert differences(s, dec, reference_schedule(s)) == []
    assert IncrementalScheduler(check=True)(s) == dec
    return dec


def _drains(h, at: int):  # noqa: ANN001, ANN202
    return replace(h, drain_at=at)


def test_allocated_work_protected_past_the_drain_does_not_start_there_and_unallocated_does():
    s = snap(
        [_drains(host("h1", 4), T0 + 2 * H), host("h2", 8)],
        tree("a"),
        pend=[
            pending("long", "a", 2, m=8 * H, seq=1),  # protected until T0 + 8h > T0 + 2h
            pending("short", "a", 2, m=2 * H, seq=2),  # ends exactly at the drain: allowed
            pending("free", "a", 2, m=0, seq=3),  # unallocated: preemptible at any time
        ],
    )
    dec = _both(s)
    where = {st.workload: {g[0] for g in st.gpus} for st in dec.starts}
    # best fit would put "long" on h1 (fewest free GPUs that fit); the drain sends it to h2
    assert where == {"long": {"h2"}, "short": {"h1"}, "free": {"h1"}}
    plain = schedule(replace(s, hosts=[host("h1", 4), host("h2", 8)]))
    assert {st.workload: {g[0] for g in st.gpus} for st in plain.starts}["long"] == {"h1"}


def test_only_the_draining_host_free_the_workload_waits_with_the_drain_named():
    s = snap([_drains(host("h1", 8), T0 + 2 * H)], tree("a"), pend=[pending("w", "a", 4, m=8 * H)])
    dec = _both(s)
    assert dec.starts == [] and dec.reserved_start == {}  # no start there before T, none after (drained)
    info = dec.pending["w"]
    assert info.reason == PendingReason.RESERVED_FOR_OTHER
    assert info.detail["drain"] == {"host": "h1", "at": T0 + 2 * H}
    assert info.detail["reserved_for"] is None


def test_running_work_is_unchanged_and_a_drain_already_due_or_inactive_host_reads_as_before():
    r = running("r", "a", [("h1", 0)], m=8 * H, started=T0 - H)  # protected past the drain: stays
    s = snap([_drains(host("h1", 8), T0 + H)], tree("a"), attempts=[r])
    dec = _both(s)
    assert dec.stops == [] and dec.starts == []
    cordoned = snap(
        [_drains(host("h1", 8, state=HostState.CORDONED), T0 + H), host("h2", 8)],
        tree("a"),
        pend=[pending("w", "a", 1, m=8 * H)],
    )
    assert {g[0] for g in _both(cordoned).starts[0].gpus} == {"h2"}


def test_a_gang_needs_every_host_to_allow_it():
    hosts = [_drains(host("h1", 4), T0 + H), host("h2", 4), host("h3", 4)]
    s = snap(hosts, tree("a"), pend=[pending("g", "a", 8, m=2 * H)])
    dec = _both(s)
    assert {g[0] for g in dec.starts[0].gpus} == {"h2", "h3"}
    two = snap(hosts[:2], tree("a"), pend=[pending("g", "a", 8, m=2 * H)])
    dec = _both(two)
    assert dec.starts == [] and dec.pending["g"].detail.get("drain") == {"host": "h1", "at": T0 + H}


def test_no_victims_are_taken_on_a_host_that_would_refuse_the_preemptor():
    victims = [running(f"u{i}", "b", [("h1", i)], m=0, started=T0 - H) for i in range(4)]
    s = snap([_drains(host("h1", 4), T0 + H)], tree("a", "b"), attempts=victims, pend=[pending("p", "a", 4, m=2 * H)])
    dec = _both(s)
    assert dec.stops == [] and dec.nominations == {}
    ok = replace(s, pending=[pending("p", "a", 4, m=H)])  # ends with the drain: preempts as ever
    assert len(_both(ok).stops) == 4


def test_a_reservation_goes_where_the_start_plus_its_protection_fits():
    # h1 free now but drains in 30 min; h2 holds protected work of b until T0 + 1h
    guard = running("b1", "b", [("h2", i) for i in range(4)], m=3 * H, started=T0 - 2 * H)
    s = snap(
        [_drains(host("h1", 4), T0 + H // 2), host("h2", 4)],
        tree("a", "b"),
        attempts=[guard],
        pend=[pending("w", "a", 4, m=2 * H)],
    )
    dec = _both(s)
    assert dec.starts == []
    assert dec.reservations == {"h2": "w"} and dec.reserved_start == {"w": T0 + H}


def test_a_nomination_whose_host_now_refuses_is_dropped_not_started():
    s = snap(
        [_drains(host("h1", 4), T0 + H), host("h2", 4)],
        tree("a", "b"),
        attempts=[running("b1", "b", [("h2", i) for i in range(4)], m=4 * H, started=T0 - H)],
        pend=[pending("w", "a", 4, m=2 * H)],
        nominations={"w": tuple(("h1", i) for i in range(4))},
    )
    dec = _both(s)
    assert dec.starts == [] and "w" not in dec.nominations


def test_estimates_see_the_drain_before_and_after_its_instant():
    # h1 drains at T0 + 1h; h2 is held by protected work until T0 + 3h. A 2 h workload cannot
    # start on h1 now (it would cross the drain) nor after (h1 is draining): h2 at T0 + 3h.
    guard = running("b1", "b", [("h2", i) for i in range(4)], m=3 * H, started=T0)
    s = snap(
        [_drains(host("h1", 4), T0 + H), host("h2", 4)],
        tree("a", "b"),
        attempts=[guard],
        pend=[pending("w", "a", 4, m=2 * H), pending("quick", "a", 4, m=H // 2, seq=1)],
    )
    got = estimate_starts(s, grace=0)
    assert got["quick"] == T0  # its protection ends before the drain: it starts on h1 now
    assert got["w"] == T0 + 3 * H
    alone = replace(s, attempts=[], hosts=[_drains(host("h1", 4), T0 + H)], pending=[pending("w", "a", 4, m=2 * H)])
    assert "w" not in estimate_starts(alone, grace=0)  # h1 drains at T0 + 1h and never comes back


def test_a_failure_stands_down_to_the_latest_drain_of_its_model_kept_once_a_pass(monkeypatch):  # noqa: ANN001
    # perf59: SkipRuns._drain_floor reads each model's latest drain (kept for the pass) instead of
    # every drain; under check it is compared with the walk over every drain.
    from scheduler.policy.core import Pass
    from scheduler.policy.skips import SkipRuns

    hosts = [
        _drains(host("h1", 4), T0 + H),
        _drains(host("h2", 4), T0 + 3 * H),
        host("h3", 4),
        _drains(host("g1", 4, model="A100"), T0 + 10 * H),
    ]
    guards = [
        running(f"b{h}", "b", [(h, i) for i in range(4)], m=4 * H, started=T0 - H) for h in ("h1", "h2", "h3", "g1")
    ]
    s = snap(hosts, tree("a", "b"), attempts=guards, pend=[pending("w1", "a", 4, m=8 * H)])
    p = Pass(s)
    w = s.pending[0]
    assert p._drain_floor(w) == p._drain_floor_walk(w) == 3 * H + 1  # the A100 drain is not its model's
    assert p._drain_floor(replace(w, min_runtime=H)) == H  # an M below every drain: its own
    assert p._drain_floor(replace(w, model="B200")) == 0  # no drain of its model
    p.check = True
    p._drains_last = {"H100": T0 + H}  # a kept answer gone wrong is caught
    try:
        p._drain_floor(w)
    except AssertionError as e:
        assert "drain floor of w1" in str(e)
    else:
        raise AssertionError("the check did not compare the kept drain floor")

    walked = []
    real = SkipRuns._drain_floor_walk
    monkeypatch.setattr(SkipRuns, "_drain_floor_walk", lambda self, w: walked.append(w.id) or real(self, w))
    s = replace(s, pending=[pending("w1", "a", 4, m=8 * H, seq=1), pending("w2", "a", 4, m=8 * H, seq=2)])
    dec = _both(s)
    assert dec.starts == [] and walked  # the checked scheduler compared the kept floor
