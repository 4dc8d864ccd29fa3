"""Clusters, hosts, GPUs, workloads, attempts and their events (DESIGN.md §1, §4, §6)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models, transaction
from django.db.models import Value
from django.db.models.functions import Cast, Concat, Left

from config.memo import ForgettingQuerySet, VersionedMemo
from fairway_cli.numbers import instant_text


class _HardwareQuerySet(ForgettingQuerySet):
    """Bulk writes of hardware fields forget the hardware web processes and ticks keep (``scheduler.hardware_memo``)."""

    def memo(self) -> VersionedMemo:
        from scheduler.hardware_memo import MEMO

        return MEMO


class ClusterQuerySet(_HardwareQuerySet):
    """Every cluster write forgets the clusters a submission resolves from memory
    (``scheduler.hardware_memo.shared_cluster``), whichever fields it names."""

    memo_fields = None


class HostQuerySet(_HardwareQuerySet):
    memo_fields = frozenset({"cluster", "cluster_id", "name", "labels", "removed_at", "cpus", "memory_bytes"})


class GPUQuerySet(_HardwareQuerySet):
    memo_fields = frozenset({"host", "host_id", "index", "model", "removed_at"})

    def registered(self) -> GPUQuerySet:
        """The GPUs in their hosts' inventories: not removed by an approved inventory
        (``removed_at``). A removed host's GPUs are the caller's to leave out (``host__removed_at``)."""
        return self.filter(removed_at__isnull=True)

    def leave_to_history(self) -> int:
        """Free the UUIDs of these rows, GPUs that another host now reports (a machine that joined
        again under another name after its host's removal; a card moved from a removed host, or
        from one whose approved inventory dropped it): each row stays with its old host and index
        for the attempts and samples that name it, its UUID kept behind ``~<id>~`` (the column is
        unique), and the reporting host gets a row of its own. The rows themselves moved (brk44):
        every attempt that had run on the old host then named the new one (its ``hosts`` and
        ``gpus`` on the API, the history, the pages and ``fairway show``)."""
        mark = Concat(Value("~"), Cast("pk", models.CharField()), Value("~"), Left("uuid", 40))
        with transaction.atomic(savepoint=False):
            ids = self.lock_in_id_order(key_change=True)  # the UUID is a key: FOR UPDATE at once
            return self.model._default_manager.filter(pk__in=ids).update(uuid=mark, nominated_for=None) if ids else 0

    def lock_in_id_order(self, *, key_change: bool = False) -> list[int]:
        """Lock these rows as an UPDATE of them would (``FOR NO KEY UPDATE``: attempts' GPU links
        still insert), in id order, in one statement; returns their ids. docs/locking.md: GPU rows
        come last in the lock order, and a transaction that writes several takes them this way
        first (gpu53: an ``UPDATE`` takes them in the order PostgreSQL picks, and the tick's two
        nomination UPDATEs, the heartbeat's samples, deadlocked with an ordered writer). Only the
        GPU rows (``of=self``: no host joined by a filter). ``key_change``: ``FOR UPDATE``, for a
        writer of the UUID (a key: its UPDATE would upgrade the lock while holding the others).
        Opens a transaction when none is open."""
        with transaction.atomic(savepoint=False):
            locking = self.select_for_update(no_key=not key_change, of=("self",))
            return list(locking.order_by("pk").values_list("pk", flat=True))

    def bulk_update_in_id_order(self, objs: list[GPU], fields: list[str]) -> None:
        """``bulk_update(objs, fields)``, its rows locked first by :meth:`lock_in_id_order` (Django's
        ``bulk_update`` is an ``UPDATE … WHERE id IN (…)``, in the order PostgreSQL picks)."""
        with transaction.atomic(savepoint=False):
            self.filter(pk__in=[o.pk for o in objs]).lock_in_id_order()
            self.bulk_update(objs, fields)

    def update_in_id_order(self, **fields: Any) -> int:
        """``update(**fields)`` of these rows, locked first by :meth:`lock_in_id_order` (no UPDATE
        when none matched: one query, as before, for the common empty case)."""
        with transaction.atomic(savepoint=False):
            ids = self.lock_in_id_order()
            return self.model._default_manager.filter(pk__in=ids).update(**fields) if ids else 0


class Cluster(models.Model):
    """A pool of hosts scheduled together; fair share is computed per cluster."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    allow_root_workloads = models.BooleanField(
        default=False,
        help_text="let attempts run as root (uid 0) on this cluster's hosts; a host's agent must allow it too "
        "(isolation.allow_root). Off: an attempt that would run as root fails to start (docs/isolation.md)",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    estimated_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="the snapshot instant of its last estimates run: work pending since then awaits the next run "
        "(scheduler.estimates.estimate_coverage, est61)",
    )

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Host(models.Model):
    """A GPU machine running the Fairway agent. States of DESIGN.md §6."""

    class State(models.TextChoices):
        ACTIVE = "active"
        CORDONED = "cordoned"
        DRAINING = "draining"
        DRAINED = "drained"
        OFFLINE = "offline"

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="hosts")
    name = models.CharField(max_length=128, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE, db_index=True)
    # The state to return to when an offline host's agent comes back.
    state_before_offline = models.CharField(max_length=16, choices=State.choices, blank=True)
    drain_now = models.BooleanField(default=False, help_text="drain ignoring protection (audited)")
    labels = models.JSONField(default=dict, blank=True)
    token_hash = models.CharField(max_length=64, unique=True, help_text="sha256 hex of the host token")
    agent_version = models.CharField(max_length=32, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True, help_text="left the cluster; no longer registered")
    # One live agent connection per host (docs/deploy.md, "The agent link"): every accepted
    # connection, token rotation and revocation bumps it; a connection of an older generation
    # is closed and is sent no command.
    link_generation = models.BigIntegerField(default=0, editable=False)
    # A hello whose GPUs differ from the registered inventory: what it reported, awaiting an
    # admin's approval ({"gpus": [...], "cordoned": bool}); None when the hello matched.
    pending_inventory = models.JSONField(null=True, blank=True, editable=False)
    # How attempts run there, from the agent's last hello ({"mode", "identity", "cgroup",
    # "warnings"}, docs/isolation.md); None: an agent older than the field (or never connected).
    isolation = models.JSONField(null=True, blank=True, editable=False)
    # CPUs and memory the agent reports in its hello (DESIGN.md §3.3); null: not reported yet
    # (an agent older than the fields), no CPU or memory constraint there (docs/resources.md).
    cpus = models.PositiveIntegerField(null=True, blank=True, editable=False)
    memory_bytes = models.BigIntegerField(null=True, blank=True, editable=False)
    # A drain an admin scheduled for a later time (docs/deploy.md, "Scheduled drains"): the tick
    # applies it at ``drain_at`` as the immediate one (``services.apply_due_drains``); null: none.
    drain_at = models.DateTimeField(null=True, blank=True, db_index=True, editable=False)
    drain_at_now = models.BooleanField(default=False, editable=False, help_text="the scheduled drain is a drain now")
    drain_at_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    drain_at_reason = models.CharField(max_length=500, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = HostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GPU(models.Model):
    """One device on a host. Only ``unhealthy`` GPUs and ones an approved inventory removed leave placement (§4)."""

    class Health(models.TextChoices):
        HEALTHY = "healthy"
        DEGRADED = "degraded"
        UNHEALTHY = "unhealthy"

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=64, db_index=True)
    memory_mb = models.PositiveIntegerField(default=0)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.HEALTHY)
    removed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="left its host's inventory (an approved inventory without it): out of placement and of "
        "the registered GPUs; the attempts that ran on it keep naming it (docs/resources.md)",
    )
    last_sample = models.JSONField(default=dict, blank=True, help_text="latest NVML sample from the agent")
    # GPUs being freed for a preemptor (DESIGN.md §3.4): nobody else may take them.
    nominated_for = models.ForeignKey(
        "Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="nominated_gpus"
    )

    objects = GPUQuerySet.as_manager()

    class Meta:
        ordering = ["host__name", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_host_index")]
        verbose_name = "GPU"  # the admin's index said "Gpus" (try42)
        verbose_name_plural = "GPUs"

    def __str__(self) -> str:
        return f"{self.host.name}:{self.index}"


class Workload(models.Model):
    """What a researcher submits. ``min_runtime_s`` = 0 makes it unallocated."""

    class State(models.TextChoices):
        PENDING = "pending"
        STARTING = "starting"
        RUNNING = "running"
        PREEMPTING = "preempting"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELED = "canceled"

    FINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELED)

    name = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workloads")
    budget = models.ForeignKey("budgets.Budget", on_delete=models.PROTECT, related_name="workloads")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="workloads")
    gpu_model = models.CharField("GPU model", max_length=64)
    gpu_count = models.PositiveIntegerField("GPU count", validators=[MinValueValidator(1)])
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(help_text="argv list")
    env = models.JSONField(default=dict, blank=True, help_text='{"NAME": {"value": "...", "secret": false}}')
    min_runtime_s = models.PositiveIntegerField(help_text="minimum runtime in seconds; 0 = unallocated")
    submitted_at = models.DateTimeField(db_index=True, help_text="original submission time, kept across requeues")
    seq = models.BigIntegerField(null=True, blank=True, unique=True, help_text="submission sequence number")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    pending_reason = models.CharField(max_length=32, blank=True)
    pending_detail = models.JSONField(default=dict, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    no_start_found = models.BooleanField(
        default=False,
        help_text="the last estimates run searched a whole window and found no start (estimated_start is then empty)",
    )
    estimate_unfunded = models.BooleanField(
        default=False,
        help_text="the last estimates run starts it unfunded at estimated_start: allocated work its budget's "
        "downgrade cap runs as unallocated (DESIGN.md §3.7); false with no estimated start",
    )
    estimate_told = models.DateTimeField(
        null=True,
        blank=True,
        help_text="the estimated start an estimate_moved is judged from: the last one told, or the first one given",
    )
    start_failures = models.PositiveIntegerField(default=0)
    duration_hint_s = models.PositiveIntegerField(null=True, blank=True, help_text="informational (e.g. trace replay)")
    # Requests per host it runs on (DESIGN.md §3.3); null: the host's per-GPU share.
    cpus = models.PositiveIntegerField(null=True, blank=True, help_text="CPUs per host; empty: per-GPU share")
    memory_bytes = models.BigIntegerField(null=True, blank=True, help_text="memory per host; empty: per-GPU share")
    shared_memory_bytes = models.BigIntegerField(null=True, blank=True, help_text="shm size; empty: runtime default")
    finished_at = models.DateTimeField(null=True, blank=True)
    # Mounts, wall-time limit, retries, arrays (docs/jobs.md). ``mounts`` is resolved at
    # submission from the cluster's catalog: [{"name", "host_path", "container_path", "read_only"}].
    mounts = models.JSONField(default=list, blank=True, help_text="storage mounts resolved at submission")
    max_runtime_s = models.PositiveIntegerField(null=True, blank=True, help_text="wall-time limit per attempt")
    retries = models.PositiveIntegerField(default=0, help_text="re-runs allowed after a non-zero exit")
    retries_used = models.PositiveIntegerField(default=0)
    group = models.ForeignKey("ArrayGroup", null=True, blank=True, on_delete=models.PROTECT, related_name="members")
    array_index = models.PositiveIntegerField(null=True, blank=True)
    # A resubmission's original (docs/jobs.md "Submit again"); its resubmissions: ``resubmissions``.
    resubmitted_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="resubmissions",
        help_text="the workload this one was submitted again from",
    )
    # Its own hold (docs/jobs.md "Hold and release"; Slurm's ``scontrol hold``): a held pending
    # workload never starts (reason ``held``); set and cleared only by scheduler.services.
    hold = models.CharField(
        max_length=8,
        choices=[("", "not held"), ("user", "user hold"), ("admin", "admin hold")],  # policy.types.Hold
        default="",
        blank=True,
        help_text="user: its owner or a budget manager held it (they may release it); admin: an admin did",
    )
    held_at = models.DateTimeField(null=True, blank=True)
    held_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    spec_version = models.PositiveIntegerField(
        default=0,
        help_text="raised by every update, hold and release of a pending workload (docs/jobs.md, 'Changing a "
        "pending workload'): a tick whose snapshot read another version starts nothing for it",
    )

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["cluster", "state"], name="workload_cluster_state"),
            # a submission counts its owner's live work (services.submitted_count, lim42)
            models.Index(fields=["owner", "state"], name="workload_owner_state"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def allocated(self) -> bool:
        return self.min_runtime_s > 0


class ArrayGroup(models.Model):
    """The workloads of one ``--array`` submission: listed and canceled together; ``limit``
    (``%N``) caps how many of them run at once (DESIGN.md §3.8 ``dependency``)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="array_groups")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="array_groups")
    name = models.CharField(max_length=200)
    spec = models.CharField(max_length=64, help_text="the array as submitted, e.g. 0-99%10")
    limit = models.PositiveIntegerField(null=True, blank=True, help_text="at most this many members run at once")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"array {self.name} (#{self.pk})"


class WorkloadDependency(models.Model):
    """``workload`` waits until ``after`` is final; ``ok``: and succeeded, else it is canceled."""

    class Condition(models.TextChoices):
        OK = "ok"
        ANY = "any"

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="dependencies")
    after = models.ForeignKey(Workload, on_delete=models.PROTECT, related_name="dependents")
    condition = models.CharField(max_length=8, choices=Condition.choices, default=Condition.OK)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workload", "after"], name="dependency_unique_pair")]

    def __str__(self) -> str:
        return f"{self.workload_id} after {self.after_id}:{self.condition}"


class Mount(models.Model):
    """A storage mount of a cluster's catalog, set by an admin (docs/jobs.md "Mounts").

    ``host_path`` may contain ``{user}`` (access ``home``): it expands to the submitting user's
    name, which must be a plain POSIX-style name, so it cannot escape the directory.
    """

    class Access(models.TextChoices):
        ALL = "all"
        BUDGETS = "budgets"
        HOME = "home"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="mounts")
    name = models.SlugField(max_length=64, help_text="what workloads ask for (-v NAME)")
    host_path = models.CharField(max_length=1024, help_text="absolute; {user} for access 'home'")
    container_path = models.CharField(max_length=1024, help_text="absolute path inside the container")
    read_only = models.BooleanField(default=True)
    access = models.CharField(max_length=16, choices=Access.choices, default=Access.ALL)
    budgets = models.ManyToManyField(
        "budgets.Budget", blank=True, related_name="mounts", help_text="access 'budgets': members of these (or below)"
    )
    description = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="mount_unique_cluster_name")]

    def __str__(self) -> str:
        return f"{self.cluster}:{self.name}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from scheduler.mounts import container_path_problem, path_problem

        errors = {}
        problem = path_problem(self.host_path, allow_user=True)
        if problem:
            errors["host_path"] = problem
        problem = container_path_problem(self.container_path)
        if problem:
            errors["container_path"] = problem
        has_user = "{user}" in self.host_path
        if self.access == self.Access.HOME and not has_user:
            errors["host_path"] = "access 'home' needs {user} in the host path"
        if self.access != self.Access.HOME and has_user:
            errors["host_path"] = "{user} is only for access 'home'"
        if errors:
            raise ValidationError(errors)


class NotificationSettings(models.Model):
    """What a user is told, per event kind and channel (docs/jobs.md "Notifications")."""

    KINDS = ("started", "succeeded", "failed", "preempted", "estimate_moved", "idle")

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_settings"
    )
    email_kinds = models.JSONField(default=list, blank=True, help_text="event kinds sent by email")
    webhook_kinds = models.JSONField(default=list, blank=True, help_text="event kinds sent to the webhook")
    webhook_url = models.URLField(max_length=500, blank=True, help_text="Slack-compatible incoming webhook")

    class Meta:
        verbose_name_plural = "notification settings"  # the admin said "Notification settingss"

    def __str__(self) -> str:
        return f"notifications of {self.user_id}"

    def clean(self) -> None:
        """The API's and the web form's rules, for the admin's form: it took any JSON for the kinds,
        and ``5`` there made every start and exit report of the user's work fail (``kind in 5``, in
        the transaction recording the ``started``, ``succeeded`` or ``failed`` event): an exited
        attempt stayed running, holding its GPUs (brk40)."""
        from django.core.exceptions import ValidationError
        from django.utils.text import capfirst

        from scheduler.notifications import clean_kinds, webhook_problem, webhook_without_url

        problems: dict[str, str] = {}
        for name in ("email_kinds", "webhook_kinds"):
            try:
                setattr(self, name, clean_kinds(getattr(self, name)))
            except ValueError as exc:
                problems[name] = f"{name} is {exc}." if "unknown" not in str(exc) else f"{exc}."
        self.webhook_url = (self.webhook_url or "").strip()
        if self.webhook_url and (problem := webhook_problem(self.webhook_url)):
            problems["webhook_url"] = f"Webhook refused: {problem}."
        elif "webhook_kinds" not in problems and (
            # the admin's form: its field's label (lt61: it said the API's webhook_url)
            problem := webhook_without_url(
                self.webhook_kinds, self.webhook_url, field=capfirst(self._meta.get_field("webhook_url").verbose_name)
            )
        ):
            problems["webhook_url"] = f"{problem[0].upper()}{problem[1:]}."
        if problems:
            raise ValidationError(problems)


class Notification(models.Model):
    """One message for one event and channel; ``key`` makes delivery idempotent (once per event)."""

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    key = models.CharField(max_length=64, unique=True, help_text="idempotency key: event and channel")
    event = models.ForeignKey("WorkloadEvent", on_delete=models.CASCADE, related_name="notifications")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    tries = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.key


WIRE_ID_MAX = 2**63 - 1


def new_wire_id() -> int:
    """A random attempt identity for the agent link, in [1, 2^63 - 1] (see ``Attempt.wire_id``)."""
    return secrets.randbelow(WIRE_ID_MAX) + 1


class Attempt(models.Model):
    """One run of a workload on specific GPUs (a gang's parts form one attempt)."""

    class EndReason(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELED = "canceled"
        PREEMPTED = "preempted"
        DRAINED = "drained"
        GPU_FAULT = "gpu_fault"
        LOST = "lost"
        FAILED_TO_START = "failed_to_start"
        TIMEOUT = "timeout"

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="attempts")
    # The attempt's identity on the agent link (the protocol's ``attempt_id``, the agent's record
    # and ``FAIRWAY_ATTEMPT``), random rather than the primary key: ids restart from a dump's
    # value after a restore, agents keep their records of the old ones (docs/deploy.md §7).
    wire_id = models.BigIntegerField(unique=True, default=new_wire_id, editable=False)
    number = models.PositiveIntegerField(help_text="1 for the first attempt of the workload")
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="attempts", help_text="first (rank 0) host")
    gpus = models.ManyToManyField(GPU, through="AttemptGPU", related_name="attempts", verbose_name="GPUs")
    allocated = models.BooleanField()
    unfunded = models.BooleanField(default=False, help_text="allocated workload run unallocated by its budget's cap")
    placed_at = models.DateTimeField(help_text="when the scheduler decided the start")
    started_at = models.DateTimeField(null=True, blank=True, help_text="agent-confirmed start")
    protected_until = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=32, blank=True, choices=EndReason.choices)
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end_reason = models.CharField(max_length=32, blank=True, choices=EndReason.choices)
    exit_code = models.IntegerField(null=True, blank=True)
    charged_gpu_seconds = models.BigIntegerField("charged GPU-seconds", default=0)
    idle_told_since = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="the start of the idle stretch its owner was last told of (scheduler.idle): told once a stretch",
    )
    efficiency_kept = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="an ended attempt's efficiency, kept before its GPU minute samples are pruned "
        "(scheduler.efficiency.keep_efficiency); none: read from the samples",
    )

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["workload", "number"], name="attempt_unique_number")]

    def __str__(self) -> str:
        return f"attempt {self.pk} of workload {self.workload_id}"

    def host_names(self) -> list[str]:
        """Every host the attempt holds GPUs on, rank 0 first: a gang's parts (``h1``, ``h2``), one
        host for most. The one reading the API, the pages and the CLI show (``hosts``); callers
        that list many attempts prefetch ``gpu_links__gpu__host``."""
        links = self.ordered_gpu_links()
        return list(dict.fromkeys(link.gpu.host.name for link in links)) or [self.host.name]

    def ordered_gpu_links(self) -> list[AttemptGPU]:
        """The attempt's GPU links in rank, then host and index order: the one order the API's
        ``gpus``, the page's attempts table and ``fairway show`` list them in (rank alone left the
        GPUs of one host in the database's order: ``h:1 h:0`` on the page, brk31)."""
        return sorted(self.gpu_links.all(), key=lambda link: (link.rank, link.gpu.host.name, link.gpu.index))

    @property
    def is_open(self) -> bool:
        return self.ended_at is None

    @property
    def charged_until_release(self) -> bool:
        """Whether its GPU-time is charged until its GPUs are released: allocated, and not made
        unfunded by its budget's cap. The one rule of the API's ``stop`` and the page's cancel
        message (try50: the page read ``allocated`` alone and told an unfunded attempt it was charged)."""
        return self.allocated and not self.unfunded


