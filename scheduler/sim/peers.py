"""Peer scheduling policies for the trace simulator (docs/simulation.md): what a lab could run instead.

Each peer is a small class; an instance is a callable ``Snapshot -> Decisions``, the interface of
Fairway's :func:`scheduler.policy.schedule`, so the same engine (:mod:`scheduler.sim.simulate`)
drives all of them. Peers know nothing of minimum runtimes: a start is marked ``allocated`` by the
workload's funding class (``min_runtime > 0``) only so the metrics can tell the classes apart,
and every attempt counts in a peer's own usage. All share one placement rule with Fairway (best
fit on one host; a job larger than a host takes whole free hosts) so only the ordering and
preemption rules differ. Deterministic: ties are broken by names and submission order.

The Slurm peer keeps decayed usage between calls, as ``slurmctld`` does (it folds in the GPUs of
the attempts it sees at each call, like ``PriorityCalcPeriod``); the others are pure functions of
the snapshot.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from scheduler.policy import (
    Attempt,
    Decisions,
    GpuHealth,
    GpuRef,
    Host,
    HostState,
    Snapshot,
    Start,
    Stop,
    StopReason,
    Workload,
)
from scheduler.policy.tree import BudgetTree
from scheduler.policy.usage import windowed_usage

HALF_LIFE_S = 7 * 86_400


def _order(w: Workload) -> tuple[int, int, str]:
    return (w.submitted_at, w.seq, w.id)


class Room:
    """Free GPUs of one snapshot and best-fit placement (DESIGN.md §3.3 without fabrics).

    Free: healthy GPUs of ``active`` hosts held by no open attempt and nominated to nobody.
    ``cache`` (kept by a policy instance across calls) holds each host's healthy indices, keyed by
    the host object, so an unchanged host costs nothing to look at again.
    """

    def __init__(self, snap: Snapshot, cache: dict[str, tuple[Host, list[int]]] | None = None) -> None:
        self.hosts = {h.name: h for h in snap.hosts}
        self._attempts = snap.attempts
        self._attempts_on: dict[str, list[Attempt]] | None = None
        held: dict[str, set[int]] = {}
        for a in snap.attempts:
            for h, i in a.gpus:
                held.setdefault(h, set()).add(i)
        nominated = {g for gs in snap.nominations.values() for g in gs}
        cache = {} if cache is None else cache
        self.free: dict[str, list[int]] = {}
        self.whole: dict[str, bool] = {}
        for h in snap.hosts:
            hit = cache.get(h.name)
            if hit is None or hit[0] is not h:
                hit = cache[h.name] = (h, [i for i, st in sorted(h.gpu_health.items()) if st != GpuHealth.UNHEALTHY])
            healthy = hit[1]
            ok = h.state == HostState.ACTIVE
            self.whole[h.name] = ok and len(healthy) == h.size
            if not ok:
                self.free[h.name] = []
                continue
            busy = held.get(h.name)
            free = healthy if not busy else [i for i in healthy if i not in busy]
            if nominated:
                free = [i for i in free if (h.name, i) not in nominated]
            self.free[h.name] = list(free)
        self.total_free = sum(len(f) for f in self.free.values())
        self.largest = max((h.size for h in snap.hosts), default=0)
        self.names = sorted(self.free)

    @property
    def attempts_on(self) -> dict[str, list[Attempt]]:
        """Host name → attempts holding GPUs there (built on first use)."""
        if self._attempts_on is None:
            on: dict[str, list[Attempt]] = {name: [] for name in self.hosts}
            for a in self._attempts:
                seen = set()
                for h, _ in a.gpus:
                    if h not in seen and h in on:
                        seen.add(h)
                        on[h].append(a)
            self._attempts_on = on
        return self._attempts_on

    def usable(self, gpus: Iterable[GpuRef]) -> bool:
        """True when every GPU is healthy on an active host."""
        for h, i in gpus:
            host = self.hosts.get(h)
            if host is None or host.state != HostState.ACTIVE or host.gpu_health.get(i) == GpuHealth.UNHEALTHY:
                return False
        return True

    def place(self, n: int) -> tuple[GpuRef, ...] | None:
        """Best fit for ``n`` GPUs now (fewest free GPUs that fit, then host name), or None."""
        if n <= self.largest:
            best = None
            for name in self.names:
                f = len(self.free[name])
                if f >= n and (best is None or f < best[0]):
                    best = (f, name)
                    if f == n:
                        break
            if best is None:
                return None
            return tuple((best[1], i) for i in self.free[best[1]][:n])
        if self.largest == 0 or n % self.largest:
            return None
        k = n // self.largest
        hosts = [h for h in self.names if self.whole[h] and len(self.free[h]) == self.largest == self.hosts[h].size]
        if len(hosts) < k:
            return None
        return tuple((h, i) for h in hosts[:k] for i in self.free[h])

    def take(self, gpus: Iterable[GpuRef]) -> None:
        for h, i in gpus:
            if i in self.free[h]:
                self.free[h].remove(i)
                self.total_free -= 1


def by_budget(snap: Snapshot) -> dict[str, list[Workload]]:
    """Pending workloads per budget in submission order (merging the simulator's sorted queues)."""
    queues = getattr(snap.pending, "queues", None)
    out: dict[str, list[Workload]] = {}
    if queues is None:
        for w in sorted(snap.pending, key=_order):
            out.setdefault(w.budget, []).append(w)
        return out
    parts: dict[str, list[list[Workload]]] = {}
    for key in sorted(queues):
        parts.setdefault(key[0], []).append(queues[key])
    for b, lists in parts.items():
        out[b] = lists[0] if len(lists) == 1 else list(heapq.merge(*lists, key=_order))
    return out


def in_order(snap: Snapshot) -> Iterable[Workload]:
    """All pending workloads in submission order."""
    queues = getattr(snap.pending, "queues", None)
    if queues is None:
        return sorted(snap.pending, key=_order)
    return heapq.merge(*(queues[k] for k in sorted(queues)), key=_order)


class _Base:
    """Shared steps: nominations first, then an ordered scan where anything that fits starts."""

    name = "peer"
    _hosts_cache: dict[str, tuple[Host, list[int]]] | None = None

    @property
    def _hosts(self) -> dict[str, tuple[Host, list[int]]]:
        if self._hosts_cache is None:
            self._hosts_cache = {}
        return self._hosts_cache

    def _start(self, dec: Decisions, room: Room, w: Workload, gpus: tuple[GpuRef, ...]) -> None:
        room.take(gpus)
        dec.starts.append(Start(w.id, tuple(sorted(gpus)), allocated=w.allocated))

    def _nominated(self, snap: Snapshot, room: Room, dec: Decisions, pending: dict[str, Workload]) -> set[str]:
        """Start workloads whose nominated GPUs are all free; keep the other nominations."""
        held = {g for a in snap.attempts for g in a.gpus}
        done = set()
        for wid, gpus in sorted(snap.nominations.items()):
            if not room.usable(gpus):
                continue  # dropped: a fault took a GPU
            w = pending.get(wid)
            if w is not None and not any(g in held for g in gpus):
                dec.starts.append(Start(w.id, tuple(sorted(gpus)), allocated=w.allocated))
                done.add(wid)
            else:
                dec.nominations[wid] = tuple(gpus)
        return done

    def _scan(self, dec: Decisions, room: Room, order: Iterable[Workload], skip: set[str]) -> None:
        """Anything that fits starts, in ``order``: backfill without reservations."""
        smallest_failed = 1 << 30
        for w in order:
            if room.total_free == 0 or smallest_failed == 1:
                break
            if w.id in skip or w.gpus >= smallest_failed:
                continue
            gpus = room.place(w.gpus)
            if gpus is None:
                smallest_failed = w.gpus  # a larger request cannot fit either
            else:
                self._start(dec, room, w, gpus)


class FifoPolicy(_Base):
    """First in, first out with backfill: pending jobs in submission order, every one that fits starts.

    No preemption, no reservation (a job that does not fit never holds back later ones). This is
    Slurm with ``PriorityType=priority/basic`` (priority by submission order) and backfill whose
    reservations are never honoured, the behaviour of "anything that fits starts" in the issue;
    see https://slurm.schedmd.com/sched_config.html and https://slurm.schedmd.com/priority_multifactor.html.
    """

    name = "fifo"
    preempts = False

    def __call__(self, snap: Snapshot) -> Decisions:
        dec = Decisions()
        room = Room(snap, self._hosts)
        pending = {w.id: w for w in snap.pending}
        done = self._nominated(snap, room, dec, pending)
        self._scan(dec, room, in_order(snap), done)
        return dec


class SlurmFairsharePolicy(_Base):
    """Slurm's classic fair-share factor, no preemption.

    ``F = 2^(-U/S)`` (Slurm, priority_multifactor.html, "Fair-share Factor" of the classic
    algorithm): ``S`` is the budget's normalized share (shares over siblings' shares down the
    tree, DESIGN.md §1) and ``U`` its normalized usage, its decayed GPU-seconds over the sum of
    every budget's, decayed with ``PriorityDecayHalfLife=7-0`` (a 7-day half-life). Jobs are
    ordered by ``F`` (highest first), then by age (oldest first): ``PriorityWeightFairshare``
    dominating ``PriorityWeightAge``. Every job that fits starts (backfill without wall-time
    limits: the trace has none), nothing is preempted (``PreemptType=preempt/none``).
    Usage is folded in at each call from the attempts seen, as slurmctld does every
    ``PriorityCalcPeriod``; an attempt gone since the last call is charged up to this call.
    """

    name = "slurm-fairshare"
    preempts = False

    def __init__(self, half_life_s: int = HALF_LIFE_S) -> None:
        self.half_life = half_life_s
        self.usage: dict[str, float] = {}
        self.last: int | None = None
        self.seen: dict[str, tuple[str, int, int]] = {}  # attempt id -> (budget, gpus, started)

    def _fold(self, snap: Snapshot) -> None:
        now = snap.now
        current = {
            a.id: (a.budget, a.gpu_count, a.started_at if a.started_at is not None else now) for a in snap.attempts
        }
        if self.last is not None and now > self.last:
            f = 2.0 ** (-(now - self.last) / self.half_life)
            for b in self.usage:
                self.usage[b] *= f
            for b, g, started in {**self.seen, **current}.values():
                begin = max(self.last, started)
                if now > begin:
                    self.usage[b] = self.usage.get(b, 0.0) + g * (now - begin)
        self.seen = current
        self.last = now

    def factors(self, snap: Snapshot) -> dict[str, float]:
        """Fair-share factor per budget (after folding usage up to ``snap.now``)."""
        self._fold(snap)
        tree = BudgetTree(snap.budgets)
        shares = tree.normalized_shares(set(tree.budgets))
        total = sum(self.usage.values())
        out = {}
        for b in tree.budgets:
            s = float(shares.get(b, 0))
            u = self.usage.get(b, 0.0) / total if total > 0 else 0.0
            out[b] = 2.0 ** (-u / s) if s > 0 else 0.0
        return out

    def __call__(self, snap: Snapshot) -> Decisions:
        dec = Decisions()
        f = self.factors(snap)
        room = Room(snap, self._hosts)
        pending = {w.id: w for w in snap.pending}
        done = self._nominated(snap, room, dec, pending)
        queues = by_budget(snap)
        order = sorted(queues, key=lambda b: (-f.get(b, 0.0), queues[b][0].submitted_at, queues[b][0].seq, b))
        self._scan(dec, room, (w for b in order for w in queues[b]), done)
        return dec


class _QuotaBase(_Base):
    """Quota-style peers: per-budget GPUs in use, a target per budget, reclaim of GPUs above target."""

    def _in_use(self, snap: Snapshot) -> dict[str, int]:
        used: dict[str, int] = {}
        for a in snap.attempts:
            if not a.stopping:
                used[a.budget] = used.get(a.budget, 0) + a.gpu_count
        pending = {w.id: w for w in snap.pending}
        for wid, gpus in snap.nominations.items():
            w = pending.get(wid)
            if w is not None:
                used[w.budget] = used.get(w.budget, 0) + len(gpus)
        return used

    def _reclaim(
        self,
        dec: Decisions,
        room: Room,
        w: Workload,
        used: dict[str, int],
        target: dict[str, float],
        stopped: set[str],
    ) -> bool:
        """Preempt attempts of budgets above their target until ``w`` fits on one host (or whole hosts).

        Victims, per host, most recently started first, each only while its budget is still above its
        target before the stop (it never goes below by more than that attempt). The host needing the
        fewest victim GPUs wins, then the host name. Stops carry ``for_workload``; the GPUs are
        nominated to ``w``.
        """
        n = w.gpus
        best: tuple[int, str, list[Attempt]] | None = None
        per_host: dict[str, tuple[int, list[Attempt]] | None] = {}
        for name in room.names:
            if not room.whole[name] and n > room.largest:
                per_host[name] = None
                continue
            if not room.usable([(name, i) for i in room.hosts[name].gpu_health]) and n > room.largest:
                per_host[name] = None
                continue
            free = len(room.free[name])
            left = dict(used)
            victims: list[Attempt] = []
            got = free
            need = room.largest if n > room.largest else n
            cands = sorted(
                (a for a in room.attempts_on[name] if not a.stopping and a.id not in stopped),
                key=lambda a: (-(a.started_at or 0), a.id),
            )
            ok_all = True
            for a in cands:
                if got >= need and n <= room.largest:
                    break
                if a.budget == w.budget or left.get(a.budget, 0) <= target.get(a.budget, 0.0):
                    ok_all = False
                    continue
                if any(g[0] != name for g in a.gpus):
                    ok_all = False  # a gang elsewhere too: leave it
                    continue
                victims.append(a)
                left[a.budget] = left.get(a.budget, 0) - a.gpu_count
                got += a.gpu_count
            if n > room.largest:
                if not ok_all or got < need:
                    per_host[name] = None
                    continue
                per_host[name] = (sum(a.gpu_count for a in victims), victims)
                continue
            if got < need or not victims:
                continue
            cost = sum(a.gpu_count for a in victims)
            if best is None or (cost, name) < (best[0], best[1]):
                best = (cost, name, victims)
        if n > room.largest:
            k = n // room.largest
            opts = sorted((c[0], h, c[1]) for h, c in per_host.items() if c is not None)
            if len(opts) < k or not any(v for _, _, v in opts[:k]):
                return False
            # Together, each victim must still find its budget above target when it is stopped.
            left = dict(used)
            chosen = opts[:k]
            for _, _, vs in chosen:
                for a in vs:
                    if left.get(a.budget, 0) <= target.get(a.budget, 0.0):
                        return False
                    left[a.budget] -= a.gpu_count
            victims = [a for _, _, vs in chosen for a in vs]
            gpus = tuple((h, i) for _, h, _ in chosen for i in sorted(room.hosts[h].gpu_health))
        else:
            if best is None:
                return False
            _, name, victims = best
            pool = set(room.free[name])
            for a in victims:
                pool.update(i for h, i in a.gpus if h == name)
            gpus = tuple((name, i) for i in sorted(pool)[:n])
        for a in victims:
            dec.stops.append(Stop(a.id, StopReason.PREEMPTED, for_workload=w.id))
            stopped.add(a.id)
            used[a.budget] = used.get(a.budget, 0) - a.gpu_count
        room.take(gpus)
        dec.nominations[w.id] = gpus
        used[w.budget] = used.get(w.budget, 0) + n
        return True

    def _targets(self, snap: Snapshot, used: dict[str, int]) -> dict[str, float]:
        raise NotImplementedError

    def _key(self, b: str, used: dict[str, int], target: dict[str, float], w: Workload) -> tuple[float, ...]:
        raise NotImplementedError

    def __call__(self, snap: Snapshot) -> Decisions:
        dec = Decisions()
        room = Room(snap, self._hosts)
        pending = {w.id: w for w in snap.pending}
        done = self._nominated(snap, room, dec, pending)
        used = self._in_use(snap)
        target = self._targets(snap, used)
        queues: dict[str, list[Workload]] = {}
        for b, q in by_budget(snap).items():
            keep = [w for w in q if w.id not in done and w.id not in snap.nominations]
            if keep:
                queues[b] = keep
        pos = dict.fromkeys(queues, 0)
        failed: dict[str, int] = {}
        stopped: set[str] = set()
        while True:
            heads = []
            for b, q in queues.items():
                i = pos[b]
                while i < len(q) and q[i].gpus >= failed.get(b, 1 << 30):
                    i += 1
                pos[b] = i
                if i < len(q):
                    heads.append((self._key(b, used, target, q[i]), q[i].submitted_at, q[i].seq, b))
            if not heads:
                break
            b = min(heads)[3]
            w = queues[b][pos[b]]
            pos[b] += 1
            gpus = room.place(w.gpus)
            if gpus is not None:
                self._start(dec, room, w, gpus)
                used[b] = used.get(b, 0) + w.gpus
            elif used.get(b, 0) + w.gpus <= target.get(b, 0.0) and self._reclaim(dec, room, w, used, target, stopped):
                pass
            else:
                failed[b] = min(failed.get(b, 1 << 30), w.gpus)
        return dec


class KueueDrsPolicy(_QuotaBase):
    """Kueue with fair sharing: one ClusterQueue per budget in one cohort.

    From Kueue's documentation (kueue.sigs.k8s.io: "Cluster Queue" — nominalQuota, cohorts,
    borrowing, ``preemption.reclaimWithinCohort``; "Fair Sharing" — dominant resource share):
    each budget's ``nominalQuota`` is its normalized share × the cluster's GPUs; borrowing
    unused quota of the cohort is allowed without limit; the queueing strategy is
    BestEffortFIFO (a head that cannot be admitted does not block the next). Heads are admitted
    in order of their ClusterQueue's dominant resource share *with* the workload — the GPUs it
    would use above its nominal quota over the cohort's GPUs (0 while within quota) — then by
    creation time. A workload that does not fit but stays within its nominal quota reclaims
    (``reclaimWithinCohort: Any``): it preempts workloads of ClusterQueues that borrow (use more
    than nominal), most recently admitted first, while they still borrow. No preemption within a
    ClusterQueue, no usage memory: only GPUs in use now count.
    """

    name = "kueue-drs"

    def _targets(self, snap: Snapshot, used: dict[str, int]) -> dict[str, float]:
        tree = BudgetTree(snap.budgets)
        shares = tree.normalized_shares(set(tree.budgets))
        gpus = sum(h.size for h in snap.hosts)
        return {b: float(s) * gpus for b, s in shares.items() if tree.is_leaf(b)}

    def _key(self, b: str, used: dict[str, int], target: dict[str, float], w: Workload) -> tuple[float, ...]:
        cohort = sum(target.values()) or 1.0
        return (max(0.0, used.get(b, 0) + w.gpus - target.get(b, 0.0)) / cohort,)


class KaiTimesharePolicy(_QuotaBase):
    """KAI Scheduler with time-based fair share (NVIDIA/KAI-Scheduler, docs "fairness" and
    "time-based fairshare").

    One queue per budget. Its fair share is its deserved quota (normalized share × GPUs, capped
    by its demand: GPUs in use plus pending), plus a split of what is left over by the over-quota
    weight ``max(0, W + k·(W − U))``, ``k = 1``: ``W`` the queue's normalized weight (its
    normalized share) and ``U`` its usage over the last week as a fraction of all queues' usage
    (every attempt counts, a sliding 1-week window). The split is water-filled: a queue gets no more
    than its demand, the rest goes round again. Allocation takes queues in order of GPUs in use
    over fair share (most starved first), jobs in submission order; anything that fits starts
    (over-quota work is allowed on idle GPUs). A job that does not fit while its queue stays within
    its fair share reclaims GPUs from queues above theirs (most recently started first).
    """

    name = "kai-timeshare"

    def __init__(self, k: float = 1.0) -> None:
        self.k = k

    def _targets(self, snap: Snapshot, used: dict[str, int]) -> dict[str, float]:
        tree = BudgetTree(snap.budgets)
        shares = tree.normalized_shares(set(tree.budgets))
        leaves = [b for b in tree.budgets if tree.is_leaf(b)]
        gpus = float(sum(h.size for h in snap.hosts))
        usage = windowed_usage(snap.usage, snap.attempts, snap.now, snap.window)
        total_u = sum(usage.get(b, 0) for b in leaves)
        demand = {b: float(used.get(b, 0)) for b in leaves}
        view = getattr(snap.pending, "pending_gpus", None)
        if view is not None:
            for b in leaves:
                demand[b] += view.get(b, 0)
        else:
            for w in snap.pending:
                demand[w.budget] = demand.get(w.budget, 0.0) + w.gpus
        fair = {b: min(float(shares[b]) * gpus, demand[b]) for b in leaves}
        left = gpus - sum(fair.values())
        weight = {}
        for b in leaves:
            wn = float(shares[b])
            un = usage.get(b, 0) / total_u if total_u else 0.0
            weight[b] = max(0.0, wn + self.k * (wn - un))
        for _ in range(len(leaves) + 1):
            open_ = [b for b in leaves if demand[b] - fair[b] > 1e-9 and weight[b] > 0]
            if left <= 1e-9 or not open_:
                break
            wsum = sum(weight[b] for b in open_)
            give = {b: min(left * weight[b] / wsum, demand[b] - fair[b]) for b in open_}
            for b, g in give.items():
                fair[b] += g
            left -= sum(give.values())
        return fair

    def _key(self, b: str, used: dict[str, int], target: dict[str, float], w: Workload) -> tuple[float, ...]:
        t = target.get(b, 0.0)
        return (used.get(b, 0) / t if t > 0 else float("inf"),)


PEERS: dict[str, type] = {
    "fifo": FifoPolicy,
    "slurm-fairshare": SlurmFairsharePolicy,
    "kueue-drs": KueueDrsPolicy,
    "kai-timeshare": KaiTimesharePolicy,
}


def peer_names() -> Sequence[str]:
    return tuple(PEERS)
