"""The reference scheduler: DESIGN.md §3 stated plainly, for tests only (STYLE.md, "an oracle
beside every fast path").

:func:`reference_schedule` takes the same :class:`Snapshot` as :func:`scheduler.policy.schedule`
and returns the same kind of :class:`Decisions`. It is a slow, independent reading of the
rules: no memo, no index, no pruning; every victim search enumerates every subset of attempts
on every host (every combination of hosts for a gang) and compares them with one
:func:`victim_key`, every attempt is classed by one :func:`victim_class`, and the Fair Tree
order is recomputed from scratch after every admission. It shares nothing with the fast path
but the dataclasses of :mod:`scheduler.policy.types`. It is a test instrument (the property
test tests/policy/test_reference.py and bench/oracle_soak.py compare the two on every pass of
random clusters) and never a production path: its cost is exponential in attempts per host.

Covered: all of §3 except the ``dependency`` reason (§3.8), plus the
faults and drains a pass decides (§4, §6) and the product decisions of docs/policy.md
(including its "Readings" section). One function per subsection:

- §3.1 :func:`windowed_usage` — ``U(b)``;
- §3.2 :func:`committed_usage`, :func:`normalized_shares`, :func:`next_in_fair_tree` — ranking;
- §3.3 :func:`unschedulable`, :func:`free_placement` — placement; :func:`World.fits` — CPUs and memory;
- §3.4 :func:`victim_class`, :func:`victim_key`, :func:`preempt`, :func:`place_nominated` — preemption;
- §3.5 :func:`reserve`, :func:`reservation_allows` — reservations and backfill;
  :func:`drain_allows` — a drain scheduled for later (docs/deploy.md "Scheduled drains");
- §3.6 :func:`fill_unallocated` — unallocated work;
- §3.7 :func:`queue_of` (holds, caps) and the archive rule inside :func:`normalized_shares`;
- §3.8 :func:`pending_reason` — why pending.

Units: seconds, GPUs, GPU-seconds (integers); ratios are exact fractions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations

from scheduler.policy.types import (
    Attempt,
    Budget,
    Decisions,
    GpuHealth,
    GpuRef,
    Host,
    HostState,
    OnCap,
    PendingInfo,
    PendingReason,
    Snapshot,
    Start,
    Stop,
    StopReason,
    Workload,
)

# Victim classes of an open attempt seen from a pending workload P (§3.4, §3.8). The order is
# the order of "room": FREE < NOW < LATER < FORBIDDEN < NEVER.
FREE = 0  # no attempt: a free GPU (used only for room levels)
NOW = 1  # rules 1 and 2 allow it now: unallocated, or allocated, unprotected and allowed by rule 2
LATER = 2  # rule 2 allows it but it is still protected
FORBIDDEN = 3  # rule 2 forbids it
NEVER = 4  # never room for P: P's own budget, already leaving, or P is unallocated


# --------------------------------------------------------------------------- the pass's world
@dataclass
class World:
    """The cluster as one pass sees it and changes it. Plain dicts; nothing cached."""

    snap: Snapshot
    now: int
    hosts: dict[str, Host]
    budgets: dict[str, Budget]
    attempts: dict[str, Attempt]  # open attempts, the pass's own starts included
    stopping: set[str]  # attempt ids leaving (stop issued, GPUs not yet released)
    nominations: dict[str, tuple[GpuRef, ...]]  # workload id -> GPUs being freed for it
    pending: dict[str, Workload]
    load: dict[str, int]  # U + C per budget, subtree included, GPU-seconds
    shares: dict[str, Fraction]  # normalized share s(b)
    reserved: dict[str, tuple[str, int]] = field(default_factory=dict)  # host -> (workload, start)
    dec: Decisions = field(default_factory=Decisions)

    # -- the tree
    def chain(self, key: str) -> list[str]:
        """Ancestors of ``key``, root first, ``key`` last."""
        out = []
        node: str | None = key
        while node is not None:
            out.append(node)
            node = self.budgets[node].parent
        return out[::-1]

    def children(self, key: str | None) -> list[str]:
        return sorted((k for k, b in self.budgets.items() if b.parent == key), key=lambda k: self.budgets[k].name)

    def in_subtree(self, budget: str, top: str) -> bool:
        return top in self.chain(budget)

    def split(self, p: str, v: str) -> tuple[str, str] | None:
        """Children A, B of the lowest common ancestor of ``p`` and ``v`` containing each (§3.4)."""
        cp, cv = self.chain(p), self.chain(v)
        for a, b in zip(cp, cv, strict=False):
            if a != b:
                return a, b
        return None

    def ratio(self, budget: str, extra: int = 0) -> Fraction:
        """``r(b)`` up to the constant factor ``GPUs × W`` shared by every budget: (U + C) / s(b)."""
        s = self.shares[budget]
        load = self.load[budget] + extra
        if s == 0:
            return Fraction(10**18) if load else Fraction(0)
        return Fraction(load) / s

    def path_name(self, key: str) -> str:
        names = [self.budgets[k].name for k in self.chain(key)[1:]]
        return "/".join(names) if names else self.budgets[key].name

    def add_load(self, budget: str, amount: int) -> None:
        for node in self.chain(budget):
            self.load[node] += amount

    # -- GPUs
    def owner(self, g: GpuRef) -> str | None:
        for a in self.attempts.values():
            if g in a.gpus:
                return a.id
        return None

    def nominee(self, g: GpuRef) -> str | None:
        for wid, gpus in self.nominations.items():
            if g in gpus:
                return wid
        return None

    def usable(self, g: GpuRef) -> bool:
        """Healthy GPU on an ``active`` host (§3.3)."""
        h = self.hosts.get(g[0])
        return h is not None and h.state == HostState.ACTIVE and h.gpu_health.get(g[1]) != GpuHealth.UNHEALTHY

    def healthy(self, host: str) -> list[int]:
        return sorted(i for i, x in self.hosts[host].gpu_health.items() if x != GpuHealth.UNHEALTHY)

    def free(self, host: str) -> list[int]:
        """Free GPU indices of ``host``: usable, held by no open attempt, nominated for nobody."""
        if self.hosts[host].state != HostState.ACTIVE:
            return []
        return [i for i in self.healthy(host) if self.owner((host, i)) is None and self.nominee((host, i)) is None]

    def attempts_on(self, host: str) -> list[Attempt]:
        return sorted((a for a in self.attempts.values() if any(g[0] == host for g in a.gpus)), key=lambda a: a.id)

    def gpus_on(self, a: Attempt, host: str) -> list[int]:
        """Healthy GPUs of ``a`` on ``host`` (what stopping it frees there)."""
        return sorted(i for h, i in a.gpus if h == host and self.hosts[h].gpu_health.get(i) != GpuHealth.UNHEALTHY)

    # -- CPUs and memory (§3.3)
    def request(self, host: str, gpus: int, cpus: int | None, memory: int | None) -> tuple[int, int]:
        """CPUs and memory that work holding ``gpus`` GPUs of ``host`` takes there: its requests,
        or the host's per-GPU share ``floor(total × gpus / host GPUs)`` of what it leaves out."""
        h = self.hosts[host]
        c = cpus if cpus is not None else (h.cpus or 0) * gpus // h.size
        m = memory if memory is not None else (h.memory or 0) * gpus // h.size
        return c, m

    def fits(self, w: Workload, host: str, gpus: int, gone: tuple[Attempt, ...] | list[Attempt] = ()) -> bool:
        """CPUs and memory on ``host`` suffice for ``w`` holding ``gpus`` GPUs there, beside every
        open attempt on it but ``gone``; an unknown capacity (None) never limits."""
        h = self.hosts[host]
        used_c = used_m = 0
        for a in self.attempts_on(host):
            if a in gone:
                continue
            c, m = self.request(host, sum(1 for g in a.gpus if g[0] == host), a.cpus, a.memory)
            used_c += c
            used_m += m
        c, m = self.request(host, gpus, w.cpus, w.memory)
        return (h.cpus is None or used_c + c <= h.cpus) and (h.memory is None or used_m + m <= h.memory)

    def fits_empty(self, w: Workload, host: str, gpus: int) -> bool:
        """The requests fit ``host`` with nothing else on it."""
        return self.fits(w, host, gpus, self.attempts_on(host))

    def hosts_of_model(self, model: str) -> list[str]:
        return sorted(n for n, h in self.hosts.items() if h.model == model)

    def largest(self, model: str) -> int:
        return max((h.size for h in self.hosts.values() if h.model == model), default=0)

    def is_gang(self, w: Workload) -> bool:
        return w.gpus > self.largest(w.model)

    def fabrics(self, hosts: list[str] | tuple[str, ...]) -> int:
        return len({str(self.hosts[h].labels.get("fabric", "")) for h in hosts})

    def protected(self, a: Attempt) -> bool:
        """§3.4 rule 1: an allocated attempt is protected until ``started_at + M`` (a starting
        attempt, not yet confirmed, is protected)."""
        if not a.allocated:
            return False
        return a.started_at is None or self.now < a.started_at + a.min_runtime

    def commitment(self, a: Attempt) -> int:
        """GPU-seconds of protection still ahead of an allocated attempt (§3.2)."""
        if not a.allocated:
            return 0
        if a.started_at is None:
            return len(a.gpus) * a.min_runtime
        return len(a.gpus) * max(0, a.started_at + a.min_runtime - self.now)

    # -- decisions
    def stop(self, a: Attempt, reason: StopReason, for_workload: str | None = None) -> None:
        if a.id not in self.stopping:
            self.add_load(a.budget, -self.commitment(a))  # a leaving attempt commits nothing
            self.stopping.add(a.id)
        self.dec.stops.append(Stop(a.id, reason, for_workload))

    def start(self, w: Workload, gpus: tuple[GpuRef, ...], *, allocated: bool, unfunded: bool = False) -> None:
        gpus = tuple(sorted(gpus))
        nominated = self.nominations.pop(w.id, None)
        if nominated is None and allocated:
            self.add_load(w.budget, w.gpus * w.min_runtime)  # committed from the start (§3.2)
        if nominated is not None and w.allocated and not allocated:
            self.add_load(w.budget, -w.gpus * w.min_runtime)
        # An allocated start after a nomination keeps the nomination's commitment (same gpus × M).
        self.attempts[f"new:{w.id}"] = Attempt(
            f"new:{w.id}", w.id, w.budget, gpus, allocated, w.min_runtime, None, cpus=w.cpus, memory=w.memory
        )
        self.dec.starts.append(Start(w.id, gpus, allocated=allocated, unfunded=unfunded))

    def drop_nomination(self, wid: str) -> None:
        self.nominations.pop(wid)
        w = self.pending[wid]
        if w.allocated:
            self.add_load(w.budget, -w.gpus * w.min_runtime)

    def explain(self, w: Workload, reason: PendingReason, detail: dict[str, object] | None = None) -> None:
        if self.snap.with_reasons:
            self.dec.pending[w.id] = PendingInfo(reason, dict(detail or {}))