class AttemptGPU(models.Model):
    """A GPU held by an attempt. At most one open row per GPU: no double-booking (DESIGN.md §4)."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="gpu_links")
    gpu = models.ForeignKey(GPU, on_delete=models.PROTECT, related_name="attempt_links", verbose_name="GPU")
    rank = models.PositiveIntegerField(default=0, help_text="node rank of a gang part")
    open = models.BooleanField(default=True)
    released_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when a gang's part released this GPU before its attempt ended (its exit); "
        "empty: held until the attempt's end",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu"], condition=models.Q(open=True), name="one_open_attempt_per_gpu"),
            models.UniqueConstraint(fields=["attempt", "gpu"], name="attemptgpu_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} in attempt {self.attempt_id}"


class EventBase(models.Model):
    """An audit entry: what happened (``kind``), when, and who or what caused it."""

    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=32)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        abstract = True
        ordering = ["at", "id"]


class WorkloadEvent(EventBase):
    """An entry in a workload's event log (submitted, started, preempted, ...)."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events")

    class Meta(EventBase.Meta):
        # In the order they were recorded, as every surface lists them (``api.serializers.EVENT_ORDER``):
        # ``at`` is the instant each names and need not grow with the id (a tick stamps its start).
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} of workload {self.workload_id} at {instant_text(self.at, absolute=True)}"


