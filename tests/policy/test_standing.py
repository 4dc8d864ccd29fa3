"""IncrementalScheduler on inputs that break a snapshot's assumptions (scheduler/policy/standing.py).

Two attempts on one GPU, one GPU nominated twice or one attempt id twice: the kept state cannot
say what a fresh build would, so these passes are decided by a fresh build and nothing is kept.
The decisions must equal schedule()'s on every pass, with the kept state checked (check=True).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import Attempt, IncrementalScheduler, Snapshot, schedule
from tests.policy.builders import T0, host, pending, running, snap, tree


def same_decisions(seq: list[Snapshot]) -> None:
    for check in (False, True):
        inc = IncrementalScheduler(check=check)
        for s in seq:
            assert inc(s) == schedule(s), f"pass at {s.now}"


def test_an_attempt_leaving_a_double_booked_gpu_does_not_free_it() -> None:
    hosts, budgets = [host("h", 1)], tree("a", "b")
    a0, a1 = running("a0", "a", [("h", 0)]), running("a1", "a", [("h", 0)])
    same_decisions(
        [snap(hosts, budgets, [a0, a1], []), snap(hosts, budgets, [a0], [pending("W", "a", 1)], now=T0 + 60)]
    )


def test_a_double_booked_gpu_owner_does_not_depend_on_arrival_order() -> None:
    hosts, budgets = [host("h", 1), host("k", 1)], tree("a", "b")
    leaving = running("a9", "b", [("h", 0)], stopping=True)
    other = running("q", "b", [("k", 0)], started=T0 - 10)
    p = pending("P", "a", 1)
    noms = {"P": (("h", 0),)}
    s1 = snap(hosts, budgets, [leaving, other], [p], nominations=noms)
    s2 = snap(
        hosts,
        budgets,
        [leaving, running("a0", "b", [("h", 0)], started=T0 - 10), other],
        [p],
        nominations=noms,
        now=T0 + 5,
    )
    same_decisions([s1, s2])


def test_one_attempt_id_twice_counts_like_a_fresh_pass() -> None:
    hosts, budgets = [host("h", 2)], tree("a", "b")
    x1, x2 = running("x", "a", [("h", 0)], started=T0 - 100), running("x", "a", [("h", 1)], started=T0 - 100)
    s1 = snap(hosts, budgets, [x1, x2], [pending("P", "b", 1)])
    same_decisions([s1, replace(s1, now=T0 + 10)])


@pytest.mark.parametrize("nominate_twice", [False, True])
def test_a_gpu_nominated_twice_is_decided_afresh(nominate_twice: bool) -> None:
    hosts, budgets = [host("h", 2)], tree("a", "b")
    busy = running("z", "b", [("h", 0)], stopping=True)
    w1, w2 = pending("W1", "a", 1), pending("W2", "a", 1, submitted=T0 - 5)
    noms = {"W1": (("h", 0),), "W2": (("h", 0),)} if nominate_twice else {"W1": (("h", 0),)}
    s1 = snap(hosts, budgets, [busy], [w1, w2], nominations=noms)
    same_decisions([s1, replace(s1, now=T0 + 30, nominations={"W1": (("h", 0),)})])


def test_the_pass_own_attempt_kept_in_the_next_snapshot() -> None:
    hosts, budgets = [host("h", 2)], tree("a", "b")
    w = pending("W", "a", 1)
    other = running("z", "b", [("h", 1)], started=T0 - 10)
    s1 = snap(hosts, budgets, [other], [w])
    started = schedule(s1).starts[0]
    own = Attempt("new:W", "W", "a", started.gpus, True, w.min_runtime, None)
    same_decisions([s1, snap(hosts, budgets, [other, own], [], now=T0 + 5)])


def test_fits_reads_the_hosts_tuple_it_was_built_from_as_the_walk_does() -> None:
    """``Standing.fits`` (est63): hosts handed as the very tuple the standing was built from are
    its hosts without the walk; any other sequence is walked (the same objects, in order), and
    ``total_gpus`` is the hosts' GPUs, as ``PassState`` summed them."""
    from scheduler.policy.pass_state import PassState
    from scheduler.policy.standing import Standing

    hosts = (host("h", 4), host("k", 2), host("m", 8))
    base = replace(snap(list(hosts), tree("a", "b"), [], [pending("W", "a", 1)]), hosts=hosts)
    standing = Standing(base)
    assert standing.hosts is hosts and standing.total_gpus == 14 == PassState(base).total_gpus

    def walk(s: Snapshot) -> bool:
        return len(s.hosts) == len(standing.hosts) and all(a is b for a, b in zip(s.hosts, standing.hosts, strict=True))

    later = T0 + 60
    for other in (hosts, list(hosts), tuple(hosts), (hosts[0], hosts[2], hosts[1]), (*hosts[:2], host("m", 8))):
        s = replace(base, hosts=other, now=later)
        assert standing.fits(s) == walk(s), other
    assert not standing.fits(replace(base, hosts=hosts, now=T0 - 1))  # time going back
    old = Standing(base)
    del old.total_gpus  # a standing pickled before it was kept reads the class's None
    assert PassState(base, standing=old).total_gpus == 14
