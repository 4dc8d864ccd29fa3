"""Regression tests of faults found while restructuring the policy core (issue 12)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.policy import StopReason, schedule
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree


def test_a_second_preemptor_never_preempts_unallocated_work_that_cannot_make_room():
    # Given one 8-GPU host: GPUs 0-1 free, unallocated U1 on 2-3, unallocated U2 on 4-6, and
    # protected allocated work of budget c on 7; two allocated 4-GPU workloads of a and b.
    h1 = host("h1")
    u1 = running("u1", "c", [("h1", 2), ("h1", 3)], m=0, started=T0 - H)
    u2 = running("u2", "c", [("h1", i) for i in (4, 5, 6)], m=0, started=T0 - 2 * H)
    prot = running("p", "c", [("h1", 7)], m=4 * H, started=T0 - H)
    s = snap(
        [h1],
        tree("a", "b", "c"),
        [u1, u2, prot],
        [pending("w1", "a", 4, seq=1), pending("w2", "b", 4, seq=2, submitted=T0 + 1)],
        [lump("b", 1)],
    )
    # When one pass runs
    d = schedule(s)
    # Then w1 preempts U1 and takes GPUs 0-3; U2 alone (3 GPUs) cannot make room for w2
    # (rule 3 of §3.4), so it keeps running and w2 gets no nomination.
    assert [(x.attempt, x.reason, x.for_workload) for x in d.stops] == [("u1", StopReason.PREEMPTED, "w1")]
    assert d.nominations == {"w1": tuple(("h1", i) for i in range(4))}
    assert all(len(g) == 4 for g in d.nominations.values())


def test_a_reservation_counts_the_unnominated_gpus_of_a_stopping_attempt_from_its_release():
    # Given h1: attempt v of c is stopping (released at T0 + 30) on GPUs 0-3, of which 0-1 are
    # nominated for w0; GPUs 4-5 are free, 6-7 held by b's own protected work. On h2, c's
    # protected work holds every GPU until T0 + 2 h. wb of b (4 GPUs) cannot start or preempt.
    h1, h2 = host("h1"), host("h2")
    v = replace(running("v", "c", [("h1", i) for i in range(4)], stopping=True), release_at=T0 + 30)
    own = running("own", "b", [("h1", 6), ("h1", 7)], m=4 * H, started=T0 - H)
    other = running("o", "c", [("h2", i) for i in range(8)], m=3 * H, started=T0 - H)
    s = snap(
        [h1, h2],
        tree("a", "b", "c"),
        [v, own, other],
        [pending("w0", "a", 2, seq=0), pending("wb", "b", 4, seq=1, submitted=T0 + 1)],
        [lump("c", 500)],
        nominations={"w0": (("h1", 0), ("h1", 1))},
    )
    # When one pass runs
    d = schedule(s)
    # Then wb reserves h1 from v's release: GPUs 2-3 return to everyone then, 4-5 are free
    # (§3.5), rather than h2 at the end of its protection.
    assert d.reservations == {"h1": "wb"}
    assert d.reserved_start["wb"] == T0 + 30


def test_a_gang_reservation_waits_for_the_release_of_a_stopping_attempt():
    # Given two whole hosts: h1 is held by c's attempt stopping until T0 + 60, h2 is empty;
    # a 16-GPU gang of b.
    h1, h2 = host("h1"), host("h2")
    v = replace(running("v", "c", [("h1", i) for i in range(8)], stopping=True), release_at=T0 + 60)
    s = snap([h1, h2], tree("b", "c"), [v], [pending("g", "b", 16)])
    # When one pass runs
    d = schedule(s)
    # Then the gang reserves both hosts from the release (§3.5), not from now.
    assert d.reservations == {"h1": "g", "h2": "g"}
    assert d.reserved_start["g"] == T0 + 60


def test_a_nominated_workload_that_can_start_elsewhere_starts_there_and_drops_its_nomination():
    # Given w nominated GPU 0 of h1, still held by a victim in its grace period, while h2 has a
    # free GPU; and x, an unallocated workload of b waiting for one GPU.
    leaving = running("v", "b", [("h1", 0)], m=0, started=T0 - H, stopping=True)
    s = snap(
        [host("h1", 1), host("h2", 1)],
        tree("a", "b"),
        [leaving],
        [pending("w", "a", 1, seq=1), pending("x", "b", 1, m=0, seq=2)],
        nominations={"w": (("h1", 0),)},
    )
    # When one pass runs
    d = schedule(s)
    # Then w starts on h2 by the ordinary rules (§3.4) and its nomination is dropped.
    assert [(st.workload, st.gpus) for st in d.starts] == [("w", (("h2", 0),))]
    assert d.nominations == {}