class HostEvent(EventBase):
    """An entry in a host's audit log (state changes, faults, drains) with who caused it."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="events")

    class Meta(EventBase.Meta):
        # In the order they were recorded, as a workload's: ``at`` need not grow with the id (a
        # tick stamps its events with its start, a heartbeat with its receipt, before the lock).
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} of host {self.host_id} at {instant_text(self.at, absolute=True)}"


class JoinToken(models.Model):
    """A single-use, expiring secret that lets a new host join ``cluster`` (DESIGN.md §5, install).

    Only the SHA-256 hex of the token is stored; the plaintext is shown once when it is created.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="join_tokens")
    token_hash = models.CharField(max_length=64, unique=True, help_text="sha256 hex of the join token")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(max_length=256, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)
    host = models.ForeignKey(
        Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="the host that joined"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"join token {self.pk} for {self.cluster_id}"


class GpuMinuteSample(models.Model):
    """Per-minute roll-up of one GPU's heartbeat samples (raw heartbeats are not kept).

    Written by ``scheduler.metrics.record_samples`` from ``record_heartbeat``; pruned after
    ``FAIRWAY_GPU_METRICS_RETENTION_DAYS`` by the ``prune_gpu_metrics`` actor.
    """

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="minute_samples", verbose_name="GPU")
    minute = models.DateTimeField(db_index=True, help_text="start of the minute (UTC, seconds zero)")
    samples = models.PositiveIntegerField(default=0)
    utilization_sum = models.FloatField(default=0.0, help_text="sum of utilization_pct over the samples that read it")
    utilization_samples = models.PositiveIntegerField(
        default=0, help_text="the samples that read utilization_pct (none: the minute's utilization is not measured)"
    )
    memory_used_max_mb = models.BigIntegerField(null=True, blank=True, help_text="none: not read")
    temperature_max_c = models.FloatField(null=True, blank=True)
    power_sum_w = models.FloatField(default=0.0, help_text="sum of power_w over the samples that read it")
    health_worst = models.CharField(max_length=16, choices=GPU.Health.choices, default=GPU.Health.HEALTHY)

    class Meta:
        ordering = ["gpu_id", "minute"]
        constraints = [models.UniqueConstraint(fields=["gpu", "minute"], name="gpuminute_unique_gpu_minute")]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} at {self.minute:%Y-%m-%d %H:%M}"

    @property
    def utilization_mean(self) -> float | None:
        """Mean utilization of the samples that read it; None: not measured (never 0 %)."""
        return self.utilization_sum / self.utilization_samples if self.utilization_samples else None

    @property
    def power_mean_w(self) -> float:
        """Over every sample: one that did not read the power adds nothing (a lower bound then;
        no count of its own, which would split the SQLite flush's batch: tests/test_gateway_batch.py)."""
        return self.power_sum_w / self.samples if self.samples else 0.0


