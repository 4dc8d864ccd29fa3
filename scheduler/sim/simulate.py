"""Trace simulator (docs/simulation.md): real demand through the policy on a simulated clock.

Pure Python, no Django. :class:`TraceSim` extends the scenario runner's discrete-event
:class:`~scheduler.sim.engine.Engine`: same attempts, stops, grace, usage charging and
``apply`` of :class:`~scheduler.policy.Decisions`; it adds trace arrivals, host faults, an
event-driven tick (a pass only at instants where something changed) and the metrics of the
report. The policy is any callable ``Snapshot -> Decisions``: Fairway's
:func:`~scheduler.policy.schedule` or a peer of :mod:`scheduler.sim.peers`.

Speed: with ``depth`` N a pass sees, per (budget, GPU count, allocated), the N oldest pending
workloads (the queue *view*; default None: all, exact). A queue whose whole view started in one pass is passed again at
the same instant. For the peers (whose decisions depend on a pending job only through its
budget, size and age) and for unallocated work the view is exact. For Fairway's allocated work
it is not: rule 2 and reserved hosts read each workload's minimum runtime, and deeper workloads
take reservations that hold other work back; docs/simulation.md gives the measured difference.
``depth=None`` (the default) passes every pending workload (exact).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import statistics
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scheduler.policy import (
    Attempt,
    Decisions,
    GpuHealth,
    Host,
    IncrementalScheduler,
    Snapshot,
    StopReason,
    UsageRecord,
    Workload,
)
from scheduler.policy.admission import gpu_shapes, infeasible_shape
from scheduler.policy.attempt_log import AttemptLog, AttemptsView
from scheduler.policy.figures import attainment
from scheduler.policy.pending import PendingChanges, PendingLog
from scheduler.scenarios.spec import cluster_size_problem
from scheduler.sim.budgets import BudgetPlan, default_plan, load_plan
from scheduler.sim.classes import WORKLOAD_CLASSES, classify, declares_zero
from scheduler.sim.engine import Engine, SimAttempt, SimWorkload
from scheduler.trace import (
    DEFAULT_MIN_RUNTIME_RULE,
    DEFAULT_UNALLOCATED_RULE,
    MinRuntimeRule,
    TraceJob,
    UnallocatedRule,
    read_trace,
)

DAY = 86_400
MAX_DAYS = 3650  # --days and --start-day: a slice of at most ten years (the daily series are lists)
T0 = 1_501_545_600  # 2017-08-01T00:00:00Z: trace second 0 (Philly's first submission, August 2017)
DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "data" / "philly" / "philly_jobs.csv"
POLICY_NAMES = ("fairway", "fifo", "slurm-fairshare", "kueue-drs", "kai-timeshare")
SIZE_CLASSES = ("1", "2-8", ">8")


class SimulationError(ValueError):
    """Bad simulator input that is not a trace or budget-file error (those have their own types)."""


def size_class(gpus: int) -> str:
    return "1" if gpus == 1 else "2-8" if gpus <= 8 else ">8"


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulation needs. Durations in seconds."""

    trace: str = str(DEFAULT_TRACE)
    hosts: int = 64
    gpus_per_host: int = 8
    budgets: str | None = None  # YAML file; None: one project per VC, equal shares
    min_runtime_rule: str = DEFAULT_MIN_RUNTIME_RULE
    unallocated_rule: str = DEFAULT_UNALLOCATED_RULE
    days: float | None = None  # None: the trace's whole span (first to last submission)
    seed: int = 1
    checkpoint: str = "resume"  # resume | restart
    fault_rate: float = 0.0  # host faults per host per day
    repair_s: int = 4 * 3600
    grace_s: int = 30
    window_s: int = 7 * DAY
    max_reservations: int = 8
    depth: int | None = None  # None: every pending workload (exact); N: the oldest N per queue
    tick_gap_s: int = 0
    model: str = "GPU"
    start_day: float = 0.0  # the slice starts this many days after the trace's first submission
    checkpoint_interval_s: int = 0  # with resume: a job checkpoints every S s of an attempt (0: at every instant)
    debug_zero: float = 0.0  # probability that a debug-class job declares M = 0 (runs unallocated)

    def check(self) -> None:
        # nan passes every comparison below and inf overflowed int(): both are refused by name
        for flag, value in (
            ("--days", self.days),
            ("--fault-rate", self.fault_rate),
            ("--start-day", self.start_day),
            ("--debug-zero", self.debug_zero),
        ):
            if value is not None and not math.isfinite(value):
                raise SimulationError(f"{flag} must be a finite number, not {value}")
        if self.hosts < 1 or self.gpus_per_host < 1:
            raise SimulationError("--hosts and --gpus-per-host must be at least 1")
        # A scenario file's bounds of a cluster: past them the hosts were built until memory ran out (brk47)
        if too_big := cluster_size_problem(("--hosts", self.hosts), ("--gpus-per-host", self.gpus_per_host)):
            raise SimulationError(too_big)
        if self.days is not None and self.days <= 0:
            raise SimulationError("--days must be positive")
        for flag, value in (("--days", self.days), ("--start-day", self.start_day)):
            if value is not None and value > MAX_DAYS:  # daily series of a billion days (brk31)
                raise SimulationError(f"{flag}: at most {MAX_DAYS} days (ten years), not {value:g}")
        if self.checkpoint not in ("resume", "restart"):
            raise SimulationError("--checkpoint must be resume or restart")
        if self.fault_rate < 0 or self.repair_s < 0 or self.grace_s < 0 or self.tick_gap_s < 0:
            raise SimulationError("fault rate, repair, grace and tick gap must not be negative")
        if self.depth is not None and self.depth < 1:
            raise SimulationError("--depth must be at least 1")
        if self.start_day < 0:
            raise SimulationError("--start-day must not be negative")
        if self.checkpoint_interval_s < 0:
            raise SimulationError("--checkpoint-interval must not be negative")
        if not 0 <= self.debug_zero <= 1:
            raise SimulationError("--debug-zero must be a probability between 0 and 1")


@dataclass
class Inputs:
    """Validated inputs shared by every policy of one run."""

    config: SimConfig
    jobs: list[TraceJob]
    plan: BudgetPlan
    min_rule: MinRuntimeRule
    unalloc_rule: UnallocatedRule
    horizon_s: int
    hosts: list[Host] | None = None
    """Explicit hosts (the what-if from the database); None: ``hosts × gpus_per_host`` of one model."""
    min_runtime_of: dict[int, int] | None = None
    """Declared minimum runtime per job id (the database's); None: from the rules."""
    model_of: dict[int, str] | None = None
    t_base: int | None = None
    """Trace second of the simulation's start; None: the first job's submission."""
    classes: dict[int, str] | None = None
    """Workload class per job id (:mod:`scheduler.sim.classes`, from the whole trace); None: all "other"."""


def prepare(config: SimConfig) -> Inputs:
    """Read and check the trace, the budget file and the rules; raises before anything is written."""
    config.check()
    try:
        min_rule = MinRuntimeRule.parse(config.min_runtime_rule)
        unalloc_rule = UnallocatedRule.parse(config.unallocated_rule)
    except ValueError as exc:
        raise SimulationError(str(exc)) from None
    jobs = read_trace(config.trace)
    if not jobs:
        raise SimulationError(f"{config.trace}: the trace has no jobs")
    first_line: dict[str, int] = {}
    for j in jobs:
        first_line.setdefault(j.vc, j.line)
    plan = load_plan(config.budgets, first_line) if config.budgets else default_plan(first_line)
    classes = classify(jobs)  # on the whole trace: a burst cut by the slice's edge stays a sweep
    base = jobs[0].submit_time_s + int(config.start_day * DAY)
    t_base = base if config.start_day else None
    jobs = [j for j in jobs if j.submit_time_s >= base]
    if not jobs:
        raise SimulationError(f"{config.trace}: no job is submitted after --start-day {config.start_day:g}")
    span = jobs[-1].submit_time_s - base
    horizon = span + 1 if config.days is None else int(config.days * DAY)
    jobs = [j for j in jobs if j.submit_time_s - base < horizon] or jobs[:1]
    return Inputs(config, jobs, plan, min_rule, unalloc_rule, horizon, t_base=t_base, classes=classes)