# --------------------------------------------------------------------------- §3.1 usage
def windowed_usage(snap: Snapshot) -> dict[str, int]:
    """``U(b)``, own charges only, GPU-seconds over ``(now − W, now]`` (§3.1).

    Closed intervals pro-rata at the window's start; lumps when charged inside the window;
    allocated open attempts (stopping ones too) for the part already run, up to
    ``charged_until``. Unallocated time never counts. Roll up with :func:`roll_up`.
    """
    lo, hi = snap.now - snap.window, snap.now
    out: dict[str, int] = {}

    def inside(start: int, end: int) -> int:
        return max(0, min(end, hi) - max(start, lo))

    for r in snap.usage:
        lump = r.gpu_seconds if lo < r.end <= hi else 0  # a lump counts when charged inside
        amount = lump if r.gpus is None else r.gpus * inside(r.start, r.end)
        out[r.budget] = out.get(r.budget, 0) + amount
    for a in snap.attempts:
        if a.allocated and a.started_at is not None:
            end = hi if a.charged_until is None else min(hi, a.charged_until)
            out[a.budget] = out.get(a.budget, 0) + len(a.gpus) * inside(a.started_at, end)
    return out


def roll_up(budgets: dict[str, Budget], own: dict[str, int]) -> dict[str, int]:
    """A parent's amount is its own plus its children's (§3.1)."""
    total = dict.fromkeys(budgets, 0)
    for key, v in own.items():
        node: str | None = key if key in budgets else None
        while node is not None:
            total[node] += v
            node = budgets[node].parent
    return total