def cluster_label(cluster_id: int) -> str:
    """A cluster as a log line names it: ``lab (1)``, its name with its id (``#1`` once it is gone);
    the one label of the worker's lines that know only the id (fin43)."""
    name = Cluster.objects.filter(pk=cluster_id).values_list("name", flat=True).first()
    return f"{name} ({cluster_id})" if name is not None else f"#{cluster_id}"


class ClusterHourlyMetrics(models.Model):
    """One hour of one cluster in GPU-seconds: the four-metric pyramid of DESIGN.md §8 (``scheduler.pyramid``).

    ``registered ≥ available ≥ occupied (allocated + unallocated) ≥ measured ≥ utilized`` by construction.
    """

    # PROTECT (sec63): a cluster with usage history is kept; its hours are the statements' and metrics' past
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="hourly_metrics")
    hour = models.DateTimeField(help_text="start of the hour (UTC)")
    registered_gpu_s = models.FloatField("registered GPU-seconds", default=0.0)
    available_gpu_s = models.FloatField(
        "available GPU-seconds", default=0.0, help_text="GPU healthy and host active (sampled, see pyramid)"
    )
    allocated_gpu_s = models.FloatField(
        "allocated GPU-seconds", default=0.0, help_text="held by allocated (funded) attempts"
    )
    unallocated_gpu_s = models.FloatField(
        "unallocated GPU-seconds", default=0.0, help_text="held by unallocated or unfunded attempts"
    )
    measured_gpu_s = models.FloatField(
        "measured GPU-seconds",
        default=0.0,
        help_text="occupied GPU-seconds whose NVML utilization was measured (imported history: none)",
    )
    utilized_gpu_s = models.FloatField(
        "utilized GPU-seconds", default=0.0, help_text="measured GPU-seconds × NVML utilization"
    )
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster", "hour"]
        constraints = [models.UniqueConstraint(fields=["cluster", "hour"], name="cluster_hourly_metrics_unique")]

    def __str__(self) -> str:
        return f"{self.cluster_id} @ {self.hour:%Y-%m-%d %H:00}"
