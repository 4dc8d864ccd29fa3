"""bench/unallocated_churn.py's classification of preemptions of unallocated work (churn44,
docs/policy.md "Churn of unallocated work"), on a three-GPU scene that shows both ways a
preemption frees GPUs for nothing under DESIGN.md §3.4 as written."""

from __future__ import annotations

from bench import unallocated_churn as uc
from scheduler.policy import Budget, GpuHealth, Host, IncrementalScheduler
from scheduler.sim.engine import Engine, SimWorkload

T = 1_800_000_000


def _scene(exempt: int = 0, until: int = 60) -> tuple[uc.Watch, Engine]:
    """h1, h2 hold unallocated U1, U2; h3 holds allocated A, ending at 15 s. P1 arrives at 10 s and
    preempts U1 (grace 30 s); A's end lets P1 start on h3 at 15 s, its nomination dropped (§3.4),
    so U1's GPU is leaving for nobody. P2 arrives at 20 s and preempts U2 (leaving GPUs are not room
    for preemption: docs/policy.md reading 3), then starts on U1's GPU at its release (40 s): U2's
    GPU, released at 50 s, goes back to unallocated work."""
    watch = uc.Watch(uc.policy_for(exempt) if exempt else IncrementalScheduler(), 30)
    e = Engine(start=T, tick_interval=1, grace=30, with_reasons=False)
    e.scheduler = watch  # type: ignore[assignment]
    e.add_budget(Budget("org", "org", None))
    e.add_budget(Budget("a", "a", "org"))
    for h in ("h1", "h2", "h3"):
        e.add_host(Host(h, "H100", {0: GpuHealth.HEALTHY}))
    e.add_running(SimWorkload("U1", "a", 1, "H100", 0, T - 9, e.next_seq()), (("h1", 0),), T - 2)
    e.add_running(SimWorkload("U2", "a", 1, "H100", 0, T - 9, e.next_seq()), (("h2", 0),), T - 1)
    e.add_running(SimWorkload("A", "a", 1, "H100", 5, T - 9, e.next_seq(), remaining=15), (("h3", 0),), T)
    for t, wid in ((10, "P1"), (20, "P2")):
        e.advance_to(T + t)
        e.submit(SimWorkload(wid, "a", 1, "H100", 100, T + t, e.next_seq()))
        e.tick()
    e.advance_to(T + until)
    return watch, e


def test_both_preemptions_freed_gpus_for_nothing() -> None:
    watch, e = _scene()
    first, second = watch.victims
    # U2 started last, so it is the first victim (§3.4: most recently started first).
    assert (first.workload, first.preemptor, first.t - T) == ("U2", "P1", 10)
    assert (second.workload, second.preemptor, second.t - T) == ("U1", "P2", 20)
    assert [v.outcome() for v in watch.victims] == [uc.ELSEWHERE, uc.ELSEWHERE]
    assert first.started is not None and first.started[2] == (("h3", 0),)
    assert second.started is not None and second.started[2] == (("h2", 0),)
    # P2 preempted U1 while U2's GPU was already leaving for nobody, and started there.
    assert second.leaving == frozenset({("h2", 0)}) and second.leaving_victims == second.leaving
    assert first.first_taker() == "other allocated work"
    assert second.first_taker() == "the victim itself again"  # U1 back on h1 at 50 s
    lines = "\n".join(uc.report_lines(watch, e, {}, (60,)))
    assert "freed for nothing (preemptor not on them): 2 (100 %); then to unallocated work: 1" in lines
    assert "wholly on GPUs then leaving or free: 1, of them an earlier unallocated victim's: 1" in lines


def test_exempt_time_emulation() -> None:
    """The proposal R2 as the bench emulates it: with 60 s of exemption nobody is preempted at 10 s
    or 20 s; P1 starts on h3 at 15 s, and U1 (started at -2 s) becomes room at 58 s, for P2, which
    starts on its GPU at the release."""
    watch, e = _scene(exempt=60, until=100)
    (v,) = watch.victims
    assert (v.workload, v.preemptor, v.t - T, v.ran) == ("U1", "P2", 58, 60)
    assert v.outcome() == uc.ON_GPUS and v.started is not None and v.started[0] == T + 88
    assert e.workloads["P1"].first_start == T + 15
    assert e.workloads["U1"].state == "pending" and e.workloads["U2"].state == "running"
