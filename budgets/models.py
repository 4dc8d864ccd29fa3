"""The share tree (organisation → programs → projects) and the usage ledger."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Coalesce
from django.utils import timezone

from budgets.rules import Refusal, budget_name_problem, parent_problem
from config.memo import ForgettingQuerySet, VersionedMemo
from fairway_cli.numbers import instant_text


class TreeMemoQuerySet(ForgettingQuerySet):
    """Bulk writes forget what the web processes keep under the tree's version
    (``budgets.tree_memo``: the tree and the memberships), as saves and deletes do."""

    def memo(self) -> VersionedMemo:
        from budgets.tree_memo import MEMO

        return MEMO


class BudgetQuerySet(TreeMemoQuerySet):
    """Bulk writes of budgets forget the kept tree (:class:`TreeMemoQuerySet`)."""


def placement_problem(name: str | None, parent: Budget | None, pk: int | None = None) -> Refusal | None:
    """Why a live budget named ``name`` cannot be placed under ``parent`` (None: as a root), as
    ``(code, field, message)``, or None when it can; ``pk``: the budget itself when it is saved
    again (it is no sibling or root besides itself). ``name`` None checks the root rule only.

    The one rule of ``do_create_budget`` and the admin (``Budget.clean``): the parent takes
    sub-budgets (:func:`budgets.rules.parent_problem`, which the memory scenario backend calls too); no live
    sibling has the name; and the tree has exactly one root, archived or not (the
    snapshot keeps archived budgets): a second one made every tick and the budget tree fail ("the
    share tree has 2 roots"), halting scheduling everywhere."""
    if parent is None:
        root = Budget.objects.filter(parent__isnull=True).exclude(pk=pk).first()
        if root is not None:
            return (
                "second_root",
                "parent",
                f"The organisation has one root budget, {root.name}: choose a parent under it (the first budget"
                f" made is the root; if {root.name} was meant as a program, rename it to the organisation's name"
                " and make the program under it).",
            )
    else:
        archived = parent.archived_at is not None
        # An edit under the parent it already has skips the count: a tree made before the rule works.
        counted = not archived and parent.pk is not None and not _stays_under(pk, parent)
        problem = parent_problem(
            parent.path, archived=archived, unfinished=unfinished_workloads(parent) if counted else 0
        )
        if problem is not None:
            return problem
    if name is not None:
        parent_id = parent.pk if parent is not None else None
        siblings = Budget.objects.filter(parent_id=parent_id, name=name, archived_at__isnull=True)
        if siblings.exclude(pk=pk).exists():
            return "duplicate_name", "name", f"A live budget named {name!r} exists there already."
    return None


def unfinished_workloads(budget: Budget) -> int:
    """How many of ``budget``'s own workloads are not finished (pending, starting, running or
    preempting)."""
    from scheduler.models import Workload  # the scheduler app builds on this one

    return Workload.objects.filter(budget_id=budget.pk).exclude(state__in=Workload.FINAL_STATES).count()


def _subtree_has_work(pk: int) -> bool:
    """Whether budget ``pk`` or a budget under it has an unfinished workload."""
    from budgets.services import subtree_ids
    from scheduler.models import Workload  # the scheduler app builds on this one

    under = Workload.objects.filter(budget_id__in=subtree_ids([pk]))
    return under.exclude(state__in=Workload.FINAL_STATES).exists()


def _stays_under(pk: int | None, parent: Budget) -> bool:
    """True when budget ``pk`` is saved again under the parent it already has (an edit of its
    shares or caps): a tree made before the rule of :func:`placement_problem` keeps working."""
    return pk is not None and Budget.objects.filter(pk=pk, parent_id=parent.pk).exists()


MAX_CAP_PERIOD_DAYS = 3650
"""Longest cap period (DESIGN.md §3.7), ten years: the rolling period must fit in a datetime."""


class Budget(models.Model):
    """A node of the share tree (DESIGN.md §1, §3.7).

    ``shares`` is the integer weight among siblings. A budget with workloads is
    never deleted: it is archived (``archived_at``), which refuses new
    submissions. ``hold`` starts no new attempts. ``cap_gpu_hours`` per
    ``cap_period_days`` limits allocated usage; ``on_cap`` says what happens then.
    """

    class OnCap(models.TextChoices):
        DOWNGRADE = "downgrade", "run as unallocated (unfunded)"
        HOLD = "hold", "hold new attempts"

    name = models.CharField(max_length=100)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    shares = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    hold = models.BooleanField(default=False)
    archived_at = models.DateTimeField(null=True, blank=True)
    cap_gpu_hours = models.DecimalField("cap GPU-hours", max_digits=12, decimal_places=2, null=True, blank=True)
    # at most ten years: the tick subtracts the period from now (a million days overflowed every tick)
    cap_period_days = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(MAX_CAP_PERIOD_DAYS)]
    )
    on_cap = models.CharField(max_length=16, choices=OnCap.choices, default=OnCap.DOWNGRADE)
    # A submission to this budget may leave its user at most this many pending + running workloads
    # (budgets.rules.submitted_limit; thr47). Null: FAIRWAY_MAX_SUBMITTED_PER_USER; 0: no limit.
    max_submitted_per_user = models.PositiveIntegerField(
        "submission limit per user", null=True, blank=True, validators=[MaxValueValidator(10**9)]
    )
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = BudgetQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["parent", "name"],
                condition=models.Q(archived_at__isnull=True),
                name="budget_unique_live_name_per_parent",
            ),
            # The tree has one root, archived or not (placement_problem's "second_root"): the rule
            # reads, this index guards it against a concurrent creation (docs/locking.md, "Budgets").
            # NULLs are distinct in a unique index, so it indexes a constant over the roots.
            models.UniqueConstraint(
                Coalesce("parent", models.Value(0)),
                condition=models.Q(parent__isnull=True),
                name="budget_one_root",
            ),
            models.CheckConstraint(condition=models.Q(shares__gte=1), name="budget_shares_positive"),
        ]

    def __str__(self) -> str:
        return self.path

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    @property
    def path(self) -> str:
        """Slash-separated names from below the root, e.g. ``nlp/olmo`` (the root is its own name).
        A corrupt cycle of parents ends the walk at the first budget met twice."""
        parts: list[str] = []
        seen: set[int | None] = set()
        node: Budget | None = self
        while node is not None and node.parent_id is not None and node.pk not in seen:
            seen.add(node.pk)
            parts.append(node.name)
            node = node.parent
        if not parts:
            return self.name
        return "/".join(reversed(parts))

    def clean(self) -> None:
        """What the admin may save: a name :func:`budget_name_problem` accepts; a parent that is
        never the budget itself nor one of its sub-budgets (the tree would have a cycle, and every
        tick refuses a tree with a cycle); a cap never negative (0: no allocated usage at all); no live
        sibling of the same name, no archived parent and no second root: :func:`placement_problem`, the
        rule ``do_create_budget`` applies. An archived budget moved with unfinished work under it
        goes only under a parent with none of its own (:func:`budgets.rules.parent_problem`, brk63)."""
        super().clean()
        problem = budget_name_problem((self.name or "").strip())
        if problem:
            raise ValidationError({"name": problem})
        if self.cap_gpu_hours is not None and self.cap_gpu_hours < 0:
            raise ValidationError({"cap_gpu_hours": "A cap is 0 GPU-hours or more (empty: no cap)."})
        if self.parent_id is not None:
            from budgets.services import lock_new_parent

            try:  # read again under its locks: another admin's move or archive may have committed since
                self.parent = lock_new_parent(self.parent_id, moving=self.pk is not None)
            except Budget.DoesNotExist:
                raise ValidationError({"parent": "That budget no longer exists."}) from None
        if self.archived_at is None:
            # The database's unique constraint is conditional on archived_at, a field the admin's
            # form leaves out, so Django skips it there: without this a duplicate was a 500.
            placement = placement_problem((self.name or "").strip(), self.parent, self.pk)
        elif self.parent_id is None:
            placement = placement_problem(None, None, self.pk)  # an archived root is still a root
        elif self.pk is not None and not _stays_under(self.pk, self.parent) and _subtree_has_work(self.pk):
            # its work carries on under the new parent, which must have none of its own (brk63)
            placement = parent_problem(self.parent.path, archived=False, unfinished=unfinished_workloads(self.parent))
        else:
            placement = None
        if placement is not None:
            _code, field, message = placement
            raise ValidationError({field: message})
        if self.pk is None or self.parent_id is None:
            return
        from budgets.services import subtree_ids

        if self.parent_id in subtree_ids([self.pk]):
            raise ValidationError({"parent": "A budget cannot be under itself or one of its sub-budgets."})


