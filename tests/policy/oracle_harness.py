"""Random clusters driven through the simulator, comparing ``schedule()`` with the reference
scheduler (scheduler/policy/reference.py) on every pass.

Shared by tests/policy/test_reference.py (the ``make test`` profile) and bench/oracle_soak.py
(the long profile). A cluster is a pure function of one integer seed (``random.Random``), so a
failure names its seed and replays exactly.

Clusters are small on purpose: at most 5 hosts (so a gang never has more than C(5, 2) = 10 host
combinations and the fast path always takes its exact gang search, docs/policy.md "at most
2,000 combinations"), at most 8 GPUs per host and 10 workloads, so the reference's brute force
(every victim subset on every host) stays cheap.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from scheduler.policy import (
    Attempt,
    Budget,
    Decisions,
    GpuHealth,
    Hold,
    Host,
    HostState,
    OnCap,
    PendingReason,
    Snapshot,
    UsageRecord,
    Workload,
    schedule,
)
from scheduler.policy.reference import reference_schedule
from scheduler.sim.engine import Engine, SimWorkload

T0 = 1_767_571_200
H = 3600
MODELS = ("H100", "A100")
GIB = 1 << 30


# ------------------------------------------------------------------------------- comparison
def decisions_view(snap: Snapshot, dec: Decisions) -> dict[str, object]:
    """What must be equal between the two schedulers: starts, stops, nominations, reservations,
    host state changes, pending reason codes and the reason details that identify a decision
    (the unschedulable shape, the capping budget, the victims awaited and their host, the
    reserved start, the room and instant a ``protected_work`` reason names)."""
    reasons: dict[str, tuple[object, ...]] = {}
    for wid, info in dec.pending.items():
        d = info.detail
        if info.reason == PendingReason.UNSCHEDULABLE:
            extra: tuple[object, ...] = (d.get("model"), d.get("gpus"))
        elif info.reason == PendingReason.BUDGET_CAPPED:
            extra = (d.get("budget"), bool(d.get("unfunded")))
        elif info.reason == PendingReason.AWAITING_PREEMPTION:
            extra = (tuple(sorted(d.get("victims", ()))), d.get("host"))  # type: ignore[call-overload]
        elif info.reason == PendingReason.PROTECTED_WORK:
            # the room it names is its reservation's, were no host reserved: host (set) and start
            hosts = tuple(d["hosts"]) if "hosts" in d else (d.get("host"),)  # type: ignore[call-overload]
            extra = (d.get("reserved_start"), hosts, d.get("protected_until"))
        else:
            extra = (d.get("reserved_start"),)
        reasons[wid] = (str(info.reason), *extra)
    stops = Counter((s.attempt, str(s.reason), s.for_workload) for s in dec.stops)
    return {
        "starts": {s.workload: (tuple(sorted(s.gpus)), s.allocated, s.unfunded) for s in dec.starts},
        "stops": dict(stops),
        "nominations": {k: tuple(sorted(v)) for k, v in dec.nominations.items()},
        "reservations": dict(dec.reservations),
        "reserved_start": dict(dec.reserved_start),
        "host_states": {k: str(v) for k, v in dec.host_states.items()},
        "pending": reasons,
    }


def differences(snap: Snapshot, fast: Decisions, ref: Decisions) -> list[str]:
    """Human-readable differences, one per differing entry (empty when they agree)."""
    a, b = decisions_view(snap, fast), decisions_view(snap, ref)
    out = []
    for part in a:
        x, y = a[part], b[part]
        if x == y:
            continue
        assert isinstance(x, dict) and isinstance(y, dict)
        for k in sorted(set(x) | set(y), key=str):
            if x.get(k) != y.get(k):
                out.append(f"{part}[{k}]: fast={x.get(k)!r} reference={y.get(k)!r}")
    return out


# ------------------------------------------------------------------------------ known faults
def known_fault(snap: Snapshot, fast: Decisions) -> str | None:
    """The name of a known fast-path fault when the disagreement is exactly one, else None.

    There is none now: faults (a), (b), (e) and (f) of docs/policy.md are fixed and their minimal
    cases in tests/policy/test_reference_cases.py pass. A fault found later gets a minimal xfail
    case there and a filter branch here (named by a letter), counted rather than failed unless
    ``FAIRWAY_ORACLE_STRICT=1``.
    """
    if os.environ.get("FAIRWAY_ORACLE_STRICT"):
        return None
    return None


# ------------------------------------------------------------------------------- the engine
@dataclass
class Tally:
    """What a run of clusters saw."""

    clusters: int = 0
    passes: int = 0
    starts: int = 0
    preemptions: int = 0
    reservations: int = 0
    nominated_passes: int = 0
    grace_passes: int = 0
    """Passes that saw an attempt stopping with its release still ahead (``release_at > now``)."""
    gangs_started: int = 0
    drain_passes: int = 0
    """Passes where some active host had a drain scheduled for later (``Host.drain_at``)."""
    drain_bites: int = 0
    """Of those, passes whose decisions the scheduled drains changed (the pass without them differs)."""
    reasons: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)
    known_examples: dict[str, tuple[int, Snapshot]] = field(default_factory=dict)
    unknown: list[tuple[int, Snapshot, list[str]]] = field(default_factory=list)

    def merge(self, other: Tally) -> None:
        self.clusters += other.clusters
        self.passes += other.passes
        self.starts += other.starts
        self.preemptions += other.preemptions
        self.reservations += other.reservations
        self.nominated_passes += other.nominated_passes
        self.grace_passes += other.grace_passes
        self.gangs_started += other.gangs_started
        self.drain_passes += other.drain_passes
        self.drain_bites += other.drain_bites
        self.reasons.update(other.reasons)
        self.known.update(other.known)
        for k, v in other.known_examples.items():
            self.known_examples.setdefault(k, v)
        self.unknown.extend(other.unknown)


class OracleEngine(Engine):
    """The simulator with ``schedule()`` as its policy, compared with the reference on every pass.

    The fast path's decisions are applied (both see the same snapshot every pass).
    """

    def __init__(self, seed: int, tally: Tally, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.seed = seed
        self.tally = tally
        self.scheduler = self._compare  # type: ignore[assignment]

    def _compare(self, snap: Snapshot) -> Decisions:
        fast = schedule(snap)
        ref = reference_schedule(snap)
        t = self.tally
        t.passes += 1
        t.starts += len(fast.starts)
        t.preemptions += sum(1 for s in fast.stops if s.for_workload)
        t.reservations += len(fast.reserved_start)
        t.nominated_passes += bool(snap.nominations)
        t.grace_passes += _in_grace(snap)
        largest = {}
        for h in snap.hosts:
            largest[h.model] = max(largest.get(h.model, 0), h.size)
        t.gangs_started += sum(1 for s in fast.starts if len({g[0] for g in s.gpus}) > 1)
        t.reasons.update(str(i.reason) for i in ref.pending.values())
        _count_drains(t, snap, fast)
        diff = differences(snap, fast, ref)
        if diff:
            kind = known_fault(snap, fast)
            if kind is not None:
                t.known[kind] += 1
                t.known_examples.setdefault(kind, (self.seed, snap))
            else:
                t.unknown.append((self.seed, snap, diff))
        return fast


# ------------------------------------------------------------------------------- the clusters
def build_cluster(
    seed: int, tally: Tally, *, quick: bool = False
) -> tuple[OracleEngine, list[tuple[int, int, Callable[[], None]]], int]:
    """A random cluster from ``seed``: the engine, its events ``(time, order, action)`` and the end time.

    ``quick`` (the ``make test`` profile) ticks half as often on the grid and plays three
    quarters of the time: fewer passes per cluster, the same kinds of cluster.

    Covers single hosts and gangs, fabrics, two GPU models, cordons, drains and drain-now,
    offline hosts, unhealthy GPUs (fatal XIDs drain), holds (static and toggled), caps
    (``on_cap`` hold and downgrade), archived budgets, a share tree of depth 2–3, usage
    inside and across the window's start, grace periods (nominations inside them), cancels,
    small ``max_reservations`` and unallocated work (M = 0).
    """
    rnd = random.Random(seed)
    # Hosts: per model one size most of the time (so gangs are possible), sometimes mixed.
    n_hosts = rnd.randint(1, 5)
    size_of = {m: rnd.choice([2, 4, 4, 8]) for m in MODELS}
    mixed = rnd.random() < 0.3
    hosts = []
    for i in range(n_hosts):
        model = MODELS[0] if rnd.random() < 0.75 else MODELS[1]
        size = rnd.choice([2, 4, 8]) if mixed else size_of[model]
        health = {j: GpuHealth.HEALTHY for j in range(size)}
        if rnd.random() < 0.1:
            health[rnd.randrange(size)] = GpuHealth.UNHEALTHY
        if rnd.random() < 0.1:
            health[rnd.randrange(size)] = GpuHealth.DEGRADED
        state = rnd.choice([HostState.ACTIVE] * 8 + [HostState.CORDONED, HostState.DRAINING])
        labels = {"fabric": f"f{rnd.randrange(3)}"} if rnd.random() < 0.9 else {}
        # CPUs and memory (§3.3): unknown on some hosts, a few per GPU on most, uneven on some.
        cpus = rnd.choice([None, size * 4, size * 4, size * 4 + 3])
        memory = rnd.choice([None, size * GIB * 16, size * GIB * 16 + GIB])
        hosts.append(Host(f"h{i}", model, health, state, labels, cpus=cpus, memory=memory))
    # Budgets: org → programs → projects (→ sub-budgets).
    budgets = [Budget("org", "org", None)]
    leaves: list[str] = []
    for p in range(rnd.randint(1, 3)):
        pk = f"p{p}"
        budgets.append(_budget(rnd, pk, f"p{p}", "org", leaf=False))
        for q in range(rnd.randint(1, 3)):
            qk = f"{pk}/q{q}"
            if rnd.random() < 0.25:
                budgets.append(_budget(rnd, qk, f"q{q}", pk, leaf=False))
                for s in range(rnd.randint(1, 2)):
                    sk = f"{qk}/s{s}"
                    budgets.append(_budget(rnd, sk, f"s{s}", qk, leaf=True))
                    leaves.append(sk)
            else:
                budgets.append(_budget(rnd, qk, f"q{q}", pk, leaf=True))
                leaves.append(qk)
    window = rnd.choice([7 * 86400, 7 * 86400, 3 * H])
    grace = rnd.choice([0, 0, 30, 120, 400])
    e = OracleEngine(
        seed,
        tally,
        start=T0,
        window=window,
        tick_interval=rnd.choice([600, 900]) * (2 if quick else 1),
        grace=grace,
        max_reservations=rnd.choice([1, 1, 2, 3]),
    )
    for b in budgets:
        e.add_budget(b)
    for h in hosts:
        e.add_host(h)
    for leaf in leaves:
        if rnd.random() < 0.7:
            gh = rnd.randint(0, 40)
            e.usage.append(UsageRecord(leaf, T0 - 2 * H, T0 - 2 * H, None, gh * H))
        if rnd.random() < 0.3:
            # An interval across the window's start (pro-rata).
            e.usage.append(
                UsageRecord(leaf, T0 - window - H, T0 - window + rnd.randint(1, 3) * H, gpus=rnd.randint(1, 4))
            )
    horizon = rnd.choice([H, 2 * H, 2 * H])
    if quick:
        horizon = horizon * 3 // 4
    events: list[tuple[int, int, Callable[[], None]]] = []
    largest = {m: max((h.size for h in hosts if h.model == m), default=1) for m in MODELS}
    n_work = rnd.randint(2, 10)
    for n in range(n_work):
        model = MODELS[0] if rnd.random() < 0.8 else MODELS[1]
        gpus = rnd.choice([1, 1, 1, 2, 2, 3, 4, largest[model], 2 * largest[model]])
        m = rnd.choice([0, 0, 600, 1800, 3600])
        dur = rnd.choice([None, 300, 900, 1800, 3 * H])
        at = 0 if rnd.random() < 0.3 else rnd.randrange(horizon)
        leaf = rnd.choice(leaves)
        wid = f"w{n}"

        # Requests: the default share mostly; sometimes more CPUs or memory than that (binding),
        # sometimes less, now and then more than any host offers (unschedulable).
        cpus = rnd.choice([None, None, None, 1, 4 * gpus + 6, 40])
        memory = rnd.choice([None, None, None, None, GIB, 24 * GIB * gpus])

        def submit(  # noqa: PLR0913
            wid: str = wid,
            leaf: str = leaf,
            gpus: int = gpus,
            model: str = model,
            m: int = m,
            dur=dur,  # noqa: ANN001
            cpus: int | None = cpus,
            memory: int | None = memory,
        ) -> None:
            w = SimWorkload(wid, leaf, gpus, model, m, e.now, e.next_seq(), remaining=dur, cpus=cpus, memory=memory)
            e.submit(w)

        events.append((at, len(events), submit))
    # Work already running at the start (some of it unallocated, some protected, some on hosts
    # that drain or have a bad GPU), so the first passes already preempt, drain and fault.
    taken: set[tuple[str, int]] = set()
    for r in range(rnd.choice([0, 0, 1, 2, 4])):
        h = rnd.choice(hosts)
        n = rnd.choice([1, 1, 2, h.size])
        idx = [i for i in range(h.size) if (h.name, i) not in taken][:n]
        if len(idx) < n:
            continue
        taken.update((h.name, i) for i in idx)
        m = rnd.choice([0, 0, 600, 3600])
        w = SimWorkload(
            f"r{r}", rnd.choice(leaves), n, h.model, m, T0 - 2 * H, e.next_seq(), remaining=rnd.choice([None, 1800])
        )
        w.cpus = rnd.choice([None, None, 4 * n + 4])
        e.add_running(w, tuple((h.name, i) for i in idx), T0 - rnd.choice([0, 300, 1800, 2 * H]))
    for _ in range(rnd.choice([0, 1, 2, 3, 4])):
        events.append((rnd.randrange(horizon), len(events), _random_event(rnd, e, hosts, budgets, n_work)))
    _scheduled_drains(seed, e, hosts, horizon, events)
    events.sort(key=lambda x: (x[0], x[1]))
    return e, events, horizon


def _scheduled_drains(
    seed: int, e: Engine, hosts: list[Host], horizon: int, events: list[tuple[int, int, Callable[[], None]]]
) -> None:
    """Drains scheduled for later (docs/deploy.md "Scheduled drains") on a third of the clusters,
    from a random stream of their own (the rest of a seed's cluster is as it was): at the start or
    at a random instant, for 5 min to 2 h ahead (the minimum runtimes are 10 min to 1 h), a drain
    or a drain now."""
    dr = random.Random(seed ^ 0x5D7A1)
    if dr.random() >= 0.35:
        return
    for _ in range(dr.choice([1, 1, 2])):
        host = dr.choice(hosts).name
        ahead = dr.choice([300, 900, 1800, 3600, 2 * H])
        now = dr.random() < 0.2
        at = 0 if dr.random() < 0.5 else dr.randrange(horizon)

        def act(host: str = host, ahead: int = ahead, now: bool = now) -> None:
            e.schedule_drain(host, e.now + ahead, now=now)

        if at == 0:
            act()
        else:
            events.append((at, len(events), act))


def _budget(rnd: random.Random, key: str, name: str, parent: str, *, leaf: bool) -> Budget:
    capped = rnd.random() < 0.08
    return Budget(
        key,
        name,
        parent,
        shares=rnd.randint(1, 3),
        archived=leaf and rnd.random() < 0.1,
        hold=rnd.random() < 0.03,
        capped=capped,
        on_cap=rnd.choice([OnCap.HOLD, OnCap.DOWNGRADE]),
    )


def _random_event(
    rnd: random.Random, e: Engine, hosts: list[Host], budgets: list[Budget], n_work: int
) -> Callable[[], None]:
    kind = rnd.choice(
        ["drain", "drain_now", "cordon", "resume", "offline", "gpu_bad", "gpu_fatal", "gpu_good", "hold", "cancel"]
    )
    host = rnd.choice(hosts).name
    idx = rnd.randrange(len(rnd.choice(hosts).gpu_health))
    key = rnd.choice(budgets[1:]).key
    wid = f"w{rnd.randrange(n_work)}"

    def act() -> None:
        h = e.hosts[host]
        if kind == "drain":
            e.set_host_state(host, "draining")
        elif kind == "drain_now":
            e.set_host_state(host, "drain_now")
        elif kind == "cordon":
            e.set_host_state(host, "cordoned")
        elif kind == "resume":
            e.set_host_state(host, "active")
        elif kind == "offline":
            e.set_host_state(host, "offline")
        elif kind in ("gpu_bad", "gpu_fatal"):
            if idx < h.size:
                e.set_gpu_health(host, idx, GpuHealth.UNHEALTHY, 79 if kind == "gpu_fatal" else None)
        elif kind == "gpu_good":
            for i, g in h.gpu_health.items():
                if g == GpuHealth.UNHEALTHY:
                    e.set_gpu_health(host, i, GpuHealth.HEALTHY)
        elif kind == "hold":
            b = e.budgets[key]
            e.budgets[key] = replace(b, hold=not b.hold)
        elif kind == "cancel" and wid in e.workloads and e.workloads[wid].state in ("pending", "running"):
            e.cancel(wid)

    return act


def run_cluster(seed: int, tally: Tally | None = None, *, quick: bool = False) -> Tally:
    """Build the cluster of ``seed`` and run it to its end, comparing every pass."""
    tally = tally if tally is not None else Tally()
    e, events, horizon = build_cluster(seed, tally, quick=quick)
    play(e, events, horizon)
    tally.clusters += 1
    return tally


def play(e: Engine, events: list[tuple[int, int, Callable[[], None]]], horizon: int) -> None:
    """Run ``events`` (from :func:`build_cluster`) on ``e``, a tick after each instant's, to ``horizon``.

    Everything of one instant happens before that instant's tick (the live tick is debounced),
    so one pass often sees several arrivals: several preemptors, reservations and reasons."""
    i = 0
    while i < len(events):
        at = events[i][0]
        e.advance_to(T0 + at)
        while i < len(events) and events[i][0] == at:
            events[i][2]()
            i += 1
        e.tick()
    e.advance_to(T0 + horizon)


def crowded_snapshot(seed: int) -> Snapshot:
    """One busy instant from ``seed``, for a single-pass comparison: 1–3 hosts filled with
    allocated (protected or not), unallocated, starting and leaving attempts, and 2–5 allocated
    workloads arriving together, so that several preemptors, reservations and reasons meet in
    one pass (which the simulated clusters, one arrival at a time, reach less often)."""
    rnd = random.Random(seed)
    budgets = [Budget("org", "org", None)]
    for k in "abc":
        budgets.append(Budget(k, k, "org", shares=rnd.randint(1, 2)))
    hosts = [
        Host(
            f"h{i}",
            "H100",
            {j: GpuHealth.HEALTHY for j in range(4)},
            HostState.ACTIVE,
            {"fabric": f"f{i % 2}"},
            cpus=rnd.choice([None, 16, 16]),
            memory=rnd.choice([None, 64 * GIB]),
        )
        for i in range(rnd.randint(1, 3))
    ]
    dr = random.Random(seed ^ 0xD7A1)  # scheduled drains: a stream of their own, the rest as it was
    hosts = [replace(h, drain_at=T0 + dr.choice([0, 300, 1800, 3600, 7200])) if dr.random() < 0.3 else h for h in hosts]
    attempts = []
    for h in hosts:
        j = 0
        while j < 4:
            k = min(rnd.randint(1, 3), 4 - j)
            if rnd.random() < 0.2:
                j += k
                continue
            alloc = rnd.random() < 0.4
            n = len(attempts) + 1
            attempts.append(
                Attempt(
                    f"a{n}",
                    f"A{n}",
                    rnd.choice("abc"),
                    tuple((h.name, x) for x in range(j, j + k)),
                    alloc,
                    600 if alloc else 0,
                    # None: still starting (not confirmed; the simulator confirms at once)
                    None if (ago := rnd.choice([100, 700, 2000, 0])) == 0 else T0 - ago,
                    stopping=(stopping := rnd.random() < 0.1),
                    # a stop issued earlier: its GPUs come back at stop + grace (§3.5), unknown (None)
                    # or already due in some snapshots
                    release_at=rnd.choice([None, T0, T0 + 30, T0 + 400, T0 + 900]) if stopping else None,
                    cpus=rnd.choice([None, None, 1, 4 * k + 3]),
                    memory=rnd.choice([None, None, 20 * GIB * k]),
                )
            )
            j += k
    pending = [
        Workload(
            f"P{i}",
            rnd.choice("abc"),
            rnd.choice([1, 2, 3, 4, 8]),
            "H100",
            rnd.choice([0, 600, 1800]),
            T0 - 10 + i,
            i,
            cpus=rnd.choice([None, None, 2, 12]),
            memory=rnd.choice([None, None, 40 * GIB]),
        )
        for i in range(rnd.randint(2, 5))
    ]
    usage = [UsageRecord(rnd.choice("abc"), T0 - 100, T0 - 100, None, rnd.randint(0, 50) * H)]
    pending, groups = _with_dependencies(random.Random(seed ^ 0x5EED), pending)
    pending = _with_holds(random.Random(seed ^ 0x401D), pending)
    return Snapshot(
        T0, hosts, budgets, attempts, pending, usage, max_reservations=rnd.choice([1, 2, 8]), group_limits=groups
    )


def _with_dependencies(jr: random.Random, pending: list[Workload]) -> tuple[list[Workload], dict[str, tuple[int, int]]]:
    """In about half the snapshots, some pending workloads wait on dependencies and some belong
    to array groups with a ``%N`` cap, partly used by members already holding GPUs (§3.8)."""
    if jr.random() < 0.5:
        return pending, {}
    groups = {g: (jr.randint(1, 3), jr.randint(0, 2)) for g in ("g1", "g2")}
    out = [
        replace(w, waiting=jr.random() < 0.2, group=jr.choice([None, "g1", "g1", "g2"]))  # type: ignore[arg-type]
        for w in pending
    ]
    return out, groups


def _with_holds(hr: random.Random, pending: list[Workload]) -> list[Workload]:
    """In about a third of the snapshots, some pending workloads are on a hold of their own, a
    user's or an admin's (docs/jobs.md "Hold and release"), beside dependencies and group caps.
    Its own random stream: the other draws of a seed stay what they were."""
    if hr.random() < 2 / 3:
        return pending
    return [replace(w, hold=hr.choice([Hold.USER, Hold.ADMIN])) if hr.random() < 0.3 else w for w in pending]


def _count_drains(t: Tally, snap: Snapshot, fast: Decisions) -> None:
    """Count a pass that saw a scheduled drain, and whether the drains changed its decisions."""
    if not any(h.drain_at is not None and h.state == HostState.ACTIVE for h in snap.hosts):
        return
    t.drain_passes += 1
    plain = replace(snap, hosts=[replace(h, drain_at=None) for h in snap.hosts])
    if decisions_view(plain, schedule(plain)) != decisions_view(snap, fast):
        t.drain_bites += 1


def _in_grace(snap: Snapshot) -> bool:
    """Some attempt is stopping and its GPUs come back later than now (§3.5's release)."""
    return any(a.stopping and a.release_at is not None and a.release_at > snap.now for a in snap.attempts)


def compare_once(seed: int, tally: Tally | None = None, views: dict[int, dict[str, object]] | None = None) -> Tally:
    """Compare the two schedulers on :func:`crowded_snapshot` of ``seed`` (one pass); ``views``,
    if given, gets the reference's :func:`decisions_view` of that pass under ``seed``."""
    tally = tally if tally is not None else Tally()
    snap = crowded_snapshot(seed)
    fast = schedule(snap)
    ref = reference_schedule(snap)
    if views is not None:
        views[seed] = decisions_view(snap, ref)
    tally.clusters += 1
    tally.passes += 1
    tally.preemptions += sum(1 for s in fast.stops if s.for_workload)
    tally.grace_passes += _in_grace(snap)
    _count_drains(tally, snap, fast)
    diff = differences(snap, fast, ref)
    if diff:
        kind = known_fault(snap, fast)
        if kind is not None:
            tally.known[kind] += 1
            tally.known_examples.setdefault(kind, (seed, snap))
        else:
            tally.unknown.append((seed, snap, diff))
    return tally


def describe(snap: Snapshot) -> str:
    """A snapshot as Python source (to paste into tests/policy/test_reference_cases.py)."""
    return repr(snap)
