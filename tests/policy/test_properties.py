"""Hypothesis properties of the policy over many ticks on random clusters (STYLE.md, DESIGN.md §3).

Invariants: no GPU assigned twice; no protected attempt preempted; nothing placed on a
non-active host or an unhealthy GPU; no GPU left idle while a pending workload could use
it without breaking a reservation; every preemption is followed by the preemptor
starting on the freed GPUs; no ping-pong; the same input gives the same decisions
whatever the order of the input lists; unallocated time is never counted in usage; the
incremental scheduler (state kept between passes) decides exactly what a fresh pass does.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.policy import (
    Budget,
    Decisions,
    GpuHealth,
    Host,
    HostState,
    IncrementalScheduler,
    PendingReason,
    Snapshot,
    StopReason,
    schedule,
)
from scheduler.policy.core import Pass
from scheduler.policy.screen import nothing_to_do, ready_starts
from scheduler.policy.standing import nominations_of
from scheduler.policy.tree import BudgetTree
from scheduler.policy.views import budget_usage
from scheduler.sim.engine import Engine, SimWorkload

T0 = 1_767_571_200
H = 3600
MODELS = ("H100", "A100")


class CheckedEngine(Engine):
    """The engine, checking every pass's decisions against the invariants before applying them."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        # Every pass runs on the incremental state, checked against a fresh build; the decisions
        # are compared with a fresh schedule() of the shuffled snapshot in _check.
        self.scheduler = IncrementalScheduler(check=True)
        self.pairs_this_instant: dict[int, set[tuple[str, str]]] = {}
        self.preemptors: dict[str, set[tuple[str, int]]] = {}
        self.screened = 0
        self.screened_nominations = 0
        self.ready_starts = 0

    def apply(self, dec: Decisions) -> None:
        snap = self.snapshot()
        self._check(snap, dec)
        super().apply(dec)

    def _check(self, snap: Snapshot, dec: Decisions) -> None:
        now = snap.now
        hosts = {h.name: h for h in snap.hosts}
        owned = {g for a in snap.attempts for g in a.gpus}
        attempts = {a.id: a for a in snap.attempts}
        used: set[tuple[str, int]] = set()
        freed = {g for s in dec.stops for g in attempts[s.attempt].gpus}
        for s in dec.starts:
            w = self.workloads[s.workload]
            assert w.state == "pending"
            assert len(s.gpus) == w.gpus
            for g in s.gpus:
                h = hosts[g[0]]
                assert h.state == HostState.ACTIVE, f"{s.workload} placed on {h.state} host"
                assert h.gpu_health[g[1]] != GpuHealth.UNHEALTHY, f"{s.workload} placed on an unhealthy GPU"
                assert h.model == w.model
                assert g not in owned and g not in used, f"GPU {g} double-booked"
                assert g not in freed, "GPUs being freed are not free yet"
                nominee = next((k for k, v in snap.nominations.items() if g in v), None)
                assert nominee in (None, s.workload), f"{s.workload} took GPUs nominated for {nominee}"
                # a drain scheduled there: no allocated start whose protection would cross it
                assert h.drain_at is None or not w.min_runtime or now + w.min_runtime <= h.drain_at, (
                    f"{s.workload} started on {h.name}, protected past its drain at {h.drain_at}"
                )
                used.add(g)
        for s in dec.stops:
            a = attempts[s.attempt]
            drain_now = any(hosts[g[0]].drain_now for g in a.gpus if g[0] in hosts)
            if s.reason == StopReason.PREEMPTED or (s.reason == StopReason.DRAINED and not drain_now):
                assert not a.protected_at(now), f"protected attempt {a.id} stopped ({s.reason})"
                assert not a.stopping
            if s.reason == StopReason.PREEMPTED:
                assert s.for_workload is not None
                p = self.workloads[s.for_workload]
                assert p.min_runtime > 0, "unallocated work preempted something"
                self.preemptors.setdefault(s.for_workload, set()).update(a.gpus)
                if a.allocated:
                    assert a.budget != p.budget, "allocated work preempted allocated work of its own budget"
                    pair = (p.budget, a.budget)
                    seen = self.pairs_this_instant.setdefault(now, set())
                    assert (pair[1], pair[0]) not in seen, f"ping-pong between {pair}"
                    seen.add(pair)
        # Determinism, whatever the order of the input lists.
        shuffled = replace(
            snap,
            hosts=random.Random(now).sample(list(snap.hosts), len(snap.hosts)),
            attempts=random.Random(now + 1).sample(list(snap.attempts), len(snap.attempts)),
            pending=random.Random(now + 2).sample(list(snap.pending), len(snap.pending)),
            budgets=random.Random(now + 3).sample(list(snap.budgets), len(snap.budgets)),
        )
        fresh = schedule(shuffled)
        assert fresh == dec, f"{fresh}\n!=\n{dec}"
        # Without reasons (simulations) the pass takes short cuts; it decides exactly the same.
        quiet = Pass(replace(snap, with_reasons=False)).run()  # no idle screen: every field compares
        assert replace(quiet, pending=dec.pending) == dec
        # A pass the quick screen calls idle decides nothing (schedule() skips it without reasons).
        if nothing_to_do(snap, BudgetTree(snap.budgets)):
            assert not dec.changed, f"the screen called a deciding pass idle: {dec}"
            self.screened += 1
        # With the nominees (the forward simulation's screen, waiting_nominations): a pass whose
        # open nominations all wait decides nothing and keeps them as they are.
        if nothing_to_do(snap, BudgetTree(snap.budgets), nominations=True):
            assert not dec.changed, f"the screen with nominations called a deciding pass idle: {dec}"
            assert dec.nominations == nominations_of(snap, {w.id: w for w in snap.pending}), dec.nominations
            self.screened_nominations += int(bool(dec.nominations))
        # Ready nominations too (the screen's estimate mode, starts_only): the pass starts those
        # nominees on their nominations, keeps the other nominations and decides nothing else.
        ready = ready_starts(snap, BudgetTree(snap.budgets))
        if ready is not None:
            starting = {x.workload for x in ready}
            assert sorted(dec.starts, key=lambda x: x.workload) == ready, f"{ready} != {dec.starts}"
            assert not dec.stops and not dec.host_states, dec
            noms = nominations_of(snap, {w.id: w for w in snap.pending})
            assert dec.nominations == {k: v for k, v in noms.items() if k not in starting}, dec.nominations
            self.ready_starts += len(ready)
        # Unallocated attempts never count in usage.
        only_alloc = replace(snap, attempts=[a for a in snap.attempts if a.allocated])
        assert budget_usage(only_alloc) == budget_usage(snap)

    def tick(self, max_passes: int = 50) -> None:
        super().tick(max_passes)
        if self.grace == 0:
            # With no grace, every preemptor starts in the same tick on (some of) the GPUs freed for it.
            for wid, gpus in self.preemptors.items():
                wl = self.workloads[wid]
                if wl.state == "running":
                    a = self.attempt_of(wid)
                    assert a is not None and set(a.gpus) & gpus, f"{wid} did not start on the GPUs freed for it"
                else:
                    assert wl.state in ("succeeded", "failed", "canceled"), f"preemptor {wid} is {wl.state}"
        self.preemptors.clear()

    def check_stable(self) -> None:
        """After a tick settles: no placeable workload waits next to idle GPUs (grace 0)."""
        snap = self.snapshot()
        dec = self.last
        owned = {g for a in snap.attempts for g in a.gpus}
        nominated = {g for v in snap.nominations.values() for g in v}
        for w in snap.pending:
            info = dec.pending.get(w.id)
            if info is not None and info.reason in (
                PendingReason.UNSCHEDULABLE,
                PendingReason.HELD,
                PendingReason.BUDGET_CAPPED,
            ):
                continue
            largest = max((h.size for h in snap.hosts if h.model == w.model), default=0)
            for h in snap.hosts:
                if h.state != HostState.ACTIVE or h.model != w.model:
                    continue
                free = [
                    i
                    for i, g in h.gpu_health.items()
                    if g != GpuHealth.UNHEALTHY and (h.name, i) not in owned and (h.name, i) not in nominated
                ]
                res = dec.reservations.get(h.name)
                blocked = (
                    w.allocated
                    and res is not None
                    and res != w.id
                    and now_plus(snap.now, w.min_runtime) > dec.reserved_start.get(res, 0)
                ) or (w.allocated and h.drain_at is not None and snap.now + w.min_runtime > h.drain_at)
                if w.gpus <= largest and len(free) >= w.gpus and not blocked:
                    raise AssertionError(f"{w.id} ({w.gpus} GPUs) waits while {h.name} has {len(free)} idle GPUs")