# --------------------------------------------------------------------------- §3.2 ranking
def committed_usage(snap: Snapshot, nominations: dict[str, tuple[GpuRef, ...]]) -> dict[str, int]:
    """``C(b)``, own only: protection still ahead of running allocated attempts
    (``gpus × max(0, protected_until − now)``; a starting one ``gpus × M``; a leaving one
    nothing), plus ``gpus × M`` of every nominated allocated workload (§3.4)."""
    out: dict[str, int] = {}
    for a in snap.attempts:
        if not a.allocated or a.stopping:
            continue
        c = len(a.gpus) * (a.min_runtime if a.started_at is None else max(0, a.started_at + a.min_runtime - snap.now))
        out[a.budget] = out.get(a.budget, 0) + c
    pending = {w.id: w for w in snap.pending}
    for wid in nominations:
        w = pending[wid]
        if w.allocated:
            out[w.budget] = out.get(w.budget, 0) + w.gpus * w.min_runtime
    return out


def normalized_shares(snap: Snapshot, budgets: dict[str, Budget]) -> dict[str, Fraction]:
    """``s(b) = shares(b) / Σ shares(live siblings) × s(parent)``, ``s(root) = 1`` (§1).

    §3.7: an archived budget with no work left (no open attempt, no pending workload in its
    subtree) drops out of its siblings' normalization; its own share is then 0 (it has nothing
    to rank, and is entitled to nothing).
    """
    busy = {a.budget for a in snap.attempts} | {w.budget for w in snap.pending}
    with_work = {node for b in busy if b in budgets for node in _chain(budgets, b)}  # and their ancestors
    live = {k for k, b in budgets.items() if not b.archived or k in with_work}
    out: dict[str, Fraction] = {}
    for k in sorted(budgets, key=lambda k: len(_chain(budgets, k))):
        b = budgets[k]
        if b.parent is None:
            out[k] = Fraction(1)
            continue
        sibs = [x for x in budgets.values() if x.parent == b.parent]
        denom = sum(x.shares for x in sibs if x.key in live)
        out[k] = out[b.parent] * Fraction(b.shares, denom) if k in live and denom else Fraction(0)
    return out


def _chain(budgets: dict[str, Budget], key: str) -> list[str]:
    out = []
    node: str | None = key
    while node is not None:
        out.append(node)
        node = budgets[node].parent
    return out[::-1]


def submission_order(w: Workload) -> tuple[int, int]:
    """Within a budget: original submission time, then the submission sequence number (§3.2)."""
    return (w.submitted_at, w.seq)


def next_in_fair_tree(world: World, queue: list[Workload], handled: set[str], admitted: set[str]) -> Workload | None:
    """The next workload of ``queue`` to consider, or None (§3.2, Slurm's Fair Tree).

    Top-down from the root: among the children holding unhandled work, the lowest ``r``
    (current loads: every admission so far counts), ties to the subtree whose oldest pending
    workload (not admitted in this pass; skipped ones count, docs/policy.md) was submitted
    earlier, then the name. In the leaf reached, the first unhandled workload in submission
    order.
    """
    left = [w for w in queue if w.id not in handled]
    if not left:
        return None
    root = next(k for k, b in world.budgets.items() if b.parent is None)
    node = root
    while True:
        mine = [w for w in left if w.budget == node]
        if mine:
            return min(mine, key=submission_order)
        kids = [k for k in world.children(node) if any(world.in_subtree(w.budget, k) for w in left)]

        def key(k: str) -> tuple[Fraction, tuple[int, int], str]:
            oldest = min(submission_order(w) for w in queue if w.id not in admitted and world.in_subtree(w.budget, k))
            return (world.ratio(k), oldest, world.budgets[k].name)

        node = min(kids, key=key)


def run_in_fair_tree(world: World, queue: list[Workload], handle: Callable[[World, Workload], bool]) -> None:
    """Dispatch is iterative (§3.2): take the next workload, handle it, then re-rank."""
    handled: set[str] = set()
    admitted: set[str] = set()
    while True:
        w = next_in_fair_tree(world, queue, handled, admitted)
        if w is None:
            return
        handled.add(w.id)
        if handle(world, w):
            admitted.add(w.id)


# --------------------------------------------------------------------------- §3.3 placement
def unschedulable(world: World, w: Workload) -> bool:
    """No host of the cluster could ever hold ``w`` (hardware only: registered hosts in any state):
    GPUs, and the CPU and memory requests on an empty host of enough GPUs (a gang: of the largest size)."""
    largest = world.largest(w.model)
    if largest == 0 or w.gpus < 1:
        return True
    if w.gpus <= largest:
        return not any(
            world.fits_empty(w, n, w.gpus) for n, h in world.hosts.items() if h.model == w.model and h.size >= w.gpus
        )
    if w.gpus % largest:
        return True
    whole = [n for n, h in world.hosts.items() if h.model == w.model and h.size == largest]
    return sum(1 for n in whole if world.fits_empty(w, n, largest)) < w.gpus // largest


