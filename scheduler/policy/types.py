"""Plain data the policy consumes and produces (DESIGN.md §3).

Everything here is immutable input or a plain output record. Times are integer
seconds (server clock, e.g. UNIX epoch seconds); GPU amounts are integers; usage
is in integer GPU-seconds, so every comparison in the policy is exact.

A GPU is addressed as ``(host_name, gpu_index)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

GpuRef = tuple[str, int]
"""One GPU: ``(host name, GPU index on that host)``."""


class HostState(StrEnum):
    """Host states of DESIGN.md §6."""

    ACTIVE = "active"
    CORDONED = "cordoned"
    DRAINING = "draining"
    DRAINED = "drained"
    OFFLINE = "offline"


class GpuHealth(StrEnum):
    """GPU health of DESIGN.md §4; only ``unhealthy`` leaves placement."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"


class StopReason(StrEnum):
    """Why the scheduler stops an attempt (a subset of attempt end reasons, §4)."""

    PREEMPTED = "preempted"
    DRAINED = "drained"
    GPU_FAULT = "gpu_fault"


class PendingReason(StrEnum):
    """Pending reason codes of DESIGN.md §3.8, in order of precedence."""

    UNSCHEDULABLE = "unschedulable"
    DEPENDENCY = "dependency"
    HELD = "held"
    BUDGET_CAPPED = "budget_capped"
    AWAITING_PREEMPTION = "awaiting_preemption"
    RESERVED_FOR_OTHER = "reserved_for_other"
    PROTECTED_WORK = "protected_work"
    FAIR_SHARE = "fair_share"
    INSUFFICIENT_GPUS = "insufficient_gpus"


class Hold(StrEnum):
    """A workload's own hold (docs/jobs.md "Hold and release"; Slurm's ``scontrol hold``): a user
    hold (its owner or a budget manager) or an admin hold. A held workload never starts: reason
    ``held`` (§3.8, after ``unschedulable`` and ``dependency``)."""

    NONE = ""
    USER = "user"
    ADMIN = "admin"


class OnCap(StrEnum):
    """What a capped budget's new attempts do (§3.7)."""

    DOWNGRADE = "downgrade"  # run as unallocated ("unfunded")
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Host:
    """A GPU host of one cluster.

    ``gpu_health`` maps GPU index → health; every index of the host is present.
    All GPUs of a host are of one ``model``. ``drain_now`` marks a drain that
    ignores protection (an audited admin action).
    """

    name: str
    model: str
    gpu_health: Mapping[int, GpuHealth]
    state: HostState = HostState.ACTIVE
    labels: Mapping[str, str] = field(default_factory=dict)
    drain_now: bool = False
    cpus: int | None = None
    """CPUs the host offers (its agent's report); None: unknown, no CPU constraint (§3.3)."""
    memory: int | None = None
    """Memory in bytes the host offers; None: unknown, no memory constraint (§3.3)."""
    drain_at: int | None = None
    """The instant of a drain scheduled for later (docs/deploy.md "Scheduled drains"); None: none.
    Before it the host starts no allocated work whose protection would end after it
    (``PassState.host_allowed``); at it the tick drains the host."""

    @property
    def size(self) -> int:
        """Number of GPUs registered on the host."""
        return len(self.gpu_health)


@dataclass(frozen=True, slots=True)
class Budget:
    """A node of the share tree. ``key`` is unique; ``parent`` is a key or None (root).

    ``capped`` says the budget's allocated usage in its cap period has reached the
    cap; ``on_cap`` says what then happens to its new attempts.
    """

    key: str
    name: str
    parent: str | None
    shares: int = 1
    archived: bool = False
    hold: bool = False
    capped: bool = False
    on_cap: OnCap = OnCap.DOWNGRADE


@dataclass(frozen=True, slots=True)
class Cap:
    """A budget's cap (§3.7): at most ``limit`` GPU-seconds of allocated usage of its subtree over
    the rolling period ``(t − period, t]`` (seconds). Whether it is reached at an instant is
    :func:`scheduler.policy.caps.capped_at`, the one statement of the rule."""

    budget: str
    limit: int
    period: int

    def reached(self, used: int) -> bool:
        """The cap is reached by ``used`` GPU-seconds in its period (DESIGN.md §3.7: "when its
        allocated usage in the period reaches the cap")."""
        return used >= self.limit


@dataclass(frozen=True, slots=True)
class Workload:
    """A pending workload.

    ``min_runtime`` is in seconds (0 = unallocated). ``submitted_at`` is the
    original submission time (kept across requeues) and ``seq`` the global
    submission sequence number that breaks ties within one second.
    """

    id: str
    budget: str
    gpus: int
    model: str
    min_runtime: int
    submitted_at: int
    seq: int
    cpus: int | None = None
    """CPUs requested per host it runs on; None: the host's per-GPU share (§3.3)."""
    memory: int | None = None
    """Memory in bytes requested per host; None: the host's per-GPU share (§3.3)."""
    waiting: bool = False
    """Its ``after`` list is not met yet (the server judges it): reason ``dependency`` (§3.8)."""
    group: str | None = None
    """Its array group, whose ``%N`` cap (``Snapshot.group_limits``) it counts against."""
    hold: str = Hold.NONE
    """Its own hold (:class:`Hold`: ``""``, ``"user"`` or ``"admin"``): reason ``held`` (§3.8),
    never started, no nomination kept."""

    @property
    def allocated(self) -> bool:
        """True when the workload declares a minimum runtime (is budget-funded)."""
        return self.min_runtime > 0


