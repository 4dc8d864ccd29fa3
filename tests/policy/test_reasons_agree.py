"""§3.8 reasons read what the reservation reads (§3.5) and count CPUs and memory (§3.3).

Before: a gang's ``protected_work`` named the latest protection end on the first hosts by level
and name, its own computation, while its reservation waited for the k-th earliest host by the
room profile (a starting attempt's end at ``now + M``): the two named different instants and
hosts. And the reason of a shape read GPUs only: a workload kept out by CPUs or memory alone
was told ``reserved_for_other`` (GPUs free, nothing reserved), and two workloads of one budget,
model, size and M shared one reason whatever their CPU requests.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import GpuHealth, HostState, IncrementalScheduler, PendingReason, schedule
from scheduler.policy.reference import reference_schedule
from scheduler.policy.types import Host
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree

GIB = 1 << 30


def rhost(name: str, gpus: int = 4, cpus: int | None = 16, memory: int | None = None) -> Host:
    return Host(
        name, "H100", dict.fromkeys(range(gpus), GpuHealth.HEALTHY), HostState.ACTIVE, {}, cpus=cpus, memory=memory
    )


def _whole(aid: str, h: str, m: int, started: int | None) -> object:
    return running(aid, "a", [(h, i) for i in range(4)], m=m, started=started)


@pytest.mark.parametrize(
    "attempts, start, hosts",
    [
        # h1 protected 3 h more, h2 1 h, h3 2 h: the gang's room comes at 2 h on h2 and h3
        (
            [_whole("A1", "h1", 4 * H, T0 - H), _whole("A2", "h2", 2 * H, T0 - H), _whole("A3", "h3", 3 * H, T0 - H)],
            T0 + 2 * H,
            ["h2", "h3"],
        ),
        # h1's attempt is still starting: protected until M after its start, at the earliest now + M
        ([_whole("A1", "h1", H, None), _whole("A2", "h2", H, T0 - H // 2)], T0 + H, ["h1", "h2"]),
    ],
    ids=["kth-earliest", "starting"],
)
def test_a_gangs_protected_work_names_its_reservations_start_and_hosts(attempts, start, hosts):
    hs = [host(f"h{i}", 4) for i in range(1, 1 + len({a.gpus[0][0] for a in attempts}))]
    s = snap(hs, tree("a", "b"), attempts, [pending("G", "b", 8)], usage=[lump("a", 1000)])
    d = schedule(s)
    assert d.stops == [] and d.reserved_start["G"] == start
    assert sorted(h for h, wid in d.reservations.items() if wid == "G") == hosts
    info = d.pending["G"]
    assert info.reason == PendingReason.PROTECTED_WORK
    assert (info.detail["protected_until"], info.detail["hosts"]) == (start, hosts)
    assert IncrementalScheduler(check=True)(s) == d
    assert reference_schedule(s).pending["G"].reason == PendingReason.PROTECTED_WORK


def test_a_workload_kept_out_by_cpus_held_by_protected_work_says_protected_work_and_cpus():
    # h1 has 2 free GPUs, but the protected attempt there asked all 16 CPUs: room comes at its end.
    a = replace(running("A", "a", [("h1", 0), ("h1", 1)], m=2 * H, started=T0 - H), cpus=16)
    s = snap([rhost("h1")], tree("a", "b"), [a], [pending("w", "b", 2)], usage=[lump("a", 1000)])
    d = schedule(s)
    assert d.starts == [] and d.stops == [] and d.reserved_start["w"] == T0 + H
    info = d.pending["w"]
    assert info.reason == PendingReason.PROTECTED_WORK, info  # was reserved_for_other, nothing reserved
    assert (info.detail["host"], info.detail["protected_until"], info.detail["resources"]) == ("h1", T0 + H, ["cpus"])
    assert info.detail["blocking"] == ["A"]
    assert IncrementalScheduler(check=True)(s) == d
    assert reference_schedule(s).pending["w"].reason == PendingReason.PROTECTED_WORK


def test_a_workload_kept_out_by_its_own_budgets_memory_says_insufficient_and_memory():
    a = replace(running("A", "b", [("h1", 0)], m=2 * H, started=T0 - H), memory=60 * GIB)
    s = snap([rhost("h1", cpus=None, memory=64 * GIB)], tree("a", "b"), [a], [pending("w", "b", 2)])
    d = schedule(s)
    info = d.pending["w"]
    assert info.reason == PendingReason.INSUFFICIENT_GPUS, info
    assert info.detail["resources"] == ["memory"]
    assert reference_schedule(s).pending["w"].reason == PendingReason.INSUFFICIENT_GPUS


def test_workloads_of_one_shape_but_other_cpu_requests_get_their_own_reasons():
    # 1 GPU and 2 CPUs free; A (a, protected) holds 8 CPUs, F (w's own budget) 6. w1 fits once A
    # ends; w2 never fits while F runs.
    a = replace(running("A", "a", [("h1", 0), ("h1", 1)], m=2 * H, started=T0 - H), cpus=8)
    f = replace(running("F", "b", [("h1", 2)], m=2 * H, started=T0 - H), cpus=6)
    w1 = replace(pending("w1", "b", 1, seq=1), cpus=4)
    w2 = replace(pending("w2", "b", 1, seq=2), cpus=12)
    s = snap([rhost("h1")], tree("a", "b"), [a, f], [w1, w2], usage=[lump("a", 1000)])
    d = schedule(s)
    assert d.starts == []
    assert (d.pending["w1"].reason, d.pending["w1"].detail["resources"]) == (PendingReason.PROTECTED_WORK, ["cpus"])
    assert (d.pending["w2"].reason, d.pending["w2"].detail["resources"]) == (PendingReason.INSUFFICIENT_GPUS, ["cpus"])
    ref = reference_schedule(s)
    assert [ref.pending[w].reason for w in ("w1", "w2")] == [d.pending[w].reason for w in ("w1", "w2")]


def test_a_gang_whose_requests_fit_no_free_host_says_so():
    # h1, h2: free but 8 CPUs each; h3, h4: 32 CPUs, held by protected work of a. The gang asks
    # 24 CPUs per host: only h3 and h4 can take it, when a's work there ends.
    hs = [rhost("h1", cpus=8), rhost("h2", cpus=8), rhost("h3", cpus=32), rhost("h4", cpus=32)]
    work = [_whole("A3", "h3", 2 * H, T0 - H), _whole("A4", "h4", 3 * H, T0 - H)]
    g = replace(pending("G", "b", 8), cpus=24)
    s = snap(hs, tree("a", "b"), work, [g], usage=[lump("a", 1000)])
    d = schedule(s)
    info = d.pending["G"]
    assert info.reason == PendingReason.PROTECTED_WORK, info  # was reserved_for_other (h1, h2 free)
    assert (info.detail["protected_until"], info.detail["hosts"]) == (T0 + 2 * H, ["h3", "h4"])
    assert info.detail["resources"] == ["cpus"] and d.reserved_start["G"] == T0 + 2 * H
    assert reference_schedule(s).pending["G"].reason == PendingReason.PROTECTED_WORK


def test_gpu_bound_reasons_carry_no_resources():
    a = running("A", "a", [("h1", i) for i in range(4)], m=2 * H, started=T0 - H)
    s = snap([rhost("h1")], tree("a", "b"), [a], [pending("w", "b", 2)], usage=[lump("a", 1000)])
    info = schedule(s).pending["w"]
    assert info.reason == PendingReason.PROTECTED_WORK and "resources" not in info.detail


@pytest.mark.parametrize("cpus", [None, 16], ids=["gpus-bind", "cpus-bind"])
def test_a_workload_waiting_on_a_starting_attempt_names_its_reservations_start(cpus):
    """A single-host ``protected_work`` reason behind an attempt still starting (placed, not yet
    confirmed by its agent): the reservation counts its protection to ``now + M`` at the earliest
    (§3.4, §3.5), and the reason named ``now`` (``room_by(starting_now=True)``): two instants.
    Now the reason reads the reservation's start, and the reference states the same."""
    a = running("A", "a", [("h1", i) for i in range(4)], m=2 * H, started=None)
    if cpus:
        a = replace(a, cpus=16)
    s = snap([rhost("h1", cpus=cpus)], tree("a", "b"), [a], [pending("w", "b", 2)], usage=[lump("a", 1000)])
    d = schedule(s)
    assert d.starts == [] and d.stops == [] and d.reserved_start["w"] == T0 + 2 * H
    info = d.pending["w"]
    assert info.reason == PendingReason.PROTECTED_WORK, info
    assert (info.detail["host"], info.detail["protected_until"]) == ("h1", d.reserved_start["w"])
    assert IncrementalScheduler(check=True)(s) == d
    ref = reference_schedule(s).pending["w"]
    assert (ref.reason, ref.detail["host"], ref.detail["protected_until"]) == (
        PendingReason.PROTECTED_WORK,
        "h1",
        T0 + 2 * H,
    )