def free_placement(world: World, w: Workload, *, honour_reservations: bool) -> tuple[GpuRef, ...] | None:
    """GPUs for ``w`` among the free ones (§3.3), or None.

    One host: best fit, the host with the fewest free GPUs that still fit, ties by name; the
    lowest free indices. A gang: ``gpus / host size`` whole free hosts of the largest size,
    fewest fabrics, then host names. Reserved hosts only as :func:`reservation_allows` says.
    """

    def allowed(h: str) -> bool:
        return not honour_reservations or reservation_allows(world, w, h)

    hosts = [h for h in world.hosts_of_model(w.model) if allowed(h)]
    if not world.is_gang(w):
        fits = [(len(world.free(h)), h) for h in hosts if len(world.free(h)) >= w.gpus and world.fits(w, h, w.gpus)]
        if not fits:
            return None
        _, host = min(fits)
        return tuple((host, i) for i in world.free(host)[: w.gpus])
    size = world.largest(w.model)
    whole = [h for h in hosts if world.hosts[h].size == size and len(world.free(h)) == size and world.fits(w, h, size)]
    k = w.gpus // size
    sets = [tuple(c) for c in combinations(whole, k)]
    if not sets:
        return None
    best = min(sets, key=lambda s: (world.fabrics(s), s))
    return tuple((h, i) for h in best for i in range(world.hosts[h].size))


# --------------------------------------------------------------------------- §3.4 preemption
def rule2(world: World, w: Workload, victim_budget: str) -> bool:
    """§3.4 rule 2: ``v ≠ p`` and ``r(A)`` counting ``gpus × M`` of ``w`` strictly below ``r(B)``."""
    if victim_budget == w.budget:
        return False
    split = world.split(w.budget, victim_budget)
    if split is None:
        return False
    a, b = split
    return world.ratio(a, w.gpus * w.min_runtime) < world.ratio(b)


def victim_class(world: World, w: Workload, a: Attempt) -> int:
    """How the open attempt ``a`` counts as room for the pending workload ``w`` (§3.4, §3.8).

    Leaving attempts are never picked again (they are being freed already). Unallocated work
    never preempts (rule 4). Unallocated victims may be of any budget; allocated ones never of
    ``w``'s own budget (rule 2), and are NOW, LATER (protected, rule 1) or FORBIDDEN (rule 2).
    """
    if a.id in world.stopping or not w.allocated:
        return NEVER
    if not a.allocated:
        return NOW
    if a.budget == w.budget or a.budget not in world.budgets:
        return NEVER
    if not rule2(world, w, a.budget):
        return FORBIDDEN
    return LATER if world.protected(a) else NOW


CRITERIA: tuple[str, ...] = (
    "allocated_gpus",
    "gpus",
    "victim_count",
    "sides",
    "start_times",
    "fabrics",
    "host_names",
    "workload_ids",
)
"""The order of :func:`victim_key`'s criteria, by name, as DESIGN.md §3.4 lists them. Only
tests change it (tests/policy/test_contract.py swaps two names here and the same two criteria
in the fast path's contract, and the two schedulers must still agree)."""


def victim_key(world: World, w: Workload, victims: list[Attempt], hosts: list[str]) -> tuple[object, ...]:
    """The §3.4 victim-choice order as one key (smaller is better), criteria in the order of
    :data:`CRITERIA` (by default DESIGN.md's):

    1. fewest allocated GPUs preempted (a gang victim's GPUs all count);
    2. fewest GPUs preempted;
    3. fewest victims;
    4. victims of the most over-served side first: the victims' ``r(B)`` sorted highest first,
       compared as vectors, higher better (unallocated victims count as the most over-served,
       docs/policy.md);
    5. most recently started first: start times sorted latest first, as vectors, later better
       (a starting attempt, not yet confirmed, counts as starting now);
    6. fewest fabrics (gangs, §3.3);
    7. host names, then the victims' workload ids, ascending in plain string order.
    """
    alloc = sum(len(a.gpus) for a in victims if a.allocated)
    total = sum(len(a.gpus) for a in victims)
    sides = []
    for a in victims:
        if not a.allocated:
            sides.append((1, Fraction(0)))  # +infinity: above every ratio
        else:
            split = world.split(w.budget, a.budget)
            side = split[1] if split is not None else a.budget
            sides.append((0, world.ratio(side)))
    sides.sort(reverse=True)
    starts = sorted((world.now if a.started_at is None else a.started_at for a in victims), reverse=True)
    parts: dict[str, object] = {
        "allocated_gpus": alloc,
        "gpus": total,
        "victim_count": len(victims),
        "sides": _Desc(tuple(sides)),
        "start_times": _Desc(tuple(starts)),
        "fabrics": world.fabrics(hosts),
        "host_names": tuple(sorted(hosts)),
        "workload_ids": tuple(sorted(a.workload for a in victims)),
    }
    return tuple(parts[c] for c in CRITERIA)