# ------------------------------------------------------------------------------------------------
class WindowUsage:
    """Exact windowed usage ``U`` of closed intervals, per budget, pro-rata at the window's start.

    Intervals arrive in order of their end (releases happen at the simulated now), so expiry is a
    queue and the pro-rata edge a heap: O(log n) per interval, O(budgets) per query.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self._by_end: deque[list[Any]] = deque()
        self._by_start: list[tuple[int, int, list[Any]]] = []
        self._full: dict[str, int] = {}
        self._edge_ge: dict[str, int] = {}
        self._edge_g: dict[str, int] = {}
        self._n = 0
        self.added = 0
        """Intervals added (the usage at an instant changes only with it)."""

    def add(self, budget: str, gpus: int, start: int, end: int) -> None:
        if end <= start or gpus <= 0:
            return
        self.added += 1
        rec = [budget, gpus, start, end, 0]  # state 0: inside, 1: crosses the window start
        self._by_end.append(rec)
        self._n += 1
        heapq.heappush(self._by_start, (start, self._n, rec))
        self._full[budget] = self._full.get(budget, 0) + gpus * (end - start)

    def at(self, now: int) -> dict[str, int]:
        ws = now - self.window
        while self._by_start and self._by_start[0][0] < ws:
            rec = heapq.heappop(self._by_start)[2]
            if rec[4] == 0:
                b, g, s, e = rec[0], rec[1], rec[2], rec[3]
                self._full[b] -= g * (e - s)
                self._edge_ge[b] = self._edge_ge.get(b, 0) + g * e
                self._edge_g[b] = self._edge_g.get(b, 0) + g
                rec[4] = 1
        while self._by_end and self._by_end[0][3] <= ws:
            rec = self._by_end.popleft()
            b, g, e = rec[0], rec[1], rec[3]
            if rec[4] == 1:
                self._edge_ge[b] -= g * e
                self._edge_g[b] -= g
            rec[4] = 2
        out = {}
        for b in set(self._full) | set(self._edge_g):
            u = self._full.get(b, 0) + self._edge_ge.get(b, 0) - ws * self._edge_g.get(b, 0)
            if u:
                out[b] = u
        return out


class PendingView(Sequence[Workload]):
    """The pending workloads one pass sees: per (budget, GPU count, allocated) the oldest ``depth``,
    in submission order within each queue. ``queues`` maps those keys to the lists.

    ``items`` None: the queues' lists one after the other in ``queues``' order, made on the first
    read. The policy follows ``changes`` and reads none: a list of every pending workload made and
    freed per pass was ~0.4 ms of cache misses at the whole trace's 21,000 (day 90; sim32). The
    lists are never changed while a view that holds them lives (:meth:`TraceSim._own`)."""

    __slots__ = ("_items", "queues", "pending_gpus", "changes", "__weakref__")

    def __init__(
        self,
        items: list[Workload] | None,
        queues: dict[tuple[str, int, bool], list[Workload]],
        pending_gpus: dict[str, int] | None = None,
        changes: PendingChanges | None = None,
    ) -> None:
        self._items = items
        self.queues = queues
        self.pending_gpus = pending_gpus if pending_gpus is not None else {}
        """GPUs of *all* pending workloads per budget (the view may show fewer)."""
        self.changes = changes
        """With the whole queue in view: what arrived and left since the simulator's previous
        snapshot (scheduler/policy/pending.py); the policy follows them instead of comparing."""

    @property
    def items(self) -> list[Workload]:
        if self._items is None:
            self._items = [w for q in self.queues.values() for w in q]
        return self._items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return self.items[i]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.items)

    def __reduce__(self) -> tuple[Any, ...]:
        queues = {k: q.copy() for k, q in self.queues.items()}  # unpickled beside its simulator: not its lists
        return (PendingView, (self.items, queues, self.pending_gpus, self.changes))


QueueView = tuple[list[Workload], dict[tuple[str, int, bool], list[Workload]], dict[tuple[str, int, bool], int]]
"""The pending workloads a pass sees, by queue, and the queues it sees in part (``--depth``)."""


def _wkey(w: Workload) -> tuple[int, int]:
    return (w.submitted_at, w.seq)


@dataclass
class TraceWorkload(SimWorkload):
    """A trace job in the simulation."""

    vc: str = ""
    duration: int = 0
    line: int = 0
    job_id: int = 0
    policy_view: Workload | None = None
    gpu_seconds_run: int = 0

    # The trace simulator keeps its own queues, not the scenario engine's WorkloadBook, and makes
    # a view once per enqueue: plain attribute sets (a watched set per field cost 0.5 % of a
    # slice), and the view built and compared each time.
    __setattr__ = object.__setattr__

    def as_pending(self) -> Workload:
        view, kept = self.plain_pending(), self.view
        if kept is None or kept != view:
            kept = self.view = view
        return kept


def _tw(w: SimWorkload) -> TraceWorkload:
    if not isinstance(w, TraceWorkload):  # pragma: no cover - the simulator only makes TraceWorkloads
        raise TypeError(f"{w.id} is not a trace workload")
    return w


# ------------------------------------------------------------------------------------------------
@dataclass
class Metrics:
    """Raw measurements of one policy's run, turned into the report by :func:`summarize`."""

    days: int
    budgets: list[str]
    avail_day: list[float] = field(default_factory=list)  # available GPU-seconds per day
    occ_alloc_day: list[float] = field(default_factory=list)
    occ_unalloc_day: list[float] = field(default_factory=list)
    backlog_day: list[int] = field(default_factory=list)  # GPUs of pending work at each day's start
    delivered_day: dict[str, list[float]] = field(default_factory=dict)  # allocated-class GPU-s per budget per day
    alloc_jobs: list[tuple[str, str, int, int, int, int]] = field(default_factory=list)
    """Allocated-class jobs, filled at the horizon: (id, budget, GPUs, submitted, finished or horizon,
    run time at submission). With :attr:`need_at`, the input of :func:`window_demand`."""
    need_at: dict[int, dict[str, int]] = field(default_factory=dict)
    """Per metric-window start (simulated second): the run time each unfinished allocated-class job
    still needed then (pending: its remaining work; running: minus the current attempt's run so far).
    Only needs shorter than a window are kept: a longer one caps nothing, like the whole run time
    :func:`window_demand` falls back to."""
    waits: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in SIZE_CLASSES})
    unstarted_waits: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in SIZE_CLASSES})
    jct: list[int] = field(default_factory=list)
    waits_by_budget: dict[str, list[int]] = field(default_factory=dict)
    preemptions: int = 0
    preemptions_alloc: int = 0
    preempted_gpu_s: int = 0
    lost_gpu_s: int = 0
    fault_kills: int = 0
    violations: int = 0
    starts: int = 0
    passes: int = 0
    ticks: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    submitted: int = 0
    rejected: int = 0
    finished: int = 0
    demand_day: list[float] = field(default_factory=list)
    """GPU-seconds asked by pending + running work (open attempts, grace included) per day."""
    demand_min_day: list[float] = field(default_factory=list)
    """Per day, the least GPUs asked by pending + running work at any moment of it."""
    class_waits: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in WORKLOAD_CLASSES})
    class_unstarted: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in WORKLOAD_CLASSES})
    debug_waits_by_funding: dict[str, list[int]] = field(default_factory=lambda: {"allocated": [], "unallocated": []})
    """Debug-class waits (never-started ones to the horizon) by the job's funding class (M > 0: allocated)."""
    class_run_gpu_s: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WORKLOAD_CLASSES, 0))
    run_gpu_s_by_budget: dict[str, int] = field(default_factory=dict)  # every attempt's GPU-time, any class
    lost_preemption_by_budget: dict[str, int] = field(default_factory=dict)  # GPU-s since the last checkpoint
    lost_faults_by_budget: dict[str, int] = field(default_factory=dict)
    preemptions_by_budget: dict[str, int] = field(default_factory=dict)
    decisions: list[tuple[int, int, int]] = field(default_factory=list)
    """Per preemption decision (one preemptor in one pass): (GPUs evicted, GPUs requested, evicted beyond need)."""
    decision_victims: list[tuple[int, int]] = field(default_factory=list)
    """Per decision, in the order of ``decisions``: (GPUs evicted of allocated attempts, of unallocated ones)."""

    def __post_init__(self) -> None:
        self.avail_day = [0.0] * self.days
        self.occ_alloc_day = [0.0] * self.days
        self.occ_unalloc_day = [0.0] * self.days
        self.backlog_day = [0] * self.days
        self.delivered_day = {b: [0.0] * self.days for b in self.budgets}
        self.demand_day = [0.0] * self.days
        self.demand_min_day = [math.inf] * self.days


