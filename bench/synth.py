"""Synthetic but realistic cluster states for benchmarks (no Django).

GPU counts per workload are drawn like the Philly trace (86.7 % 1 GPU, 12.3 % 2–8,
1.0 % more than 8); the budget tree has 3 levels (root, programs, projects).
"""

from __future__ import annotations

import random
from dataclasses import replace

from scheduler.policy import Attempt, Budget, GpuHealth, Host, HostState, Snapshot, UsageRecord, Workload

T0 = 1_767_571_200
W = 7 * 86400


def philly_gpus(rng: random.Random) -> int:
    x = rng.random()
    if x < 0.867:
        return 1
    if x < 0.99:
        return rng.choice([2, 2, 2, 4, 4, 8, 8])
    return rng.choice([16, 16, 32, 64])


def make_tree(n_budgets: int = 60, programs: int = 5) -> tuple[list[Budget], list[str]]:
    budgets = [Budget("org", "org", None)]
    leaves: list[str] = []
    per = (n_budgets - programs) // programs
    for p in range(programs):
        budgets.append(Budget(f"p{p}", f"program-{p}", "org", 1 + p % 3))
        for q in range(per):
            key = f"p{p}/q{q}"
            budgets.append(Budget(key, f"project-{q}", f"p{p}", 1 + q % 4))
            leaves.append(key)
    return budgets, leaves


def make_snapshot(hosts: int, running: int, pending: int, *, seed: int = 1, gpus_per_host: int = 8) -> Snapshot:
    """A busy cluster: ``running`` attempts packed onto hosts, ``pending`` workloads waiting."""
    rng = random.Random(seed)
    budgets, leaves = make_tree()
    host_list = [
        Host(
            f"node{i:05d}",
            "H100",
            dict.fromkeys(range(gpus_per_host), GpuHealth.HEALTHY),
            HostState.ACTIVE,
            {"fabric": f"f{i // 32}"},
        )
        for i in range(hosts)
    ]
    attempts: list[Attempt] = []
    hi = 0
    free = gpus_per_host
    for n in range(running):
        g = min(philly_gpus(rng), gpus_per_host)
        if g > free:
            hi += 1
            free = gpus_per_host
        if hi >= hosts:
            break
        base = gpus_per_host - free
        gpus = tuple((host_list[hi].name, base + j) for j in range(g))
        free -= g
        m = rng.choice([0, 1800, 3600, 7200, 4 * 3600])
        started = T0 - rng.randint(60, 12 * 3600)
        attempts.append(Attempt(f"a{n}", f"r{n}", rng.choice(leaves), gpus, m > 0, m, started))
    work = [
        Workload(
            f"w{n}",
            rng.choice(leaves),
            philly_gpus(rng),
            "H100",
            rng.choice([0, 1800, 3600, 3600, 7200]),
            T0 - rng.randint(0, 3 * 86400),
            n,
        )
        for n in range(pending)
    ]
    usage = [
        UsageRecord(rng.choice(leaves), T0 - rng.randint(3600, W + 86400), 0, gpus=rng.choice([1, 1, 2, 8]))
        for _ in range(min(20000, pending))
    ]
    usage = [UsageRecord(u.budget, u.start, u.start + rng.randint(600, 86400), gpus=u.gpus) for u in usage]
    return Snapshot(now=T0, hosts=host_list, budgets=budgets, attempts=attempts, pending=work, usage=usage, window=W)


def make_settled(hosts: int, workloads: int, *, seed: int = 2, after: int = 600):  # noqa: ANN201
    """A state the policy itself produced: all ``workloads`` arrive over 3 days before T0 on an
    empty cluster, one tick places what fits, then ``after`` seconds pass with exits but no
    tick. Returns the engine (its ``snapshot()`` is the state to time)."""
    from scheduler.sim.engine import Engine, SimWorkload

    rng = random.Random(seed)
    budgets, leaves = make_tree()
    e = Engine(start=T0, window=W, tick_interval=after, grace=0, with_reasons=False)
    for b in budgets:
        e.add_budget(b)
    for i in range(hosts):
        e.add_host(
            Host(
                f"node{i:05d}",
                "H100",
                dict.fromkeys(range(8), GpuHealth.HEALTHY),
                HostState.ACTIVE,
                {"fabric": f"f{i // 32}"},
            )
        )
    for leaf in leaves:
        e.usage.append(UsageRecord(leaf, T0 - 86400, T0 - 86400, None, rng.randint(0, 2000) * 3600))
    for n in range(workloads):
        m = rng.choice([0, 1800, 3600, 3600, 7200])
        e.submit(
            SimWorkload(
                f"w{n}",
                rng.choice(leaves),
                philly_gpus(rng),
                "H100",
                m,
                T0 - rng.randint(0, 3 * 86400),
                e.next_seq(),
                remaining=rng.choice([None, 1200, 7200]),
            )
        )
    e.tick()
    e.with_reasons = True
    # Let time pass without scheduling: attempts that end in the meantime free their GPUs and
    # protections expire, so the timed tick has real work (starts, preemptions) to do.
    import heapq

    while e._events and e._events[0][0] <= T0 + after:
        at, _, kind, ident = heapq.heappop(e._events)
        e.now = at
        e._process_event(kind, ident)
    e.now = T0 + after
    return e


def with_drains(snap: Snapshot, percent: float, *, hours: float = 6.0, seed: int = 3) -> Snapshot:
    """``snap`` with ``percent`` % of its active hosts (drawn with ``seed``) given a drain
    scheduled for later (``Host.drain_at``, docs/deploy.md "Scheduled drains"), at instants
    staggered evenly from ``now + 10 min`` to ``now + hours``, in random host order."""
    active = [i for i, h in enumerate(snap.hosts) if h.state == HostState.ACTIVE and h.drain_at is None]
    n = round(len(active) * percent / 100)
    if n == 0:
        return snap
    chosen = random.Random(seed).sample(active, n)
    span = max(0, int(hours * 3600) - 600)
    hosts = list(snap.hosts)
    for k, i in enumerate(chosen):
        hosts[i] = replace(hosts[i], drain_at=snap.now + 600 + span * k // max(1, n - 1))
    return replace(snap, hosts=hosts)