def now_plus(now: int, m: int) -> int:
    return now + m


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, object]:
    n_hosts = draw(st.integers(1, 5))
    hosts = []
    for i in range(n_hosts):
        size = draw(st.sampled_from([2, 4, 8]))
        model = draw(st.sampled_from(MODELS[:1] * 3 + MODELS[1:]))
        unhealthy = draw(st.sets(st.integers(0, size - 1), max_size=1)) if draw(st.integers(0, 5)) == 0 else set()
        state = draw(st.sampled_from([HostState.ACTIVE] * 6 + [HostState.CORDONED, HostState.DRAINING]))
        health = {j: GpuHealth.UNHEALTHY if j in unhealthy else GpuHealth.HEALTHY for j in range(size)}
        hosts.append(
            Host(
                f"h{i}",
                model,
                health,
                state,
                {"fabric": f"f{i % 2}"},
                drain_now=state == HostState.DRAINING and draw(st.booleans()),
            )
        )
    n_prog = draw(st.integers(1, 3))
    budgets = [Budget("org", "org", None)]
    leaves = []
    for p in range(n_prog):
        budgets.append(Budget(f"p{p}", f"p{p}", "org", draw(st.integers(1, 3))))
        for q in range(draw(st.integers(1, 3))):
            key = f"p{p}/q{q}"
            budgets.append(Budget(key, f"q{q}", f"p{p}", draw(st.integers(1, 3))))
            leaves.append(key)
    usage = {leaf: draw(st.integers(0, 200)) for leaf in leaves}
    workloads = draw(
        st.lists(
            st.tuples(
                st.sampled_from(leaves),
                st.sampled_from([1, 1, 1, 2, 2, 4, 8, 16]),
                st.sampled_from([0, 0, 1800, 3600, 7200]),
                st.sampled_from([None, 600, 3600, 3 * 3600]),
                st.sampled_from(MODELS[:1] * 4 + MODELS[1:]),
                st.integers(0, 3 * H),  # submitted at t0 + this
            ),
            min_size=1,
            max_size=25,
        )
    )
    steps = draw(st.lists(st.sampled_from([600, 1800, 3600, 2 * 3600]), min_size=1, max_size=5))
    # drains scheduled for later (docs/deploy.md "Scheduled drains"): seconds ahead per host, or None
    drains = [draw(st.sampled_from([None, None, None, 600, 1800, 3600, 7200])) for _ in hosts]
    return {
        "hosts": hosts,
        "drains": drains,
        "budgets": budgets,
        "usage": usage,
        "workloads": workloads,
        "steps": steps,
        "grace": draw(st.sampled_from([0, 0, 30])),
    }


