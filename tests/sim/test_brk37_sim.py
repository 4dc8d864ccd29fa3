"""Break session 37: the simulator keeps a timeout's stop when a cancel follows in the grace period,
as the live service does (services.do_cancel_workload; DESIGN.md §4: the issued stop's reason)."""

from __future__ import annotations

from scheduler.policy import Budget, GpuHealth, Host
from scheduler.sim.engine import Engine, SimWorkload


def test_a_cancel_in_a_timeouts_grace_period_keeps_the_timeout() -> None:
    # Given a workload stopped for its wall-time limit, its grace period running
    e = Engine(start=0, grace=30)
    e.add_budget(Budget("org", "org", None))
    e.add_host(Host("h1", "H100", {0: GpuHealth.HEALTHY}))
    ends: list[str] = []
    e.on_release = lambda _a, reason, _at: ends.append(reason)
    e.submit(SimWorkload("w", "org", 1, "H100", 0, 0, 1, max_runtime=100))
    e.advance_to(115)
    assert e.workloads["w"].state == "preempting"
    # When its owner cancels it
    e.cancel("w")
    e.advance_to(300)
    # Then the attempt ends timeout and the workload failed (it ended canceled)
    assert ends == ["timeout"]
    assert e.workloads["w"].state == "failed"