@dataclass(frozen=True, slots=True)
class Attempt:
    """An open attempt: starting, running or stopping (stop issued, GPUs not yet released).

    ``started_at`` is the agent-confirmed start, or None while ``starting``: a
    starting attempt counts as protected and commits ``gpus × min_runtime``.
    ``allocated`` is False for unallocated (and cap-downgraded) attempts.
    """

    id: str
    workload: str
    budget: str
    gpus: tuple[GpuRef, ...]
    allocated: bool
    min_runtime: int
    started_at: int | None
    stopping: bool = False
    charged_until: int | None = None
    """Charging stops here even if the attempt is still open (host offline since then)."""
    release_at: int | None = None
    """For a stopping attempt: when its GPUs are expected back (stop + grace, seconds); None when
    unknown, taken as now. Reservations count the GPUs from then (§3.5)."""
    cpus: int | None = None
    """Its workload's CPU request per host (None: each host's per-GPU share, §3.3)."""
    memory: int | None = None
    """Its workload's memory request per host in bytes (None: each host's per-GPU share)."""

    @property
    def gpu_count(self) -> int:
        """Number of GPUs the attempt holds."""
        return len(self.gpus)

    @property
    def protected_until(self) -> int | None:
        """End of protection in seconds; None while starting (protected until confirmed)."""
        if not self.allocated:
            return self.started_at if self.started_at is not None else None
        if self.started_at is None:
            return None
        return self.started_at + self.min_runtime

    def protected_at(self, now: int) -> bool:
        """True while the scheduler may not preempt this attempt (§3.4 rule 1)."""
        if not self.allocated:
            return False
        pu = self.protected_until
        return pu is None or now < pu


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """Allocated GPU time charged to ``budget``.

    Either an interval (``gpus`` GPUs held from ``start`` to ``end``, counted
    pro-rata inside the window) or, when ``gpus`` is None, a lump of
    ``gpu_seconds`` charged at instant ``end`` (``start`` ignored).
    """

    budget: str
    start: int
    end: int
    gpus: int | None = None
    gpu_seconds: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one tick of one cluster needs, taken at ``now`` (seconds).

    ``usage`` holds closed allocated intervals and lumps (running attempts add
    their own time). ``nominations`` maps a pending workload id to the GPUs
    being freed for it (§3.4). ``window`` is the lookback W in seconds.
    ``with_reasons`` False (simulations, estimated starts) leaves ``Decisions.pending`` empty
    and lets the pass skip work that only explains (DESIGN.md §3.8 allows it in simulation).
    """

    now: int
    hosts: Sequence[Host]
    budgets: Sequence[Budget]
    attempts: Sequence[Attempt]
    pending: Sequence[Workload]
    usage: Sequence[UsageRecord] = ()
    nominations: Mapping[str, tuple[GpuRef, ...]] = field(default_factory=dict)
    window: int = 7 * 24 * 3600
    max_reservations: int = 8
    with_reasons: bool = True
    group_limits: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Array group → (``%N`` cap, members holding GPUs now): a pass starts a member only while
    the members holding GPUs plus those it started stay below the cap (§3.8 ``dependency``)."""
    caps: Sequence[Cap] = ()
    """The budgets' caps (§3.7). The policy reads only ``Budget.capped``; a producer that moves
    time (the forward simulation of estimates) recomputes it from these and ``cap_records``
    (:func:`scheduler.policy.caps.capped_at`). A budget marked capped without a cap here stays so."""
    cap_records: Sequence[UsageRecord] = ()
    """The allocated usage the caps count besides ``attempts``: of every capped budget's subtree,
    on every cluster, over the longest cap period (closed attempts, usage entries, and open attempts
    of other clusters, whose ``end`` is :data:`scheduler.policy.caps.STILL_RUNNING` while they run)."""


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``workload`` on ``gpus``. ``allocated`` False means it runs unallocated
    (``unfunded`` when an allocated workload was downgraded by its budget's cap)."""

    workload: str
    gpus: tuple[GpuRef, ...]
    allocated: bool
    unfunded: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop ``attempt`` (SIGTERM, grace, SIGKILL) and requeue its workload.

    ``for_workload`` names the preemptor the freed GPUs are nominated for, if any.
    """

    attempt: str
    reason: StopReason
    for_workload: str | None = None


@dataclass(slots=True)
class PendingInfo:
    """Why a workload is still pending, with the numbers behind it (§3.8).

    ``detail`` is JSON-ready and holds only what the pass decided, so it does not change from tick
    to tick while the decision stands: e.g. ``{"budget_key": "3", "budget": "nlp", "rival_key": "5",
    "other_budget": "vision", "protected_until": 1767600000, "host": "h12", "blocking": ["W7"],
    "reserved_for": "W42"}``. Usage and ratios are derived on read (``scheduler.policy.figures``).
    """

    reason: PendingReason
    detail: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class Decisions:
    """The output of one policy pass; applied in one transaction by the caller."""

    starts: list[Start] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    nominations: dict[str, tuple[GpuRef, ...]] = field(default_factory=dict)
    reservations: dict[str, str] = field(default_factory=dict)
    """host name → workload id holding a reservation on it (§3.5)."""
    reserved_start: dict[str, int] = field(default_factory=dict)
    """workload id → earliest start time of its reservation (seconds)."""
    host_states: dict[str, HostState] = field(default_factory=dict)
    """hosts whose state the policy changes (``draining`` → ``drained``)."""
    pending: dict[str, PendingInfo] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True when the pass decided anything that changes state."""
        return bool(self.starts or self.stops or self.host_states)