class _Desc:
    """Wraps a vector so that the lexicographically larger one sorts first: at the first
    position where they differ the larger entry wins; when one is a prefix of the other the
    shorter wins (fewer victims). Vectors of one length are all the default order compares
    (fewest victims comes first); other lengths meet only when a test reorders the criteria."""

    __slots__ = ("v",)

    def __init__(self, v: tuple[object, ...]) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        for x, y in zip(self.v, other.v, strict=False):
            if x != y:
                return bool(x > y)  # type: ignore[operator]
        return len(self.v) < len(other.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v

    def __hash__(self) -> int:
        return hash(self.v)


def preempt(world: World, w: Workload) -> bool:
    """§3.4: find the best inclusion-minimal sufficient victim set for the allocated ``w`` and,
    if there is one, stop the victims and nominate the GPUs being freed for ``w``.

    Candidates are every subset of the NOW-class attempts on every allowed host (one host), or
    every combination of whole hosts whose every attempt is NOW-class and none of whose GPUs is
    nominated for another workload (a gang; the victims are all their attempts). Sufficient
    (rule 3): with the victims gone ``w`` starts at once, the free GPUs counting too, and its CPUs
    and memory fit (§3.3).
    Returns True when it preempted.
    """
    hosts = [h for h in world.hosts_of_model(w.model) if world.hosts[h].state == HostState.ACTIVE]
    hosts = [h for h in hosts if reservation_allows(world, w, h)]
    best = _best_gang(world, w, hosts) if world.is_gang(w) else _best_single(world, w, hosts)
    if best is None:
        return False
    _, victims, gpus = best
    for a in victims:
        world.stop(a, StopReason.PREEMPTED, for_workload=w.id)
    world.nominations[w.id] = gpus
    world.add_load(w.budget, w.gpus * w.min_runtime)  # committed from the nomination
    world.explain(
        w, PendingReason.AWAITING_PREEMPTION, {"victims": sorted(a.workload for a in victims), "host": gpus[0][0]}
    )
    return True


_Best = tuple[tuple[object, ...], list[Attempt], tuple[GpuRef, ...]] | None
"""The best victim set so far: (victim key, victims, the GPUs nominated)."""


def _best_single(world: World, w: Workload, hosts: list[str]) -> _Best:
    """§3.4 for one host: the best inclusion-minimal sufficient subset of NOW-class attempts over
    ``hosts`` (the first host, in order, on equal keys)."""
    best: _Best = None
    for h in hosts:
        best = _best_on_host(world, w, h, best)
    return best


def _best_on_host(world: World, w: Workload, h: str, best: _Best) -> _Best:
    """``best``, or a better victim set on host ``h`` (every subset of its NOW-class attempts)."""
    free = world.free(h)
    cands = [a for a in world.attempts_on(h) if victim_class(world, w, a) == NOW and world.gpus_on(a, h)]

    def enough(subset: tuple[Attempt, ...]) -> bool:
        got = len(free) + sum(len(world.gpus_on(a, h)) for a in subset)
        return got >= w.gpus and world.fits(w, h, w.gpus, subset)

    for r in range(1, len(cands) + 1):
        for subset in combinations(cands, r):
            if not enough(subset):
                continue
            if any(enough(tuple(b for b in subset if b is not a)) for a in subset):
                continue  # not inclusion-minimal: a proper subset suffices
            victims = list(subset)
            key = victim_key(world, w, victims, [h])
            if best is None or key < best[0]:
                pool = set(free)
                for a in victims:
                    pool.update(i for i in world.gpus_on(a, h) if world.nominee((h, i)) in (None, w.id))
                best = (key, victims, tuple((h, i) for i in sorted(pool)[: w.gpus]))
    return best


def _best_gang(world: World, w: Workload, hosts: list[str]) -> _Best:
    """§3.4 for a gang: the best combination of whole hosts whose every attempt is NOW-class and
    none of whose GPUs is nominated for another workload (the victims are all their attempts)."""
    size = world.largest(w.model)
    k = w.gpus // size

    def vacatable(h: str) -> bool:
        host = world.hosts[h]
        if host.size != size or any(x == GpuHealth.UNHEALTHY for x in host.gpu_health.values()):
            return False
        if any(world.nominee((h, i)) not in (None, w.id) for i in range(size)):
            return False
        if not world.fits_empty(w, h, size):
            return False
        return all(victim_class(world, w, a) == NOW for a in world.attempts_on(h))

    best: _Best = None
    for combo in combinations([h for h in hosts if vacatable(h)], k):
        victims = sorted({a.id: a for h in combo for a in world.attempts_on(h)}.values(), key=lambda a: a.id)
        if not victims:
            continue  # whole free hosts: free placement's business
        key = victim_key(world, w, victims, list(combo))
        if best is None or key < best[0]:
            best = (key, victims, tuple((h, i) for h in combo for i in range(size)))
    return best


def place_nominated(world: World, w: Workload) -> bool | None:
    """A workload with GPUs being freed for it (§3.4, docs/policy.md "Readings"): once its
    nominated GPUs are all free it starts on them; otherwise, if the ordinary rules can start it
    now elsewhere (free GPUs, nominated ones excluded, reservations honoured), it does and its
    nomination is dropped; otherwise it waits for its victims. When its victims have left but a
    drain scheduled on a host of its GPUs refuses it now (:func:`drain_allows`), its nomination
    is dropped and None returned: it is then handled as a workload without one."""
    nominated = world.nominations[w.id]
    on = {h: sum(1 for g in nominated if g[0] == h) for h, _ in nominated}
    if all(world.owner(g) is None for g in nominated) and all(world.fits(w, h, n) for h, n in on.items()):
        if all(drain_allows(world, w, h, world.now) for h in on):
            world.start(w, nominated, allocated=True)
            return True
        world.drop_nomination(w.id)  # a drain scheduled there refuses it now: placed afresh
        return None
    gpus = free_placement(world, w, honour_reservations=True)
    if gpus is not None:
        world.start(w, gpus, allocated=True)
        return True
    victims = sorted({a for g in nominated if (a := world.owner(g)) is not None})
    world.explain(
        w,
        PendingReason.AWAITING_PREEMPTION,
        {"victims": sorted(world.attempts[v].workload for v in victims), "host": nominated[0][0]},
    )
    return False


# --------------------------------------------------------------------------- §3.5 reservations
def drain_allows(world: World, w: Workload, host: str, start: int) -> bool:
    """A host with a drain scheduled at ``drain_at`` (an active host: docs/deploy.md "Scheduled
    drains", Slurm's maint reservation) starts no allocated work whose protection would end after
    that instant: ``w`` may start there at ``start`` only if it is unallocated or
    ``start + M <= drain_at``."""
    h = world.hosts[host]
    if h.drain_at is None or h.state != HostState.ACTIVE or not w.allocated:
        return True
    return start + w.min_runtime <= h.drain_at


def reservation_allows(world: World, w: Workload, host: str) -> bool:
    """On a host reserved for another workload, ``w`` may be placed only if it cannot delay the
    reservation: it is unallocated, or its protection ends at or before the reserved start. And
    only if the host's scheduled drain lets it start now (:func:`drain_allows`)."""
    if not drain_allows(world, w, host, world.now):
        return False
    r = world.reserved.get(host)
    if r is None or r[0] == w.id or not w.allocated:
        return True
    return world.now + w.min_runtime <= r[1]


def release(world: World, a: Attempt) -> int:
    """When the GPUs of the stopping attempt ``a`` are expected back (§3.5): its ``release_at``
    (stop + grace), or now when unknown (a stop issued in this pass, or no grace known) or when
    the release is already due."""
    return world.now if a.release_at is None else max(world.now, a.release_at)


def gpu_room_at(world: World, w: Workload, g: GpuRef) -> int | None:
    """When the GPU ``g`` can be ``w``'s (§3.5), or None for never.

    Free now; held by an attempt already stopping (the GPU nominated for no other workload) at
    its release (``release_at``, stop + grace; unknown, or already past, counts as now); held by
    unallocated work now; held by work rule 2 allows now when its
    protection will have ended (a starting attempt: ``M`` from now); own, forbidden or
    nominated-for-another: never.
    """
    if not world.usable(g):
        return None
    nominee = world.nominee(g)
    if nominee is not None and nominee != w.id:
        return None
    oid = world.owner(g)
    if oid is None:
        return world.now
    a = world.attempts[oid]
    if oid in world.stopping:
        return release(world, a)
    c = victim_class(world, w, a)
    if c == NOW:
        return world.now
    if c == LATER:
        return world.now + a.min_runtime if a.started_at is None else a.started_at + a.min_runtime
    return None


def attempt_room_at(world: World, w: Workload, a: Attempt) -> int | None:
    """When the open attempt ``a`` gives its CPUs and memory back as room for ``w`` (§3.3, §3.5):
    a leaving one at its release, NOW work now, LATER work when its protection ends, else never."""
    if a.id in world.stopping:
        return release(world, a)
    c = victim_class(world, w, a)
    if c == NOW:
        return world.now
    if c == LATER:
        return world.now + a.min_runtime if a.started_at is None else a.started_at + a.min_runtime
    return None


def resources_room_at(world: World, w: Workload, host: str) -> int | None:
    """The first instant (now or an attempt's :func:`attempt_room_at`) at which ``w``'s CPUs and
    memory fit ``host`` with every attempt that is room by then gone, or None."""
    attempts = world.attempts_on(host)
    at = {a.id: attempt_room_at(world, w, a) for a in attempts}
    for t in sorted({world.now} | {x for x in at.values() if x is not None}):
        gone = [a for a in attempts if at[a.id] is not None and at[a.id] <= t]  # type: ignore[operator]
        if world.fits(w, host, w.gpus, gone):
            return t
    return None


def reserve(world: World, w: Workload) -> None:
    """§3.5: the host (set of hosts) where the blocked allocated ``w`` could start earliest,
    not reserved for another workload; among equally early ones, fewest fabrics, then host
    names. At most ``max_reservations`` workloads hold one (a gang's counts once)."""
    holders = {wid for wid, _ in world.reserved.values()}
    if len(holders) >= world.snap.max_reservations:
        return
    hosts = [
        h for h in world.hosts_of_model(w.model) if world.hosts[h].state == HostState.ACTIVE and h not in world.reserved
    ]
    best = earliest(world, w, hosts, drains=True)
    if best is None:
        return
    t, _, chosen = best
    for h in chosen:
        world.reserved[h] = (w.id, t)
    world.dec.reserved_start[w.id] = t


def host_start(world: World, w: Workload, h: str) -> int | None:
    """When the single-host ``w`` could start on ``h`` (§3.5): its ``gpus``-th GPU's
    :func:`gpu_room_at`, or later when its CPUs and memory fit only then; None for never."""
    ready = sorted(t for i in world.healthy(h) if (t := gpu_room_at(world, w, (h, i))) is not None)
    res_t = resources_room_at(world, w, h)
    if len(ready) < w.gpus or res_t is None:
        return None
    return max(ready[w.gpus - 1], res_t)


def earliest(
    world: World, w: Workload, hosts: list[str], *, drains: bool = False
) -> tuple[int, int, tuple[str, ...]] | None:
    """The earliest ``(start, fabrics, hosts)`` for ``w`` among the active ``hosts`` (§3.5):
    one host by :func:`host_start`, a gang's whole hosts at the latest of their GPUs'
    :func:`gpu_room_at`; then fewest fabrics, then host names. ``drains``: only a start that
    every host's scheduled drain allows (:func:`drain_allows`; a reservation's, not a reason's)."""
    best: tuple[int, int, tuple[str, ...]] | None = None
    if not world.is_gang(w):
        for h in hosts:
            t = host_start(world, w, h)
            if t is not None and (not drains or drain_allows(world, w, h, t)):
                cand: tuple[int, int, tuple[str, ...]] = (t, 1, (h,))
                if best is None or cand < best:
                    best = cand
    else:
        size = world.largest(w.model)
        at: dict[str, int] = {}
        for h in hosts:
            if world.hosts[h].size != size or not world.fits_empty(w, h, size):
                continue
            times = [gpu_room_at(world, w, (h, i)) for i in range(size)]
            known = [t for t in times if t is not None]
            if len(known) == len(times):
                at[h] = max(known)
        for combo in combinations(sorted(at), w.gpus // size):
            cand = (max(at[h] for h in combo), world.fabrics(combo), combo)
            if drains and not all(drain_allows(world, w, h, cand[0]) for h in combo):
                continue
            if best is None or cand < best:
                best = cand
    return best


# --------------------------------------------------------------------------- §3.6 unallocated
def fill_unallocated(world: World, w: Workload, unfunded: set[str]) -> bool:
    """Unallocated (and unfunded) work fills GPUs still idle, reserved ones included, nominated
    ones not, in budget order and best fit; it never preempts."""
    if waits_for_dependency(world, w):
        return False
    gpus = free_placement(world, w, honour_reservations=False)
    if gpus is not None:
        world.start(w, gpus, allocated=False, unfunded=w.id in unfunded)
        return True
    if w.id in unfunded:
        capper = capped_by(world, w.budget)
        world.explain(
            w,
            PendingReason.BUDGET_CAPPED,
            {"budget": world.path_name(capper.key) if capper else "", "unfunded": True},
        )
    else:
        short = unallocated_short(world, w)
        world.explain(w, PendingReason.INSUFFICIENT_GPUS, {"resources": short} if short else None)
    return False


def unallocated_short(world: World, w: Workload) -> list[str]:
    """Of unallocated ``w`` no free placement takes: which of CPUs and memory fall short on the
    hosts whose free GPUs would take it (none for a gang: its reason names GPUs), each alone."""
    if world.is_gang(w):
        return []
    short: set[str] = set()
    for h in world.hosts_of_model(w.model):
        if len(world.free(h)) < w.gpus:
            continue
        host = world.hosts[h]
        used = [world.request(h, sum(1 for g in a.gpus if g[0] == h), a.cpus, a.memory) for a in world.attempts_on(h)]
        c, m = world.request(h, w.gpus, w.cpus, w.memory)
        if host.cpus is not None and sum(u[0] for u in used) + c > host.cpus:
            short.add("cpus")
        if host.memory is not None and sum(u[1] for u in used) + m > host.memory:
            short.add("memory")
    return [r for r in ("cpus", "memory") if r in short]


# --------------------------------------------------------------------------- §3.7 holds, caps
def held(world: World, budget: str) -> bool:
    """A budget on hold, or under one (docs/policy.md), starts no new attempts."""
    return any(world.budgets[k].hold for k in world.chain(budget))


def capped_by(world: World, budget: str) -> Budget | None:
    """The nearest budget on the path (itself first) whose cap is reached (docs/policy.md)."""
    for k in reversed(world.chain(budget)):
        if world.budgets[k].capped:
            return world.budgets[k]
    return None


def waits_for_dependency(world: World, w: Workload) -> bool:
    """§3.8 ``dependency``: ``w``'s ``after`` list is unmet, or its array group holds its ``%N``
    cap (members holding GPUs now plus members this pass has started). Records the reason and,
    as it cannot start, drops a nomination it holds."""
    detail: dict[str, object] | None = None
    if w.waiting:
        detail = {"after": True}
    elif w.group is not None and w.group in world.snap.group_limits:
        limit, holding = world.snap.group_limits[w.group]
        started = sum(1 for s in world.dec.starts if world.pending[s.workload].group == w.group)
        if holding + started >= limit:
            detail = {"group": w.group, "limit": limit}
    if detail is None:
        return False
    if w.id in world.nominations:
        world.drop_nomination(w.id)
    world.explain(w, PendingReason.DEPENDENCY, detail)
    return True


def queue_of(world: World, w: Workload) -> str | None:
    """Which pass a pending workload goes to: ``"allocated"``, ``"unallocated"``, ``"unfunded"``
    (cap reached, ``on_cap=downgrade``: runs unallocated), or None with its reason recorded
    (§3.3 unschedulable, §3.8 dependency, the workload's own hold, §3.7 its budget held, capped
    with ``on_cap=hold``), in §3.8's order."""
    if unschedulable(world, w):
        world.explain(w, PendingReason.UNSCHEDULABLE, {"model": w.model, "gpus": w.gpus})
        return None
    if waits_for_dependency(world, w):
        return None
    if w.hold:  # its own hold (docs/jobs.md "Hold and release"): it cannot start, keeps no nomination
        if w.id in world.nominations:
            world.drop_nomination(w.id)
        world.explain(w, PendingReason.HELD, {"hold": w.hold})
        return None
    if held(world, w.budget):
        world.explain(w, PendingReason.HELD)
        return None
    if not w.allocated:
        return "unallocated"
    capper = capped_by(world, w.budget)
    if capper is None:
        return "allocated"
    if capper.on_cap == OnCap.HOLD:
        world.explain(w, PendingReason.BUDGET_CAPPED, {"budget": world.path_name(capper.key)})
        return None
    return "unfunded"


# --------------------------------------------------------------------------- §3.8 reasons
def room_level(world: World, w: Workload) -> int:
    """The least room class that makes room for ``w``, judged as if no host were reserved.

    One host: the least L such that its free GPUs plus the GPUs there of attempts of class
    ≤ L reach ``gpus`` and, with those attempts gone, its CPUs and memory suffice (§3.3). A
    gang: the ``k``-th best whole host whose CPUs and memory take it with nothing else there, a
    host's class being the worst class of its attempts (NEVER if one of its GPUs is nominated
    for another workload).
    """
    hosts = [h for h in world.hosts_of_model(w.model) if world.hosts[h].state == HostState.ACTIVE]
    if not world.is_gang(w):
        return min([host_level(world, w, h) for h in hosts], default=NEVER)
    size = world.largest(w.model)
    per_host = []
    for h in hosts:
        host = world.hosts[h]
        if host.size != size or any(x == GpuHealth.UNHEALTHY for x in host.gpu_health.values()):
            continue
        if not world.fits_empty(w, h, size):
            continue
        if any(world.nominee((h, i)) not in (None, w.id) for i in range(size)):
            per_host.append(NEVER)
            continue
        per_host.append(max([FREE] + [victim_class(world, w, a) for a in world.attempts_on(h)]))
    per_host.sort()
    k = w.gpus // size
    return per_host[k - 1] if len(per_host) >= k else NEVER


def host_level(world: World, w: Workload, h: str) -> int:
    """The least room class L such that ``h``'s free GPUs plus the GPUs there of attempts of
    class ≤ L reach ``w.gpus`` and, with those attempts gone, its CPUs and memory suffice."""
    free = len(world.free(h))
    classes = [(victim_class(world, w, a), a) for a in world.attempts_on(h)]
    for level in (FREE, NOW, LATER, FORBIDDEN):
        gone = [a for c, a in classes if c <= level]
        if free + sum(len(world.gpus_on(a, h)) for a in gone) >= w.gpus and world.fits(w, h, w.gpus, gone):
            return level
    return NEVER


def protected_room(world: World, w: Workload) -> dict[str, object]:
    """What a ``protected_work`` reason names: the room its reservation would take were no host
    reserved (§3.5, §3.8), one host (among those whose room is protected work) or a gang's hosts,
    and its start (``protected_until``) — for work still starting, ``M`` from now at the
    earliest, as the reservation counts it."""
    active = [h for h in world.hosts_of_model(w.model) if world.hosts[h].state == HostState.ACTIVE]
    if world.is_gang(w):
        best = earliest(world, w, active)
        return {} if best is None else {"hosts": list(best[2]), "protected_until": best[0]}
    best = earliest(world, w, [h for h in active if host_level(world, w, h) == LATER])
    return {} if best is None else {"host": best[2][0], "protected_until": best[0]}


def pending_reason(world: World, w: Workload) -> None:
    """Why the blocked allocated ``w`` waits (§3.8), the first that applies:
    ``reserved_for_other`` (room now, but only on hosts reserved for others), ``protected_work``
    (rule 2 allows victims that would make room, some still protected), ``fair_share`` (room only
    by also preempting work rule 2 forbids), ``insufficient_gpus``."""
    level = room_level(world, w)
    detail: dict[str, object] = {}
    if w.id in world.dec.reserved_start:
        detail["reserved_start"] = world.dec.reserved_start[w.id]
    if level <= NOW:
        world.explain(w, PendingReason.RESERVED_FOR_OTHER, detail)
    elif level == LATER:
        world.explain(w, PendingReason.PROTECTED_WORK, {**protected_room(world, w), **detail})
    elif level == FORBIDDEN:
        world.explain(w, PendingReason.FAIR_SHARE, detail)
    else:
        world.explain(w, PendingReason.INSUFFICIENT_GPUS, detail)


# --------------------------------------------------------------------------- one pass
def faults_and_drains(world: World) -> None:
    """§4: an attempt holding an unhealthy GPU stops (``gpu_fault``). §6: on a ``draining`` host
    unallocated and unprotected attempts stop (``drained``), every attempt with ``drain_now``.
    A gang part hit stops the whole gang once."""
    for a in sorted(world.attempts.values(), key=lambda a: a.id):
        if a.id in world.stopping:
            continue
        if any(h in world.hosts and world.hosts[h].gpu_health.get(i) == GpuHealth.UNHEALTHY for h, i in a.gpus):
            world.stop(a, StopReason.GPU_FAULT)
    for h in sorted(world.hosts):
        host = world.hosts[h]
        if host.state != HostState.DRAINING:
            continue
        for a in world.attempts_on(h):
            if a.id not in world.stopping and (host.drain_now or not world.protected(a)):
                world.stop(a, StopReason.DRAINED)


def check_nominations(world: World) -> None:
    """Nominations of GPUs that became unusable (host not active, GPU unhealthy), or held by an
    attempt that is not leaving, are dropped (and, in defence, one of the wrong size: no pass
    makes one)."""
    for wid in sorted(world.nominations):
        gpus = world.nominations[wid]
        bad = len(gpus) != world.pending[wid].gpus
        for g in gpus:
            owner = world.owner(g)
            if not world.usable(g) or (owner is not None and owner not in world.stopping):
                bad = True
        if bad:
            world.drop_nomination(wid)


def handle_allocated(world: World, w: Workload) -> bool:
    """One allocated workload at its turn: nominated → :func:`place_nominated`; else free
    placement, else preemption, else a reservation and a reason. True when admitted (started
    or preempted for)."""
    if waits_for_dependency(world, w):
        return False
    if w.id in world.nominations:
        placed = place_nominated(world, w)
        if placed is not None:
            return placed
    gpus = free_placement(world, w, honour_reservations=True)
    if gpus is not None:
        world.start(w, gpus, allocated=True)
        return True
    if preempt(world, w):
        return True
    reserve(world, w)
    pending_reason(world, w)
    return False


def reference_schedule(snapshot: Snapshot) -> Decisions:
    """One pass of DESIGN.md §3 over ``snapshot``, plainly; same output as ``schedule``."""
    budgets = {b.key: b for b in snapshot.budgets}
    pending = {w.id: w for w in snapshot.pending}
    nominations = {wid: tuple(g) for wid, g in snapshot.nominations.items() if wid in pending and g}
    own = windowed_usage(snapshot)
    for b, c in committed_usage(snapshot, nominations).items():
        own[b] = own.get(b, 0) + c
    world = World(
        snap=snapshot,
        now=snapshot.now,
        hosts={h.name: h for h in snapshot.hosts},
        budgets=budgets,
        attempts={a.id: a for a in snapshot.attempts},
        stopping={a.id for a in snapshot.attempts if a.stopping},
        nominations=nominations,
        pending=pending,
        load=roll_up(budgets, own),
        shares=normalized_shares(snapshot, budgets),
    )
    faults_and_drains(world)
    check_nominations(world)
    queues: dict[str, list[Workload]] = {"allocated": [], "unallocated": [], "unfunded": []}
    for w in sorted(snapshot.pending, key=lambda w: (w.submitted_at, w.seq, w.id)):
        if w.budget not in budgets:
            continue
        q = queue_of(world, w)
        if q is not None:
            queues[q].append(w)
    run_in_fair_tree(world, queues["allocated"], handle_allocated)
    unfunded = {w.id for w in queues["unfunded"]}
    run_in_fair_tree(world, queues["unallocated"] + queues["unfunded"], lambda wd, w: fill_unallocated(wd, w, unfunded))
    for h in sorted(world.hosts):
        if world.hosts[h].state == HostState.DRAINING and not world.attempts_on(h):
            world.dec.host_states[h] = HostState.DRAINED
    world.dec.nominations = dict(world.nominations)
    world.dec.reservations = {h: wid for h, (wid, _) in sorted(world.reserved.items())}
    return world.dec