def _spread(series: list[float], t0: int, start: int, end: int, amount_per_s: float) -> None:
    """Add ``amount_per_s`` × seconds of [start, end) into per-day buckets (seconds from ``t0``)."""
    n = len(series)
    s, e = start - t0, end - t0
    if e <= s:
        return
    d = s // DAY
    while s < e and d < n:
        seg_end = min(e, (d + 1) * DAY)
        if d >= 0:
            series[d] += amount_per_s * (seg_end - s)
        s = seg_end
        d += 1


def window_demand(m: Metrics, start: int, length: int, count: int) -> list[dict[str, float]]:
    """Allocated-class demand per budget in ``count`` consecutive windows of ``length`` seconds from
    ``start`` (docs/simulation.md, "Metrics"): per job, GPUs × min(time it is present in the window,
    pending or running; run time it still needed at max(window start, submission)).

    A job submitted before a window start uses the need recorded there (:attr:`Metrics.need_at`); with
    none recorded, its whole run time (an upper bound). O(windows each job overlaps).
    """
    out: list[dict[str, float]] = [{} for _ in range(count)]
    if length <= 0:
        return out
    needs = [m.need_at.get(start + k * length, {}) for k in range(count)]
    for wid, budget, gpus, submitted, end, work in m.alloc_jobs:
        k = max(0, (submitted - start) // length)
        while k < count:
            lo = start + k * length
            if lo >= end:
                break
            present = min(end, lo + length) - max(submitted, lo)
            if present > 0:
                need = work if submitted >= lo else needs[k].get(wid, work)
                d = out[k]
                d[budget] = d.get(budget, 0.0) + gpus * min(present, need)
            k += 1
    return out


class TraceSim(Engine):
    """The scenario engine with trace arrivals, host faults, an event-driven tick and metrics."""

    def __init__(
        self,
        inputs: Inputs,
        policy: Callable[[Snapshot], Decisions],
        *,
        charge_all: bool = False,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        cfg = inputs.config
        super().__init__(
            start=T0,
            window=cfg.window_s,
            tick_interval=max(1, cfg.tick_gap_s),
            grace=cfg.grace_s,
            max_reservations=cfg.max_reservations,
            auto_drain_on_gpu_fault=False,
            with_reasons=False,
        )
        # Its own snapshot keeps the queues and closed usage (below): plain containers, not the
        # scenario engine's watched book and usage ledger.
        self.workloads = {}
        self.usage = []
        self.inputs = inputs
        self.cfg = cfg
        self.policy = policy
        self.charge_all = charge_all
        self.progress = progress
        self.horizon = T0 + inputs.horizon_s
        self.days = math.ceil(inputs.horizon_s / DAY)
        self._wdays = cfg.window_s // DAY  # metric windows are whole days (see summarize)
        for b in inputs.plan.budgets:
            self.add_budget(b)
        self.leaves = inputs.plan.leaves
        self.m = Metrics(self.days, self.leaves)
        if inputs.hosts is not None:
            for h in inputs.hosts:
                self.add_host(h)
        else:
            width = max(3, len(str(cfg.hosts)))
            for i in range(cfg.hosts):
                gh = dict.fromkeys(range(cfg.gpus_per_host), GpuHealth.HEALTHY)
                self.add_host(Host(f"h{i:0{width}d}", cfg.model, gh))
        self.total_gpus = sum(h.size for h in self.hosts.values())
        self._host_list = list(self.hosts.values())
        self._budget_list = list(self.budgets.values())
        self.wusage = WindowUsage(cfg.window_s)
        self.queues: dict[tuple[str, int, bool], list[Workload]] = {}
        self._pending_log = PendingLog()  # every change of the queues, for the policy (snapshot)
        self._qkeys: list[tuple[str, int, bool]] = []
        # The open attempts' policy views in self.attempts' order, kept as they change (opened,
        # stopped, released), and the ids changed since the last snapshot (AttemptLog): each
        # snapshot hands them, so the policy's Standing.sync reads those, not every attempt.
        self._attempt_view: dict[str, Attempt] = {}
        self._attempt_log = AttemptLog()
        self._view_full: dict[tuple[str, int, bool], int] = {}
        self._cursor = (0, T0, 0)  # advance(): the next job, the next day's start, the day
        self._kept_view: tuple[dict[tuple[str, int, bool], list[Workload]], dict[tuple[str, int, bool], int]] | None = (
            None
        )
        # The queues whose list a view handed out holds, and the views handed out that live
        # (weakly): a lent list is copied before it changes while one lives (_own).
        self._lent: set[tuple[str, int, bool]] = set()
        self._holders: weakref.WeakSet[PendingView] = weakref.WeakSet()
        self.queue_copies = 0
        """Queues copied before a change because a view holding them lived (tests)."""
        self._kept_usage: tuple[tuple[int, int], list[UsageRecord]] | None = None
        self._available = self.total_gpus
        self._held = 0  # GPUs held by open attempts
        self._preempts = bool(getattr(policy, "preempts", True))
        self._avail_since = T0
        self._tick_at: int | None = None
        self._last_tick: int | None = None
        self._pending_gpus = 0
        self._pending_by_budget: dict[str, int] = {}
        self._alloc_pending = 0
        self._demand_since = T0
        self._wclass = inputs.classes or {}
        # Host faults: one seeded stream per host, independent of the policy and of event order.
        self._fault_rng = {h: random.Random(f"{cfg.seed}:{h}") for h in self.hosts}  # noqa: S311 (a simulation)
        if cfg.fault_rate > 0:
            for h in sorted(self.hosts):
                self._push(self._next_fault(h, T0), "fault", h)
        self._shape = gpu_shapes((h.model, h.size) for h in self.hosts.values())

    def _fits(self, n: int, model: str) -> bool:
        """Submission's feasibility rule (DESIGN.md §3.3), the policy's statement of it."""
        return infeasible_shape(self._shape, model, n) is None

    # ------------------------------------------------------------------ inputs
    def _next_fault(self, host: str, after: int) -> int:
        rate = self.cfg.fault_rate / DAY
        return after + max(1, int(self._fault_rng[host].expovariate(rate)))

    def _arrive(self, job: TraceJob) -> bool:
        """Submit one trace job; True when a pass could act on it now.

        Without idle GPUs a job can only start by preemption: never under a policy that does not
        preempt, never for unallocated work under Fairway (§3.4 rule 4).
        """
        inp = self.inputs
        self.m.submitted += 1
        model = self.cfg.model if inp.model_of is None else inp.model_of.get(job.job_id, self.cfg.model)
        if not self._fits(job.num_gpus, model):
            self.m.rejected += 1  # no host set of this cluster could ever hold it (DESIGN.md §3.3)
            return False
        if inp.min_runtime_of is not None:
            m = inp.min_runtime_of[job.job_id]
        elif inp.unalloc_rule.is_unallocated(job) or self._declares_zero(job):
            m = 0
        else:
            m = max(1, math.ceil(inp.min_rule.min_runtime_s(job.duration_s) - 1e-9))
        w = TraceWorkload(
            id=f"j{job.job_id}",
            budget=inp.plan.leaf_of_vc[job.vc],
            gpus=job.num_gpus,
            model=model,
            min_runtime=m,
            submitted_at=self.now,
            seq=self.next_seq(),
            remaining=job.duration_s,
            vc=job.vc,
            duration=job.duration_s,
            line=job.line,
            job_id=job.job_id,
        )
        self.workloads[w.id] = w
        self._enqueue(w)
        if self._available > self._held:
            return True
        return self._preempts and (self.charge_all or m > 0)

    def _declares_zero(self, job: TraceJob) -> bool:
        """A debug-class job that declares ``M = 0`` under ``debug_zero`` (scheduler/sim/classes.py)."""
        p = self.cfg.debug_zero
        return bool(p) and self._wclass.get(job.job_id) == "debug" and declares_zero(job.job_id, p)

    def _enqueue(self, w: TraceWorkload) -> None:
        pv = w.as_pending()
        w.policy_view = pv
        key = (w.budget, w.gpus, w.min_runtime > 0)
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = []
            bisect.insort(self._qkeys, key)
        elif key in self._lent:
            q = self._own(key)
        bisect.insort(q, pv, key=_wkey)
        self._kept_view = None
        self._pending_log.add(pv)
        self._pending_gpus += w.gpus
        self._pending_by_budget[w.budget] = self._pending_by_budget.get(w.budget, 0) + w.gpus
        if w.min_runtime > 0:
            self._alloc_pending += 1

    def _dequeue(self, w: TraceWorkload) -> None:
        pv = w.policy_view
        if pv is None:
            return
        key = (w.budget, w.gpus, w.min_runtime > 0)
        q = self._own(key) if key in self._lent else self.queues[key]
        i = bisect.bisect_left(q, _wkey(pv), key=_wkey)
        while q[i] is not pv:
            i += 1
        del q[i]
        self._kept_view = None
        self._pending_log.remove(pv)
        w.policy_view = None
        self._pending_gpus -= w.gpus
        self._pending_by_budget[w.budget] -= w.gpus
        if w.min_runtime > 0:
            self._alloc_pending -= 1

    def _own(self, key: tuple[str, int, bool]) -> list[Workload]:
        """The queue ``key``'s list, to change: a copy in its place while a view handed out that
        holds it lives (it keeps what it was given), else the list itself (no view holds one)."""
        q = self.queues[key]
        if self._holders:
            q = self.queues[key] = q.copy()
            self._lent.discard(key)
            self.queue_copies += 1
        else:
            self._lent.clear()
        return q

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the kept views (a state of bench/philly_state.py): no view handed out
        survives the pickle, the next snapshot builds its own."""
        state = self.__dict__.copy()
        state.update(_kept_view=None, _lent=set(), _holders=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Loaded without kept views (also a state pickled before these: another shape)."""
        state.update(_kept_view=None, _lent=set(), _holders=weakref.WeakSet())
        self.__dict__.update(state)

    # ---------------------------------------------------------------- snapshot
    def snapshot(self) -> Snapshot:
        """What the policy sees now. The queue view and the usage lumps are kept while the queues
        (:meth:`_enqueue`, :meth:`_dequeue`) and the instant and closed usage are unchanged (a
        pass after an exit or a release, or again at the same instant, sees the same);
        :meth:`plain_snapshot` builds both afresh (the oracle, compared on every pass in
        tests/sim/test_simulate.py)."""
        if self._kept_view is None:
            _, view, full = self._queue_view(materialize=False)
            self._kept_view = (view, full)
            self._lent.update(view if not full else (k for k in view if k not in full))  # the queues' own lists
        view, self._view_full = self._kept_view
        changes = self._pending_log.cut() if self.cfg.depth is None else None
        views = self._attempt_view
        attempts = AttemptsView(views.values(), self._attempt_log.cut(views))
        at = (self.now, self.wusage.added)
        if self._kept_usage is None or self._kept_usage[0] != at:
            self._kept_usage = (at, self._usage_lumps())
        pending = PendingView(None, view, dict(self._pending_by_budget), changes)
        self._holders.add(pending)
        return self._snapshot(attempts, pending, self._kept_usage[1])

    def plain_snapshot(self) -> Snapshot:
        """:meth:`snapshot` with the queue view and the usage lumps built afresh and no changes
        handed (the logs are not cut)."""
        items, view, _ = self._queue_view()
        attempts = list(self._attempt_view.values())
        return self._snapshot(attempts, PendingView(items, view, dict(self._pending_by_budget)), self._usage_lumps())

    def _queue_view(
        self, *, materialize: bool = True
    ) -> tuple[list[Workload], dict[tuple[str, int, bool], list[Workload]], dict[tuple[str, int, bool], int]]:
        """The pending workloads in view (``--depth``; not listed unless ``materialize``), by queue,
        and the queues seen in part."""
        depth = self.cfg.depth
        items: list[Workload] = []
        view: dict[tuple[str, int, bool], list[Workload]] = {}
        full: dict[tuple[str, int, bool], int] = {}
        for key in self._qkeys:
            q = self.queues[key]
            if not q:
                continue
            part = q if depth is None or len(q) <= depth else q[:depth]
            if depth is not None and len(q) > depth:
                full[key] = len(part)
            view[key] = part
            if materialize:
                items.extend(part)
        return items, view, full

    def _usage_lumps(self) -> list[UsageRecord]:
        """Closed usage as one lump per budget charged now (exact: :class:`WindowUsage`)."""
        return [UsageRecord(b, self.now, self.now, None, u) for b, u in sorted(self.wusage.at(self.now).items())]

    def _snapshot(self, attempts: Sequence[Attempt], pending: PendingView, usage: list[UsageRecord]) -> Snapshot:
        return Snapshot(
            now=self.now,
            hosts=self._host_list,
            budgets=self._budget_list,
            attempts=attempts,
            pending=pending,
            usage=usage,
            nominations=self.nominations,
            window=self.window,
            max_reservations=self.max_reservations,
            with_reasons=False,
        )

    # -------------------------------------------------------------- lifecycle
    def _open_attempt(
        self, w: SimWorkload, gpus: tuple[tuple[str, int], ...], *, allocated: bool, started_at: int
    ) -> SimAttempt:
        w = _tw(w)
        first = w.first_start is None
        self._dequeue(w)
        a = super()._open_attempt(w, gpus, allocated=allocated, started_at=started_at)
        self._put_view(a)
        self._held += len(gpus)
        self.m.starts += 1
        if first:
            self.m.waits[size_class(w.gpus)].append(started_at - w.submitted_at)
            self.m.class_waits[self._wclass.get(w.job_id, "other")].append(started_at - w.submitted_at)
            self._note_debug_wait(w, started_at - w.submitted_at)
            self.m.waits_by_budget.setdefault(w.budget, []).append(started_at - w.submitted_at)
        if a.allocated and a.min_runtime > 0 and (a.run_budget is None or a.min_runtime < a.run_budget):
            self._push(started_at + a.min_runtime, "protect", a.id)
        return a

    def _release(self, a: SimAttempt, end_reason: str, at: int) -> None:
        if a.id not in self.attempts:
            return
        super()._release(a, end_reason, at)
        self._held -= len(a.gpus)
        self.usage.clear()  # closed usage lives in self.wusage (exact, see WindowUsage)
        self._attempt_view.pop(a.id, None)
        self._attempt_log.touch(a.id)
        w = self.workloads[a.workload]
        w = _tw(w)
        g = len(a.gpus)
        if a.allocated or self.charge_all:
            self.wusage.add(a.budget, g, a.started_at, at)
        self._account_interval(w, a, a.started_at, at)
        if end_reason in ("preempted", "drained"):
            self.m.preempted_gpu_s += g * (at - a.started_at)
        if end_reason in ("preempted", "drained"):
            self.m.preemptions_by_budget[w.budget] = self.m.preemptions_by_budget.get(w.budget, 0) + 1
        if w.state == "pending":
            if self.cfg.checkpoint == "restart":
                lost = w.duration - (w.remaining or 0)
                w.remaining = w.duration
            elif self.cfg.checkpoint_interval_s:
                # the work since the attempt's last checkpoint (one every interval of its run) is redone
                lost = min((at - a.started_at) % self.cfg.checkpoint_interval_s, w.duration - (w.remaining or 0))
                w.remaining = (w.remaining or 0) + lost
            else:
                lost = 0
            self.m.lost_gpu_s += g * lost
            book = self.m.lost_faults_by_budget if end_reason == "gpu_fault" else self.m.lost_preemption_by_budget
            book[w.budget] = book.get(w.budget, 0) + g * lost
            self._enqueue(w)
        elif w.state in ("succeeded", "failed"):
            self.m.finished += 1
            self.m.jct.append(at - w.submitted_at)

    def _put_view(self, a: SimAttempt) -> None:
        """The attempt's policy view now (new, or stopped: the only changes a trace makes to an
        open attempt), told to the attempt log."""
        self._attempt_view[a.id] = a.as_policy()
        self._attempt_log.touch(a.id)

    def stop_attempt(self, a: SimAttempt, reason: str) -> None:
        super().stop_attempt(a, reason)
        if a.id in self.attempts:  # not released at once (grace 0)
            self._put_view(a)

    def _account_interval(self, w: TraceWorkload, a: SimAttempt, start: int, end: int) -> None:
        g = len(a.gpus)
        allocated_class = w.min_runtime > 0
        _spread(self.m.occ_alloc_day if allocated_class else self.m.occ_unalloc_day, T0, start, end, g)
        if end > start:
            self.m.run_gpu_s_by_budget[w.budget] = self.m.run_gpu_s_by_budget.get(w.budget, 0) + g * (end - start)
            c = self._wclass.get(w.job_id, "other")
            self.m.class_run_gpu_s[c] += g * (end - start)
        if allocated_class:
            _spread(self.m.delivered_day[w.budget], T0, start, end, g)

    def apply(self, dec: Decisions) -> None:
        self._note_decisions(dec)
        for stop in dec.stops:
            a = self.attempts.get(stop.attempt)
            if a is None or a.stop_reason is not None:
                continue
            if stop.reason in (StopReason.PREEMPTED, StopReason.DRAINED):
                self.m.preemptions += 1
                if a.allocated:
                    self.m.preemptions_alloc += 1
                    if self.now < a.started_at + a.min_runtime:
                        self.m.violations += 1
        super().apply(dec)
        self.log.started.clear()
        self.log.preempted.clear()

    def _note_debug_wait(self, w: TraceWorkload, wait: int) -> None:
        if self._wclass.get(w.job_id) == "debug":
            self.m.debug_waits_by_funding["allocated" if w.min_runtime > 0 else "unallocated"].append(wait)

    def _note_decisions(self, dec: Decisions) -> None:
        """The preemption decisions of one pass: per preemptor, GPUs evicted, requested and beyond need.

        Beyond need: evicted GPUs the preemptor is not nominated for (it will not run on them); a
        stop without a nomination counts ``max(0, evicted - requested)``. Stops with no preemptor
        (drains) are no decision.
        """
        groups: dict[str, list[SimAttempt]] = {}
        for stop in dec.stops:
            a = self.attempts.get(stop.attempt)
            if a is None or a.stop_reason is not None or stop.reason != StopReason.PREEMPTED:
                continue
            if stop.for_workload is not None:
                groups.setdefault(stop.for_workload, []).append(a)
        for wid, victims in groups.items():
            w = self.workloads.get(wid)
            requested = w.gpus if w is not None else 0
            freed = {g for a in victims for g in a.gpus}
            nominated = dec.nominations.get(wid)
            beyond = len(freed - set(nominated)) if nominated else max(0, len(freed) - requested)
            self.m.decisions.append((len(freed), requested, beyond))
            alloc = sum(len(a.gpus) for a in victims if a.allocated)
            self.m.decision_victims.append((alloc, len(freed) - alloc))

    def _note_demand(self, t: int) -> None:
        """GPUs asked by pending + running work, held since the last instant, up to ``t``."""
        s = self._demand_since
        if t <= s:
            return
        v = self._pending_gpus + self._held
        _spread(self.m.demand_day, T0, s, t, v)
        mins = self.m.demand_min_day
        for d in range(max(0, (s - T0) // DAY), min(len(mins), (t - 1 - T0) // DAY + 1)):
            if v < mins[d]:
                mins[d] = v
        self._demand_since = t

    # --------------------------------------------------------------- events
    def _set_available(self, delta: int) -> None:
        _spread(self.m.avail_day, T0, self._avail_since, self.now, self._available)
        self._avail_since = self.now
        self._available += delta

    def _process_event(self, kind: str, ident: str) -> bool:
        """Process one event; True when the state changed so that a pass is due."""
        if kind == "protect":
            return ident in self.attempts and self._alloc_pending > 0
        if kind == "tick":
            self._tick_at = None
            return True
        if kind == "fault":
            h = self.hosts[ident]
            self.hosts[ident] = replace(h, gpu_health=dict.fromkeys(h.gpu_health, GpuHealth.UNHEALTHY))
            self._host_list = list(self.hosts.values())
            for a in sorted(self.attempts.values(), key=lambda a: a.id):
                if any(g[0] == ident for g in a.gpus):
                    self.m.fault_kills += 1
                    self._release(a, "gpu_fault", self.now)
            self._set_available(-h.size)
            self._push(self.now + self.cfg.repair_s, "repair", ident)
            return True
        if kind == "repair":
            h = self.hosts[ident]
            self.hosts[ident] = replace(h, gpu_health=dict.fromkeys(h.gpu_health, GpuHealth.HEALTHY))
            self._host_list = list(self.hosts.values())
            self._set_available(h.size)
            self._push(self._next_fault(ident, self.now), "fault", ident)
            return True
        n = len(self.attempts)
        super()._process_event(kind, ident)
        return len(self.attempts) != n

    def _pass(self) -> None:
        """Passes at this instant until nothing more can change (see the module docstring)."""
        self.m.ticks += 1
        self._last_tick = self.now
        for _ in range(50):
            dec = self.policy(self.snapshot())
            self.m.passes += 1
            full = self._view_full
            self.apply(dec)
            if not dec.changed:
                return
            again = bool(dec.stops) and self.grace == 0
            if full and not again:
                started: dict[tuple[str, int, bool], int] = {}
                for st in dec.starts:
                    w = self.workloads[st.workload]
                    key = (w.budget, w.gpus, w.min_runtime > 0)
                    started[key] = started.get(key, 0) + 1
                again = any(started.get(k, 0) >= n for k, n in full.items())
            if not again:
                return

    def run(self) -> Metrics:
        """Run to the horizon; returns the raw metrics."""
        wall = time.perf_counter()
        cpu = time.process_time()
        self.advance(1 << 62)
        self.now = self.horizon
        self._note_demand(self.horizon)
        day = self._cursor[2]
        while day < self.days:
            self.m.backlog_day[day] = self._pending_gpus
            if self._wdays and day % self._wdays == 0:
                self._record_need(T0 + day * DAY)
            day += 1
        self._finish()
        self.m.wall_s = time.perf_counter() - wall
        self.m.cpu_s = time.process_time() - cpu
        if self.progress is not None:
            self.progress(self.inputs.horizon_s / DAY)
        return self.m

    def advance(self, until: int) -> None:
        """Process arrivals and events (and the passes they call for) up to the first instant at
        or after ``until`` or the horizon; :meth:`run` is ``advance`` to the end and the books
        closed. Stopping and going on gives the same run (bench/philly_state.py pickles a run
        stopped so: the whole trace's backlog, measured where it is)."""
        jobs = self.inputs.jobs
        base = jobs[0].submit_time_s if self.inputs.t_base is None else self.inputs.t_base
        i, next_day, day = self._cursor
        n = len(jobs)
        gap = self.cfg.tick_gap_s
        inf = 1 << 62
        while True:
            t_arr = T0 + jobs[i].submit_time_s - base if i < n else inf
            t_ev = self._events[0][0] if self._events else inf
            t = min(t_arr, t_ev)
            if t >= self.horizon or t == inf or t >= until:
                break
            self._note_demand(t)
            while next_day <= t and day < self.days:
                self.m.backlog_day[day] = self._pending_gpus
                if self._wdays and day % self._wdays == 0:
                    self._record_need(next_day)
                day += 1
                next_day = T0 + day * DAY
            self.now = t
            due = False
            while i < n and T0 + jobs[i].submit_time_s - base == t:
                due = self._arrive(jobs[i]) or due
                i += 1
            while self._events and self._events[0][0] == t:
                _, _, kind, ident = heapq.heappop(self._events)
                due = self._process_event(kind, ident) or due
            if not due:
                continue
            if gap and self._last_tick is not None and t - self._last_tick < gap:
                if self._tick_at is None:
                    self._tick_at = self._last_tick + gap
                    self._push(self._tick_at, "tick", "")
                continue
            self._pass()
            if self.progress is not None and self.m.ticks % 200 == 0:
                self.progress((t - T0) / DAY)
        self._cursor = (i, next_day, day)

    def _record_need(self, at: int) -> None:
        """At a metric-window start, the run time each unfinished allocated-class job still needs.

        Pending: ``remaining`` (with ``--checkpoint restart`` the engine has reset it to the whole
        duration when the job was requeued). Running (or stopping within its grace): ``remaining``
        minus the current attempt's run so far. O(pending allocated + open attempts); needs of a
        window or more are not kept (see :attr:`Metrics.need_at`).
        """
        need: dict[str, int] = {}
        length = self._wdays * DAY
        for key, q in self.queues.items():
            if key[2]:
                for pv in q:
                    w = _tw(self.workloads[pv.id])
                    left = w.duration if w.remaining is None else w.remaining
                    if left < length:
                        need[pv.id] = left
        for a in self.attempts.values():
            w = _tw(self.workloads[a.workload])
            if w.min_runtime > 0:
                left = max(0, (w.duration if w.remaining is None else w.remaining) - (at - a.started_at))
                if left < length:
                    need[w.id] = left
        self.m.need_at[at] = need

    def _finish(self) -> None:
        """Close the books at the horizon: open attempts, unstarted waits, demand."""
        self._set_available(0)
        for a in self.attempts.values():
            w = self.workloads[a.workload]
            w = _tw(w)
            self._account_interval(w, a, a.started_at, self.horizon)
        for w in self.workloads.values():
            w = _tw(w)
            if w.first_start is None:
                self.m.unstarted_waits[size_class(w.gpus)].append(self.horizon - w.submitted_at)
                self.m.class_unstarted[self._wclass.get(w.job_id, "other")].append(self.horizon - w.submitted_at)
                self._note_debug_wait(w, self.horizon - w.submitted_at)
                self.m.waits_by_budget.setdefault(w.budget, []).append(self.horizon - w.submitted_at)
            if w.min_runtime > 0:
                end = w.finished_at if w.finished_at is not None else self.horizon
                self.m.alloc_jobs.append((w.id, w.budget, w.gpus, w.submitted_at, end, w.duration))


# ------------------------------------------------------------------------------------------------
def make_policy(name: str) -> tuple[Callable[[Snapshot], Decisions], bool]:
    """The policy callable for ``name`` and whether it charges all work (peers) or allocated only."""
    if name == "fairway":
        return IncrementalScheduler(), False
    from scheduler.sim import peers

    cls = peers.PEERS.get(name)
    if cls is None:
        raise SimulationError(f"unknown policy {name!r} (use {', '.join(POLICY_NAMES)} or all)")
    return cls(), True


def run_policy(inputs: Inputs, name: str, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Simulate ``inputs`` under one policy; returns its summary (see :func:`summarize`)."""
    policy, charge_all = make_policy(name)
    sim = TraceSim(inputs, policy, charge_all=charge_all, progress=progress)
    m = sim.run()
    return summarize(name, inputs, sim, m)


# ------------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0–100) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(1, math.ceil(p / 100 * len(s)))
    return float(s[k - 1])


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n Σx²); 1 means all equal."""
    if not values:
        return None
    sq = sum(x * x for x in values)
    return (sum(values) ** 2) / (len(values) * sq) if sq else 1.0


def summarize(name: str, inputs: Inputs, sim: TraceSim, m: Metrics) -> dict[str, Any]:
    """The report's figures for one policy (definitions in docs/simulation.md)."""
    cfg = inputs.config
    total = sim.total_gpus * inputs.horizon_s
    avail = sum(m.avail_day)
    occ_a = sum(m.occ_alloc_day)
    occ_u = sum(m.occ_unalloc_day)
    shares = _normalized_shares(inputs.plan)
    wdays = cfg.window_s // DAY
    windows = sim.days // wdays if wdays else 0
    attain: dict[str, list[float | None]] = {}
    saturated_vals: list[float] = []
    all_vals: list[float] = []
    per_window_min: list[float | None] = []
    demand = window_demand(m, T0, wdays * DAY, windows)
    for k in range(windows):
        lo, hi = k * wdays, (k + 1) * wdays
        wmin = None
        for b in sim.leaves:
            ent = shares[b] * sim.total_gpus * cfg.window_s
            dem = demand[k].get(b, 0.0)
            got = sum(m.delivered_day[b][lo:hi])
            share = attainment(got, ent, dem)
            if share is None:
                attain.setdefault(b, []).append(None)
                continue
            val = float(share)
            attain.setdefault(b, []).append(round(val, 4))
            all_vals.append(val)
            if dem >= ent:
                saturated_vals.append(val)
                wmin = val if wmin is None else min(wmin, val)
        per_window_min.append(None if wmin is None else round(wmin, 4))
    jains = []
    for k in range(windows):
        vals = [v[k] for v in attain.values() if k < len(v) and v[k] is not None]
        j = jain([float(x) for x in vals])
        if j is not None:
            jains.append(j)
    backlogged = [
        d
        for d in range(sim.days)
        if m.backlog_day[d] >= sim.total_gpus and (d + 1 >= sim.days or m.backlog_day[d + 1] >= sim.total_gpus)
    ]
    waits_all = {c: m.waits[c] + m.unstarted_waits[c] for c in SIZE_CLASSES}
    hours = 3600.0

    def wstats(vals: list[int]) -> dict[str, float | None]:
        return {f"p{p}": _h(percentile(vals, p)) for p in (50, 90, 99)}

    out = {
        "policy": name,
        "jobs": {
            "submitted": m.submitted,
            "rejected_unplaceable": m.rejected,
            "started": sum(len(v) for v in m.waits.values()),
            "finished": m.finished,
            "never_started": sum(len(v) for v in m.unstarted_waits.values()),
        },
        "availability": round(avail / total, 4),
        "occupancy": round((occ_a + occ_u) / total, 4),
        "occupancy_allocated": round(occ_a / total, 4),
        "occupancy_unallocated": round(occ_u / total, 4),
        "occupancy_backlogged_days": _occ_days(m, backlogged, sim.total_gpus),
        "backlogged_days": backlogged,
        "impact": round(occ_a / (occ_a + occ_u), 4) if occ_a + occ_u else None,
        "attainment": {
            "windows": windows,
            "saturated_min": _r(min(saturated_vals) if saturated_vals else None),
            "saturated_mean": _r(sum(saturated_vals) / len(saturated_vals) if saturated_vals else None),
            "saturated_pairs": len(saturated_vals),
            "min": _r(min(all_vals) if all_vals else None),
            "mean": _r(sum(all_vals) / len(all_vals) if all_vals else None),
            "jain_mean": _r(sum(jains) / len(jains) if jains else None),
            "jain_min": _r(min(jains) if jains else None),
            "per_window_saturated_min": per_window_min,
            "per_budget": attain,
        },
        "wait_hours": {c: wstats(waits_all[c]) for c in SIZE_CLASSES},
        "wait_hours_started_only": {c: wstats(m.waits[c]) for c in SIZE_CLASSES},
        "jobs_by_class": {
            c: {"started": len(m.waits[c]), "never_started": len(m.unstarted_waits[c])} for c in SIZE_CLASSES
        },
        "jct_hours": {
            "mean": _h(sum(m.jct) / len(m.jct) if m.jct else None),
            "p50": _h(percentile(m.jct, 50)),
            "p90": _h(percentile(m.jct, 90)),
        },
        "preemptions": m.preemptions,
        "preemptions_of_allocated": m.preemptions_alloc,
        "preempted_gpu_hours": round(m.preempted_gpu_s / hours, 1),
        "lost_gpu_hours": round(m.lost_gpu_s / hours, 1),
        "fault_kills": m.fault_kills,
        "protected_work_violations": m.violations,
        "ticks": m.ticks,
        "passes": m.passes,
        "wall_s": round(m.wall_s, 1),
        "cpu_s": round(m.cpu_s, 1),
        "sim_days_per_wall_minute": round((inputs.horizon_s / DAY) / (m.wall_s / 60), 2) if m.wall_s else None,
        "series": {
            "availability": _daily(m.avail_day, sim.total_gpus, inputs.horizon_s),
            "occupancy_allocated": _daily(m.occ_alloc_day, sim.total_gpus, inputs.horizon_s),
            "occupancy_unallocated": _daily(m.occ_unalloc_day, sim.total_gpus, inputs.horizon_s),
            "backlog_gpus": m.backlog_day,
            "window_usage_over_entitlement": {
                b: _rolling_ratio(m.delivered_day[b], wdays, shares[b] * sim.total_gpus * cfg.window_s)
                for b in sim.leaves
            },
        },
        "wait_quantiles_hours": {c: _quantiles(waits_all[c]) for c in SIZE_CLASSES},
    }
    out.update(evaluation(inputs, sim, m, demand, shares))
    return out


def demand_ratio(m: Metrics, gpus: int, horizon_s: int) -> dict[str, Any]:
    """Demand ÷ capacity: GPUs asked by pending + running work ÷ the cluster's GPUs, per day (mean
    over the day, and its least value), the days on which the mean exceeds 1 and their median."""
    daily = _daily(m.demand_day, gpus, horizon_s)
    least = [round(x / gpus, 4) if x != math.inf else 0.0 for x in m.demand_min_day]
    over = [x for x in daily if x > 1]
    return {
        "daily": daily,
        "daily_min": least,
        "mean": round(sum(m.demand_day) / (gpus * horizon_s), 4) if horizon_s else None,
        "days_over_capacity": len(over),
        "median_over_capacity": median_over_capacity(daily),
    }


def median_over_capacity(daily: Sequence[float]) -> float | None:
    """The median of the daily demand ÷ capacity over the days on which it exceeds 1 (None: no such day)."""
    over = [x for x in daily if x > 1]
    return round(statistics.median(over), 4) if over else None


def ledger(
    m: Metrics, sim: TraceSim, demand: list[dict[str, float]], shares: dict[str, float], threshold: float = 0.98
) -> dict[str, Any]:
    """The disruption ledger (docs/simulation.md): per leaf budget, GPU-hours owed (per full 7-day
    window min(entitlement, demand), summed), delivered (allocated class, the same windows), run in
    total (any class, whole run), lost to preemption and to host faults (work since the last
    checkpoint), preemptions; per saturated budget-week delivered ÷ owed, uncapped."""
    cfg = sim.cfg
    wdays = cfg.window_s // DAY
    windows = len(demand)
    hours = 3600.0
    per: dict[str, dict[str, float | int]] = {}
    weeks: list[dict[str, Any]] = []
    for b in sim.leaves:
        ent = shares[b] * sim.total_gpus * cfg.window_s
        owed = got = 0.0
        for k in range(windows):
            dem = demand[k].get(b, 0.0)
            g = sum(m.delivered_day[b][k * wdays : (k + 1) * wdays])
            owed += min(ent, dem)
            got += g
            if dem >= ent > 0:
                weeks.append(
                    {"budget": b, "window": k, "owed_gpu_h": round(ent / hours, 1), "ratio": round(g / ent, 4)}
                )  # noqa: E501
        per[b] = {
            "owed_gpu_h": round(owed / hours, 1),
            "delivered_gpu_h": round(got / hours, 1),
            "run_gpu_h": round(m.run_gpu_s_by_budget.get(b, 0) / hours, 1),
            "lost_preemption_gpu_h": round(m.lost_preemption_by_budget.get(b, 0) / hours, 1),
            "lost_faults_gpu_h": round(m.lost_faults_by_budget.get(b, 0) / hours, 1),
            "preemptions": m.preemptions_by_budget.get(b, 0),
        }
    total = {k: round(sum(float(v[k]) for v in per.values()), 1) for k in next(iter(per.values()), {})}
    run_h = sum(m.run_gpu_s_by_budget.values()) / hours
    ratios = [w["ratio"] for w in weeks]
    return {
        "per_budget": per,
        "total": total,
        "preemptions_per_1000_gpu_h": round(1000 * m.preemptions / run_h, 3) if run_h else None,
        "saturated_weeks": weeks,
        "saturated_week_ratio_min": min(ratios) if ratios else None,
        "saturated_weeks_below": sum(1 for r in ratios if r < threshold),
        "threshold": threshold,
    }


def eviction_stats(
    decisions: list[tuple[int, int, int]], victims: list[tuple[int, int]] | None = None
) -> dict[str, Any]:
    """Per preemption decision: GPUs evicted ÷ GPUs requested and GPUs evicted beyond need (max, p99, mean).

    With ``victims`` (per decision: GPUs evicted of allocated attempts, of unallocated ones), the
    beyond-need figures split by the victims' funding class: ``unallocated_only`` (every victim
    unallocated) and ``some_allocated``; each with its decisions, those with GPUs beyond need, their
    sum and maximum, and the mean GPUs requested."""
    ratios = [e / r for e, r, _ in decisions if r > 0]
    beyond = [float(b) for _, _, b in decisions]

    def st(vals: list[float]) -> dict[str, float | None]:
        return {
            "max": _r(max(vals) if vals else None),
            "p99": _r(percentile(vals, 99)),
            "mean": _r(sum(vals) / len(vals) if vals else None),
        }

    return {
        "decisions": len(decisions),
        "evicted_over_requested": st(ratios),
        "evicted_beyond_need": st(beyond),
        "gpus_evicted": sum(e for e, _, _ in decisions),
        "gpus_beyond_need": sum(b for _, _, b in decisions),
        "beyond_need_counts": {str(b): n for b, n in sorted(Counter(b for _, _, b in decisions).items())},
        **({"beyond_need_by_victims": _beyond_by_victims(decisions, victims)} if victims is not None else {}),
    }


def _beyond_by_victims(decisions: list[tuple[int, int, int]], victims: list[tuple[int, int]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, pick in (("unallocated_only", lambda v: v[0] == 0), ("some_allocated", lambda v: v[0] > 0)):
        ds = [d for d, v in zip(decisions, victims, strict=True) if pick(v)]
        out[key] = {
            "decisions": len(ds),
            "with_beyond_need": sum(1 for _, _, b in ds if b > 0),
            "gpus_beyond_need": sum(b for _, _, b in ds),
            "max_beyond_need": max((b for _, _, b in ds), default=None),
            "mean_requested": _r(sum(r for _, r, _ in ds) / len(ds)) if ds else None,
        }
    return out


def evaluation(
    inputs: Inputs, sim: TraceSim, m: Metrics, demand: list[dict[str, float]], shares: dict[str, float]
) -> dict[str, Any]:
    """Issue 16's figures: demand ÷ capacity, busy days, waits per workload class, the ledger, evictions."""
    dr = demand_ratio(m, sim.total_gpus, inputs.horizon_s)
    busy = [d for d, x in enumerate(dr["daily_min"]) if x >= 1 and (d + 1) * DAY <= inputs.horizon_s]
    occ = sum(m.occ_alloc_day[d] + m.occ_unalloc_day[d] for d in busy)
    avail = sum(m.avail_day[d] for d in busy)
    waits = {c: m.class_waits[c] + m.class_unstarted[c] for c in WORKLOAD_CLASSES}

    def st(c: str) -> dict[str, Any]:
        vals = waits[c]
        out: dict[str, Any] = {f"p{p}": percentile(vals, p) for p in (50, 90, 99)}
        out["started"] = len(m.class_waits[c])
        out["never_started"] = len(m.class_unstarted[c])
        return out

    return {
        "demand_ratio": dr,
        "busy_days": busy,
        "occupancy_of_available_busy_days": round(occ / avail, 4) if avail else None,
        "wait_s_by_class": {c: st(c) for c in WORKLOAD_CLASSES},
        "wait_quantiles_s_by_class": {c: [x * 3600 for x in _quantiles(waits[c])] for c in WORKLOAD_CLASSES},
        "debug_wait_s_by_funding": {k: _wait_summary(v) for k, v in m.debug_waits_by_funding.items()},
        "class_run_gpu_h": {c: round(v / 3600, 1) for c, v in m.class_run_gpu_s.items()},
        "ledger": ledger(m, sim, demand, shares),
        "evictions": eviction_stats(m.decisions, m.decision_victims),
    }


def _wait_summary(vals: list[int]) -> dict[str, Any]:
    """Jobs, p50/p90/p99 wait (s) and the fraction that waited at most 30 s (the grace) and 60 s."""
    n = len(vals)
    return {
        "jobs": n,
        **{f"p{p}": percentile(vals, p) for p in (50, 90, 99)},
        "within_30s": round(sum(1 for v in vals if v <= 30) / n, 4) if n else None,
        "within_60s": round(sum(1 for v in vals if v <= 60) / n, 4) if n else None,
    }


def _quantiles(values: list[int], points: int = 200) -> list[float]:
    """``points`` + 1 evenly spaced quantiles (0 to 100 %) in hours, for CDF plots."""
    if not values:
        return []
    s = sorted(values)
    return [round(s[min(len(s) - 1, round(i / points * (len(s) - 1)))] / 3600, 3) for i in range(points + 1)]


def _daily(series: list[float], gpus: int, horizon_s: int) -> list[float]:
    """GPU-seconds per day as fractions of the day's registered GPU-time (the last day may be partial)."""
    out = []
    for d, x in enumerate(series):
        seconds = min(DAY, horizon_s - d * DAY)
        out.append(round(x / (gpus * seconds), 4) if seconds > 0 else 0.0)
    return out


def _occ_days(m: Metrics, days: list[int], gpus: int) -> float | None:
    if not days:
        return None
    occ = sum(m.occ_alloc_day[d] + m.occ_unalloc_day[d] for d in days)
    return round(occ / (gpus * DAY * len(days)), 4)


def _rolling_ratio(daily: list[float], wdays: int, ent: float) -> list[float | None]:
    out: list[float | None] = []
    run = 0.0
    for d, x in enumerate(daily):
        run += x
        if d >= wdays:
            run -= daily[d - wdays]
        out.append(round(run / ent, 4) if d + 1 >= wdays and ent else None)
    return out


def _normalized_shares(plan: BudgetPlan) -> dict[str, float]:
    from scheduler.policy.tree import BudgetTree

    tree = BudgetTree(plan.budgets)
    return {k: float(v) for k, v in tree.normalized_shares(set(tree.budgets)).items()}


def _h(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 3600, 3)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _shown_path(path: str) -> str:
    """A path inside the repository relative to it (reports are committed), others as given."""
    try:
        return str(Path(path).resolve().relative_to(DEFAULT_TRACE.parents[2]))
    except ValueError:
        return str(path)


def describe_inputs(inputs: Inputs) -> dict[str, Any]:
    """The run's inputs in words and numbers, for the report."""
    cfg = inputs.config
    return {
        "trace": _shown_path(cfg.trace),
        "jobs": len(inputs.jobs),
        "days": round(inputs.horizon_s / DAY, 3),
        "hosts": cfg.hosts,
        "gpus_per_host": cfg.gpus_per_host,
        "gpus": cfg.hosts * cfg.gpus_per_host,
        "budgets": inputs.plan.source,
        "leaves": len(inputs.plan.leaves),
        "min_runtime_rule": f"{cfg.min_runtime_rule} ({inputs.min_rule.describe()})",
        "unallocated_rule": f"{cfg.unallocated_rule} ({inputs.unalloc_rule.describe()})",
        "checkpoint": cfg.checkpoint,
        "fault_rate_per_host_day": cfg.fault_rate,
        "repair_s": cfg.repair_s,
        "grace_s": cfg.grace_s,
        "window_s": cfg.window_s,
        "depth": cfg.depth,
        "tick_gap_s": cfg.tick_gap_s,
        "seed": cfg.seed,
    }


def simulate(
    config: SimConfig, policies: Sequence[str], progress_factory: Callable[[str, float], Any] | None = None
) -> dict[str, Any]:
    """Validate inputs, then run each policy; returns the whole report as a JSON-ready dict."""
    for p in policies:
        if p not in POLICY_NAMES:
            raise SimulationError(f"unknown policy {p!r} (use {', '.join(POLICY_NAMES)} or all)")
    inputs = prepare(config)
    results = []
    for p in policies:
        bar = progress_factory(p, inputs.horizon_s / DAY) if progress_factory else None
        results.append(run_policy(inputs, p, progress=bar))
    return {"inputs": describe_inputs(inputs), "policies": results}
