"""What a gang's pending reason reads of the whole hosts (``reason_tables.gang_reads``, tick48b):
one bit index per pass, each budget-class vector's levels as masks, compared under ``check``
with the plain table (``reason_tables.gang_reads_plain``: every whole host's level, sorted)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import scheduler.policy.reason_tables as reason_tables
from scheduler.policy import GpuHealth, IncrementalScheduler, PendingReason, Snapshot, schedule
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree

BUDGETS = ("a", "b", "c", "d", "e")


def _cluster(seed: int, n_hosts: int, n_pending: int, max_reservations: int) -> Snapshot:
    """Random whole hosts of 4 GPUs (some with few CPUs or little memory, some with a sick GPU)
    and hosts of 2, each GPU held or not by allocated work of a random budget (protected for a
    random time, some leaving) or unallocated work; pending gangs of 8 or 12 GPUs (some asking
    for CPUs and memory) and single-host workloads, of every budget."""
    rng = random.Random(seed)
    hosts = []
    for i in range(n_hosts):
        h = host(f"h{i:02d}", rng.choice((4, 4, 4, 2)))
        h = replace(h, cpus=rng.choice((None, 64, 8)), memory=rng.choice((None, 512, 32)))
        if rng.random() < 0.05:
            h = replace(h, gpu_health={**h.gpu_health, 0: GpuHealth.UNHEALTHY})
        hosts.append(h)
    attempts = []
    for h in hosts:
        g = 0
        while g < len(h.gpu_health):
            n = rng.randint(1, len(h.gpu_health) - g)
            if rng.random() < 0.6:
                kind = rng.random()
                attempts.append(
                    running(
                        f"r{len(attempts)}",
                        rng.choice(BUDGETS),
                        [(h.name, g + j) for j in range(n)],
                        m=rng.choice((H, 2 * H, 4 * H)),
                        started=T0 - rng.choice((0, H // 2, H, 3 * H)) if kind > 0.1 else None,
                        allocated=kind > 0.2,
                        stopping=rng.random() < 0.05,
                    )
                )
            g += n
    pend = []
    for i in range(n_pending):
        w = pending(f"w{i}", rng.choice(BUDGETS), rng.choice((8, 8, 12, 1, 4)), m=rng.choice((H, 2 * H)), seq=i)
        pend.append(replace(w, cpus=rng.choice((None, 16)), memory=rng.choice((None, 64))))
    usage = [lump(b, rng.randint(0, 400)) for b in BUDGETS]
    return snap(hosts, tree(*BUDGETS), attempts, pend, usage, max_reservations=max_reservations)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 20), st.integers(1, 25), st.sampled_from((0, 2)))
@example(311, 7, 13, 0)  # chk49: the check's floor search (M 0) once kept w1's gang options as unallocated work's
def test_the_index_reads_what_the_table_reads(seed: int, n_hosts: int, n_pending: int, reservations: int) -> None:
    """Under ``check`` every gang reason's reads from the index are compared with the plain
    table's (an AssertionError if they differ); the checked pass decides as a fresh one."""
    s = _cluster(seed, n_hosts, n_pending, reservations)
    assert IncrementalScheduler(check=True)(s) == schedule(s)


def test_the_random_clusters_give_gang_reasons_of_every_kind() -> None:
    """The clusters above reach gang reasons at several levels, some with CPUs or memory short."""
    reasons: set[PendingReason] = set()
    short = 0
    for seed in range(60):
        s = _cluster(seed, 12, 20, 0)
        s_gangs = {w.id: w.gpus > 4 for w in s.pending}
        d = schedule(s)
        for wid, info in d.pending.items():
            if s_gangs[wid] and ("hosts" in info.detail or info.detail.get("resources")):
                reasons.add(info.reason)
                short += bool(info.detail.get("resources"))
    assert len(reasons) >= 3
    assert short > 0


def test_a_wrong_index_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """P1 needs three whole hosts: h2, h3 empty and h1, whose protected work keeps it; an index
    that forgets every budget's work ranks h1 empty, and ``check`` says so."""
    a1 = running("A1", "a", [("h1", i) for i in range(4)], m=3 * H, started=T0 - H)
    s = snap([host("h1", 4), host("h2", 4), host("h3", 4)], tree("a", "b"), [a1], [pending("P1", "b", 12)])
    s = replace(s, max_reservations=0)
    assert schedule(s).pending["P1"].detail["hosts"] == ["h2", "h3", "h1"]
    real = reason_tables._gang_index
    monkeypatch.setattr(reason_tables, "_gang_index", lambda *a: (*real(*a)[:3], 0, 0, 0, {}))
    with pytest.raises(AssertionError, match="gang reason reads for P1"):
        IncrementalScheduler(check=True)(s)
