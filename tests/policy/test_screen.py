"""The idle screen (scheduler/policy/screen.py): it calls a pass idle only when the pass decides nothing.

The property test (test_properties.py) checks the "only when" on every pass of random clusters;
these cases show it does call the common idle passes of a busy cluster idle.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import scheduler.policy.screen_rooms as screen_rooms
from scheduler.policy import GpuHealth, HostState, schedule
from scheduler.policy.screen import nothing_to_do, ready_starts
from scheduler.policy.screen_summary import NONE
from scheduler.policy.tree import BudgetTree
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree
from tests.policy.trace_checks import busy_trace, run_checked

BUDGETS = ["org/a", "org/b"]


def _full(budget: str, protected: bool) -> list:
    started = T0 - H // 2 if protected else T0 - 3 * H
    return [running(f"{budget}-{i}", budget, [("h1", i)], started=started) for i in range(8)]


def _idle(s) -> bool:  # noqa: ANN001
    return nothing_to_do(s, BudgetTree(s.budgets))


def _tree():  # noqa: ANN202
    return tree(*BUDGETS)


def test_full_cluster_of_protected_work_is_idle_and_the_pass_agrees() -> None:
    s = snap([host("h1")], _tree(), _full("org/b", protected=True), [pending("p", "org/a", 1)])
    assert _idle(s)
    assert not schedule(replace(s, with_reasons=True)).changed


def test_more_served_budget_cannot_preempt_so_idle() -> None:
    # a has used far more than b: rule 2 forbids a to take b's unprotected GPUs.
    s = snap([host("h1")], _tree(), _full("org/b", protected=False), [pending("p", "org/a", 1)], [lump("org/a", 500)])
    assert _idle(s)
    assert not schedule(replace(s, with_reasons=True)).changed


def test_less_served_budget_with_unprotected_victims_is_not_idle() -> None:
    s = snap([host("h1")], _tree(), _full("org/b", protected=False), [pending("p", "org/a", 1)], [lump("org/b", 500)])
    assert not _idle(s)
    assert schedule(s).stops


def test_free_gpu_nomination_drain_and_fault_are_not_idle() -> None:
    work = _full("org/b", protected=True)
    one_free = snap([host("h1")], _tree(), work[:-1], [pending("p", "org/a", 1)])
    assert not _idle(one_free)
    nominated = snap([host("h1")], _tree(), work, [pending("p", "org/a", 1)], nominations={"p": (("h1", 0),)})
    assert not _idle(nominated)
    draining = snap([host("h1", state=HostState.DRAINING)], _tree(), _full("org/b", protected=False), [])
    assert not _idle(draining)  # the drain stops its unprotected work
    sick = host("h1")
    sick = replace(sick, gpu_health={**sick.gpu_health, 3: GpuHealth.UNHEALTHY})
    assert not _idle(snap([sick], _tree(), work, []))


def test_a_draining_host_is_not_idle_only_where_the_pass_changes_it() -> None:
    # perf59: a draining host whose every attempt is protected (or leaving) changes nothing in a
    # pass, as a cordoned one: the estimates' passes after a scheduled drain stay screened.
    work = _full("org/b", protected=True)
    held = snap([host("h1", state=HostState.DRAINING), host("h2")], _tree(), work, [pending("p", "org/a", 9)])
    assert _idle(held)
    assert not schedule(replace(held, with_reasons=True)).changed
    leaving = replace(held, attempts=[replace(a, stopping=True) for a in work])
    assert _idle(leaving) and not schedule(replace(leaving, with_reasons=True)).changed
    now = replace(held, hosts=[replace(held.hosts[0], drain_now=True), held.hosts[1]])
    assert not _idle(now) and schedule(now).stops  # a drain now ignores protection
    expired = replace(held, now=T0 + H)  # the protections end: the drain stops the work
    assert not _idle(expired) and schedule(expired).stops
    empty = replace(held, attempts=[])  # nothing left: the host turns drained
    assert not _idle(empty) and schedule(empty).host_states == {"h1": HostState.DRAINED}


def test_a_nomination_that_waits_on_stopping_work_is_idle_only_with_the_nominees() -> None:
    """With ``nominations=True`` (the forward simulation's screen) a nomination whose GPUs are
    still held by stopping attempts does not answer "not idle"; the pass keeps it and decides
    nothing. A nomination on GPUs already free (the nominee starts), or on work that is not
    stopping (the pass drops it), still answers "not idle"."""
    work = _full("org/b", protected=True)
    leaving = [replace(work[0], stopping=True, release_at=T0 + 30), *work[1:]]
    s = snap([host("h1")], _tree(), leaving, [pending("p", "org/a", 1)], nominations={"p": (("h1", 0),)})
    assert not _idle(s)
    assert nothing_to_do(s, BudgetTree(s.budgets), nominations=True)
    dec = schedule(replace(s, with_reasons=True))
    assert not dec.changed and dec.nominations == {"p": (("h1", 0),)}
    freed = snap([host("h1")], _tree(), work[1:], [pending("p", "org/a", 1)], nominations={"p": (("h1", 0),)})
    assert not nothing_to_do(freed, BudgetTree(freed.budgets), nominations=True)
    assert schedule(freed).starts
    held = snap([host("h1")], _tree(), work, [pending("p", "org/a", 1)], nominations={"p": (("h1", 0),)})
    assert not nothing_to_do(held, BudgetTree(held.budgets), nominations=True)
    wrong_size = snap([host("h1")], _tree(), leaving, [pending("p", "org/a", 2)], nominations={"p": (("h1", 0),)})
    assert not nothing_to_do(wrong_size, BudgetTree(wrong_size.budgets), nominations=True)


def test_a_ready_nomination_is_the_only_start_when_nothing_else_can_happen() -> None:
    """With its victims released, a nominee starts on its nomination at its turn: the screen's
    estimate mode (``starts_only``) answers that start and nothing else when the rest of the
    cluster is idle, exactly as the full pass decides; a ready nomination beside work some
    budget may preempt, or next to free GPUs someone fits, answers None (the full pass runs)."""
    work = _full("org/b", protected=True)
    leaving = [replace(work[1], stopping=True, release_at=T0 + 30), *work[2:]]
    s = snap([host("h1")], _tree(), leaving, [pending("p", "org/a", 1), pending("q", "org/a", 1, seq=1)])
    s = replace(s, nominations={"p": (("h1", 0),), "q": (("h1", 1),)})
    starts = ready_starts(s, BudgetTree(s.budgets))
    dec = schedule(s)
    assert starts is not None and [x.workload for x in starts] == ["p"]
    assert dec.starts == starts and not dec.stops and dec.nominations == {"q": (("h1", 1),)}
    assert not nothing_to_do(s, BudgetTree(s.budgets), nominations=True)  # idle() is not asked about starts
    free_too = replace(s, attempts=[leaving[0], *leaving[2:]])  # GPU 2 free: q (or anyone) fits it
    assert ready_starts(free_too, BudgetTree(s.budgets)) is None
    prey = [replace(a, started_at=T0 - 3 * H) for a in work[2:]]
    r = pending("r", "org/a", 1, seq=2)
    preemptible = replace(s, attempts=[leaving[0], *prey], pending=[*s.pending, r], usage=[lump("org/b", 500)])
    assert ready_starts(preemptible, BudgetTree(s.budgets)) is None
    assert schedule(preemptible).stops


def test_a_nominee_waiting_on_its_dependencies_is_not_idle() -> None:
    """The pass drops the nomination of a workload waiting on its ``after`` list (its
    ``dependency`` reason): the screen with nominees may not call that pass idle."""
    work = _full("org/b", protected=True)
    leaving = [replace(work[0], stopping=True, release_at=T0 + 30), *work[1:]]
    waits = replace(pending("p", "org/a", 1), waiting=True)
    s = snap([host("h1")], _tree(), leaving, [waits], nominations={"p": (("h1", 0),)})
    assert schedule(s).nominations == {}
    assert not nothing_to_do(s, BudgetTree(s.budgets), nominations=True)
    assert ready_starts(s, BudgetTree(s.budgets)) is None


def test_unallocated_work_is_room_for_allocated_only() -> None:
    scavengers = [running(f"u{i}", "org/b", [("h1", i)], m=0) for i in range(8)]
    assert not _idle(snap([host("h1")], _tree(), scavengers, [pending("p", "org/a", 1)]))
    assert _idle(snap([host("h1")], _tree(), scavengers, [pending("p", "org/a", 1, m=0)]))


def test_a_host_with_a_drain_to_come_is_room_only_for_work_its_drain_allows() -> None:
    """est61: a host whose drain is scheduled at T starts no allocated work whose protection would
    cross T (``PassState.drain_allows``), so its free GPUs, unallocated and preemptible work are
    room only for an M up to T - now: the screen calls the pass idle where that host's room is all
    there is and the pending work's M is longer, and not idle once one fits, nor for unallocated
    work on free GPUs (no drain refuses it). Each answer is the full pass's."""
    h1 = replace(host("h1"), drain_at=T0 + H)
    h2 = host("h2")
    a_full = [running(f"a{i}", "org/a", [("h2", i)], started=T0 - H // 2) for i in range(8)]
    free = _full("org/b", protected=True)[:4]  # h1: 4 GPUs free
    unalloc = [running(f"u{i}", "org/b", [("h1", i)], m=0) for i in range(4, 8)]
    b_unprotected = _full("org/b", protected=False)
    for work, what in [(free, "free GPUs"), (free + unalloc, "unallocated work"), (b_unprotected, "unprotected work")]:
        usage = [lump("org/b", 500)]
        # unallocated work starts on free GPUs whatever the drain, and preempts nothing
        for m, idle in [(2 * H, True), (H + 1, True), (H, False), (H // 2, False), (0, work is not free)]:
            s = snap([h1, h2], _tree(), a_full + work, [pending("p", "org/a", 4, m=m)], usage)
            assert _idle(s) is idle, (what, m)
            assert schedule(replace(s, with_reasons=True)).changed is not idle, (what, m)
        later = replace(s, hosts=[replace(h1, drain_at=T0 + 2 * H), h2])
        late = replace(later, pending=[pending("p", "org/a", 4, m=2 * H)])
        assert not _idle(late) and schedule(late).changed, what  # a drain far enough away is room
    # a gang needs whole hosts its drain allows: h1 (drain at T0 + H) vacatable, h2 whole free
    hosts = [h1, h2]
    scav = [running(f"u{i}", "org/b", [("h1", i)], m=0) for i in range(8)]
    for m, idle in [(2 * H, True), (H, False)]:
        s = snap(hosts, _tree(), scav, [pending("g", "org/a", 16, m=m)])
        assert _idle(s) is idle, m
        assert schedule(replace(s, with_reasons=True)).changed is not idle, m


def test_gang_needs_whole_vacatable_hosts() -> None:
    hosts = [host("h1"), host("h2")]
    b_unprotected = _full("org/b", protected=False)
    a_protected = [running(f"a{i}", "org/a", [("h2", i)], started=T0 - H // 2) for i in range(8)]
    s = snap(hosts, _tree(), b_unprotected + a_protected, [pending("g", "org/a", 16)], [lump("org/b", 500)])
    assert _idle(s)  # h2 holds a's own protected work: only one host could be vacated
    assert not schedule(replace(s, with_reasons=True)).changed


def test_screen_on_least_m_per_shape_is_the_screen_on_every_workload() -> None:
    """The kept index hands the screen one workload per coarse shape, of the least M
    (``PendingIndex.screen_shapes``): the screen answers as it does on every pending workload."""
    from bench.synth import make_settled
    from scheduler.policy.pending import PendingIndex
    from scheduler.policy.screen import idle
    from scheduler.policy.standing import Standing
    from scheduler.policy.usage import pass_loads
    from tests.policy.oracle_harness import crowded_snapshot

    snaps = [crowded_snapshot(seed) for seed in range(200)]
    snaps += [make_settled(h, n, seed=h, after=a).snapshot() for h, n in ((12, 400), (40, 1500)) for a in (600, 3600)]
    answers = set()
    for s in snaps:
        t = BudgetTree(s.budgets)
        by_id = {w.id: w for w in s.pending}
        index = PendingIndex()
        index.sync(dict(by_id))
        assert len(index.screen_shapes()) <= len(by_id)
        standing = Standing(s, by_id)

        def loads(s=s, t=t, standing=standing, by_id=by_id):  # noqa: ANN001, ANN202
            return pass_loads(s, t, standing.noms, by_id)[1]

        plain = idle(standing, by_id.values(), t, loads)
        assert idle(standing, index.screen_shapes(), t, loads) == plain
        answers.add(plain)
    assert answers == {True, False}


def test_a_nominee_alone_in_its_shape_wants_no_second_preemption() -> None:
    """A budget's waiting nominee made its budget look as if it could preempt again: its shape
    was in the screen's wants, and other unprotected work rule 2 lets it take ran elsewhere, so
    the confirming pass after every preemption ran in full and decided nothing (1,368 such
    passes to now + 2 h at the bench state). A nominee never preempts (the pass returns at its
    nomination), so with the pending shapes counted (``shape_count``) a shape held only by
    nominees wants nothing; a second workload of that shape still answers "not idle"."""
    hosts = [host("h1"), host("h2")]
    work = _full("org/b", protected=True)
    leaving = [replace(work[0], stopping=True, release_at=T0 + 30), *work[1:]]
    prey = [running(f"b2-{i}", "org/b", [("h2", i)], started=T0 - 3 * H) for i in range(8)]
    noms = {"p": (("h1", 0),)}
    usage = [lump("org/b", 500)]
    s = snap(hosts, _tree(), leaving + prey, [pending("p", "org/a", 1)], usage, nominations=noms)
    dec = schedule(replace(s, with_reasons=True))
    assert not dec.changed and dec.nominations == noms  # b's work on h2 is preemptible, p does not take it
    assert nothing_to_do(s, BudgetTree(s.budgets), nominations=True)
    assert ready_starts(s, BudgetTree(s.budgets)) == []
    twin = replace(s, pending=[*s.pending, pending("q", "org/a", 1, seq=1)])
    assert schedule(twin).stops  # q preempts on h2
    assert not nothing_to_do(twin, BudgetTree(s.budgets), nominations=True)
    assert ready_starts(twin, BudgetTree(s.budgets)) is None
    other_m = replace(s, pending=[*s.pending, pending("q", "org/a", 1, m=2 * H, seq=1)])  # same coarse shape
    assert not nothing_to_do(other_m, BudgetTree(s.budgets), nominations=True)


def test_confirming_passes_with_nominees_left_out_decide_what_the_screen_says() -> None:
    """Random crowded instants taken through one deciding pass (its stops leaving, its
    nominations open, as the forward simulation's confirming pass sees them): wherever the
    estimate mode (``ready_starts``, nominee-only shapes left out of the wants) answers, the full
    pass decides exactly those starts and nothing else; and leaving those shapes out is what let
    it answer in some of them (the plain wants answer None there)."""
    from scheduler.policy.core import Pass
    from scheduler.policy.screen import starts_only
    from scheduler.policy.standing import Standing
    from scheduler.policy.usage import pass_loads
    from scheduler.sim.estimate import Forward
    from tests.policy.oracle_harness import crowded_snapshot

    answered = only_with_counts = 0
    for seed in range(300):
        fw = Forward(crowded_snapshot(seed), 30)
        fw.apply(fw.scheduler(fw.snapshot(for_pass=True)))
        s = replace(fw.snapshot(), with_reasons=False)
        t = BudgetTree(s.budgets)
        ready = ready_starts(s, t)
        if ready is None:
            continue
        answered += 1
        full = Pass(s).run()
        assert sorted(full.starts, key=lambda x: x.workload) == ready and not full.stops, (seed, full)
        starting = {x.workload for x in ready}
        assert full.nominations == {k: v for k, v in s.nominations.items() if k not in starting}, seed
        by_id = {w.id: w for w in s.pending}
        standing = Standing(s, by_id)
        loads = pass_loads(s, t, standing.noms, by_id)[1]
        plain = starts_only(standing, by_id.values(), t, lambda loads=loads: loads, by_id)
        only_with_counts += plain is None
    assert answered > 50 and only_with_counts > 0, (answered, only_with_counts)


@pytest.mark.parametrize("seed", [1, 2])
def test_kept_preemption_rooms_answer_as_the_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The screen's preemption test reads each host's room kept between passes by the change log
    (``screen_rooms.preempt_rooms``): on a busy trace (every pass checked, the pass-start screens and
    the tail's proofs both asking), every answer, at the asked request and at each single-host
    need and gang size around it, is the walk's (``screen_rooms.may_preempt_walk``)."""
    real = screen_rooms.may_preempt
    seen = {"asked": 0, "yes": 0, "no": 0}

    def both(standing, summary, model, allowed, need, hosts_needed, lo=screen_rooms.ANY):  # type: ignore[no-untyped-def]
        for n, k in [(need, hosts_needed), *((m, NONE) for m in (1, 2, 4, 8)), *((1 << 30, g) for g in (1, 2, 3))]:
            got = real(standing, summary, model, allowed, n, k, lo)
            assert got == screen_rooms.may_preempt_walk(standing, summary, model, allowed, n, k, lo), (n, k)
            seen["yes" if got else "no"] += 1
        seen["asked"] += 1
        return real(standing, summary, model, allowed, need, hosts_needed, lo)

    monkeypatch.setattr(screen_rooms, "may_preempt", both)
    run_checked(busy_trace(tmp_path, seed))
    assert seen["asked"] > 50 and seen["yes"] > 50 and seen["no"] > 50, seen


def test_a_stale_kept_room_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rooms kept without reading again the hosts bumped since (a host's first room kept for
    good) answer otherwise than the walk on the same trace: the comparison above can fail."""
    real = screen_rooms.room_into

    def first_only(standing, hv, allowed, rooms, whole):  # type: ignore[no-untyped-def]
        if hv.name not in rooms:
            real(standing, hv, allowed, rooms, whole)

    monkeypatch.setattr(screen_rooms, "room_into", first_only)
    with pytest.raises(AssertionError, match=r"^\(\d+, \d+\)"):  # the comparison's (need, hosts)
        test_kept_preemption_rooms_answer_as_the_walk(tmp_path, monkeypatch, 1)