def build(c: dict[str, object]) -> CheckedEngine:
    from scheduler.policy import UsageRecord

    e = CheckedEngine(start=T0, tick_interval=300, grace=c["grace"], max_reservations=2)  # type: ignore[arg-type]
    for b in c["budgets"]:  # type: ignore[attr-defined]
        e.add_budget(b)
    for h, ahead in zip(c["hosts"], c.get("drains") or [None] * 8, strict=False):  # type: ignore[call-overload]
        e.add_host(h)
        if ahead is not None:
            e.schedule_drain(h.name, T0 + ahead)
    for leaf, gh in c["usage"].items():  # type: ignore[attr-defined]
        if gh:
            e.usage.append(UsageRecord(leaf, T0 - 86400, T0 - 86400, None, gh * 3600))
    return e


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_invariants_hold_over_many_ticks(c: dict[str, object]) -> None:
    e = build(c)
    arrivals = sorted(enumerate(c["workloads"]), key=lambda x: (x[1][5], x[0]))  # type: ignore[arg-type]
    t_end = T0 + sum(c["steps"])  # type: ignore[arg-type]
    i = 0
    for step in c["steps"]:  # type: ignore[attr-defined]
        target = e.now + step
        while i < len(arrivals) and T0 + arrivals[i][1][5] <= target:
            n, (leaf, gpus, m, dur, model, at) = arrivals[i]
            e.advance_to(T0 + at)
            e.submit(SimWorkload(f"w{n}", leaf, gpus, model, m, e.now, e.next_seq(), remaining=dur))
            e.tick()
            if e.grace == 0:
                e.check_stable()
            i += 1
        e.advance_to(target)
        if e.grace == 0:
            e.check_stable()
    assert e.now <= max(t_end, e.now)
    # No GPU is ever held by two open attempts.
    held = [g for a in e.attempts.values() for g in a.gpus]
    assert len(held) == len(set(held))