class UsageEntry(models.Model):
    """Allocated GPU time charged to a budget outside attempts (imports, scenario history).

    Either an interval (``gpus`` GPUs from ``start`` to ``end``, counted pro-rata
    by the window) or, when ``gpus`` is null, a lump of ``gpu_seconds`` at ``end``.
    """

    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="usage_entries")
    # PROTECT (sec63): deleting a cluster deleted the usage imported on it, and budgets' history with it
    cluster = models.ForeignKey("scheduler.Cluster", on_delete=models.PROTECT, related_name="usage_entries")
    start = models.DateTimeField()
    end = models.DateTimeField(db_index=True)
    gpus = models.PositiveIntegerField("GPUs", null=True, blank=True)
    gpu_seconds = models.BigIntegerField("GPU-seconds", default=0)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        verbose_name_plural = "usage entries"

    def __str__(self) -> str:
        amount = f"{self.gpus} GPUs" if self.gpus is not None else f"{self.gpu_seconds} GPU-s"
        # the budget's path, as every page names a budget (admin47: its id, "for budget 7")
        return f"{amount} for budget {self.budget.path} until {instant_text(self.end, absolute=True)}"

    def clean(self) -> None:
        """What the admin may save (brk30): an interval that does not end before it starts (it was
        stored and counted as nothing), a lump of 0 GPU-seconds or more (a negative one lowered the
        budget's usage, ratio and statement, below zero when large), and either GPUs or GPU-seconds (with
        both, the lump was silently ignored). The rules ``import_history sacct`` applies too."""
        super().clean()
        problems: dict[str, str] = {}
        if self.start is not None and self.end is not None and self.end < self.start:
            problems["end"] = "The interval ends before it starts."
        if self.gpus is None and (self.gpu_seconds or 0) < 0:
            problems["gpu_seconds"] = "A lump of usage is 0 GPU-seconds or more."
        if self.gpus is not None and self.gpu_seconds:
            problems["gpu_seconds"] = (
                "Give either GPUs (an interval, counted pro-rata) or GPU-seconds (a lump at the end), not both."
            )
        if problems:
            raise ValidationError(problems)


class ShareChange(models.Model):
    """Audit record of a change to a budget's shares (or its hold / archive / place in the tree /
    cap), who and when.

    Written by the services (``do_set_shares``, also at a temporary share's start and end:
    :class:`ShareBoost`; ``do_set_hold``, ``do_archive_budget``) and the
    admin's save of a move, a cap or a submission limit (``budgets.services.record_move_and_cap``)
    only; read-only in the admin. ``actor_name`` keeps the username should the user be deleted. A
    move, a cap or a limit change keeps the shares on both sides and says what changed in ``note``.
    """

    class Kind(models.TextChoices):
        SHARES = "shares", "shares"
        HOLD = "hold", "hold"
        RELEASE = "release", "release hold"
        ARCHIVE = "archive", "archive"
        MOVE = "move", "move"
        CAP = "cap", "cap"
        LIMIT = "limit", "submission limit"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="share_changes")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.SHARES)
    old_shares = models.PositiveIntegerField()
    new_shares = models.PositiveIntegerField()
    actor = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="share_changes"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        who = self.actor_name or "system"
        if self.kind == self.Kind.SHARES:
            return f"{who}: shares {self.old_shares} → {self.new_shares} at {instant_text(self.at, absolute=True)}"
        return f"{who}: {self.get_kind_display()} at {instant_text(self.at, absolute=True)}"

    def change_text(self) -> str:
        """What changed, in words: ``shares 1 → 3``, ``hold on``, ``hold off``, ``archived``; a move
        or a cap says it in ``note`` (``cap none → 0.15 GPU-h / 7 d, then unfunded``), so ``move``,
        ``cap``. The audit's column (try41: a hold read as old and new shares "1 | 1")."""
        if self.kind == self.Kind.SHARES:
            return f"shares {self.old_shares} → {self.new_shares}"
        return {self.Kind.HOLD: "hold on", self.Kind.RELEASE: "hold off", self.Kind.ARCHIVE: "archived"}.get(
            self.kind, self.get_kind_display()
        )


class ShareBoost(models.Model):
    """A temporary share ("deadline boost"): ``shares`` for ``budget`` from ``starts_at`` until
    ``ends_at``, then back to ``base_shares`` (docs/standing.md, "Temporary shares").

    Scheduled by leadership (the admin: ``budgets.services.do_schedule_boost``); applied at its
    start and undone at its end by the clock (``budgets.services.apply_due_boosts``) through
    ``do_set_shares``, the admin edit's path, so both leave the same ``ShareChange`` records.
    ``base_shares`` is filled when it is applied (the shares the budget had then); an explicit
    edit of the shares while it is active replaces it and ends the boost. States: scheduled
    (``applied_at`` None), active (applied, ``ended_at`` None), ended.
    """

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="share_boosts")
    shares = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    starts_at = models.DateTimeField("from", default=timezone.now)
    ends_at = models.DateTimeField("until", db_index=True)
    base_shares = models.PositiveIntegerField("then", null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    actor = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="share_boosts"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    note = models.CharField("reason", max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at", "-id"]
        verbose_name = "temporary share"
        constraints = [
            models.CheckConstraint(condition=models.Q(shares__gte=1), name="shareboost_shares_positive"),
            models.CheckConstraint(condition=models.Q(ends_at__gt=models.F("starts_at")), name="shareboost_ends_after"),
        ]

    def __str__(self) -> str:
        return f"{self.budget}: share {self.shares} until {instant_text(self.ends_at, absolute=True)}"

    @property
    def state(self) -> str:
        if self.ended_at is not None:
            return "ended"
        return "active" if self.applied_at is not None else "scheduled"
