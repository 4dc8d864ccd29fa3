"""Bulk cancel, hold and release of the workloads a filter matches (docs/jobs.md "Bulk actions"):
Slurm's ``scancel -u me --state=PENDING --partition=…`` and ``scontrol hold`` of many jobs.

The matches are the workload list's own (``scheduler.api.filters.WorkloadFilter``: what
``fairway ls`` shows with the same filters); each is acted on by the single-workload service
(:func:`~scheduler.services.do_cancel_workload`, ``do_hold_workload``, ``do_release_workload``),
so a bulk action has no rule of its own: who may, what is refused, what an event says, how it
races the tick are that service's. Those ``actor`` may not act on, or whose state refuses it, are
skipped and named with the refusal's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from accounts.models import User
from accounts.services import user_memberships
from budgets.models import Budget
from budgets.services import load_tree
from config.errors import ServiceError
from scheduler.models import Attempt, Workload
from scheduler.services import (
    STATE_WORDS,
    cancel_changes,
    cancel_refusal,
    cancel_workload,
    do_release_workload,
    hold_changes,
    hold_refusal,
    hold_workload,
)


def bulk_max() -> int:
    """The most workloads one bulk action may match (its preview too), ``FAIRWAY_BULK_MAX``
    (default 10,000): a larger match is refused whole (``too_many_matched``), never cut at an
    arbitrary id. It bounds the request's work (one short transaction per workload) and its answer."""
    return int(settings.FAIRWAY["BULK_MAX"])


ACTIONS = ("cancel", "hold", "release")

FILTER_REQUIRED = (
    "Name at least one filter (state, budget, owner, cluster, group or id): a bulk action never takes "
    "the whole queue (owner=me for your own work)."
)

UNCHANGED = "unchanged"
UNCHANGED_WORDS = "Already held as firmly: holding it again changes nothing."
STOPPING_WORDS = (
    "Already asked to stop by a stop that ends it (a cancel, its timeout, a gang part's exit): cancelling it "
    "changes nothing."
)


class BulkError(ServiceError):
    """A refused bulk action, nothing changed: ``filter_required`` (no filter named),
    ``too_many_matched`` (more than :func:`bulk_max` matches), ``invalid_action``."""


@dataclass
class BulkOutcome:
    """What a bulk action did (``dry_run``: would do). ``matched``: how many workloads the filter
    matched; ``changed``: the ids changed, ascending (a cancel's include those asked to stop,
    also listed in ``stopping``: they end canceled once their GPUs are released; a preview's
    ``stopping``: those that have started); ``skipped``: ``(id, code)`` of the others, ascending;
    ``reasons``: each skip code's message (its messages, when its skips had several: brk55)."""

    action: str
    dry_run: bool
    matched: int = 0
    changed: list[int] = field(default_factory=list)
    stopping: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    states: dict[str, list[str]] = field(default_factory=dict)
    """The states met by the skips of each code of ``services.STATE_WORDS``, in order met."""

    def skip(self, pk: int, code: str, message: str, state: str | None = None) -> None:
        self.skipped.append((pk, code))
        if state is not None and code in STATE_WORDS:  # one sentence naming every state (left56)
            met = self.states.setdefault(code, [])
            many = bool(met) or code in self.reasons  # a skip of this code before
            if state not in met:
                met.append(state)
            self.reasons[code] = STATE_WORDS[code](met, many=many)
            return
        said = self.reasons.get(code)
        if said is None:
            self.reasons[code] = message
        elif message not in said:  # one code, another reason (forbidden: not one's own, or an admin's hold)
            self.reasons[code] = f"{said} {message}"


def require_filter(params: Mapping[str, Any], names: Any) -> None:
    """Refuse ``filter_required`` when ``params`` gives none of the filters ``names`` a value."""
    if not any(str(params.get(name) or "").strip() for name in names):
        raise BulkError("filter_required", None, FILTER_REQUIRED)


def _matches(workloads: QuerySet[Workload]) -> list[Workload]:
    """The matched workloads in id order (the order of every lock of several workloads,
    docs/locking.md), with what the refusals read; refused ``too_many_matched`` past
    :func:`bulk_max` (one row more is read to know)."""
    most = bulk_max()
    rows = list(
        workloads.order_by("pk").only(
            "id", "owner_id", "budget_id", "state", "hold", "cluster_id", "retries", "retries_used"
        )[: most + 1]
    )
    if len(rows) > most:
        raise BulkError(
            "too_many_matched",
            None,
            f"The filter matches more than {most:,} workloads, the most one bulk action takes: narrow it "
            "(owner=me, a state, a budget, a cluster, a group).",
        )
    return rows


def _open_attempts(action: str, rows: list[Workload]) -> dict[int, Attempt]:
    """The open attempts of the started ``rows`` (workload id → attempt) that a cancel reads
    (:func:`~scheduler.services.cancel_changes`); none for a hold or a release. One query."""
    started = [w.pk for w in rows if w.state != Workload.State.PENDING]
    if action != "cancel" or not started:
        return {}
    attempts = Attempt.objects.filter(workload_id__in=started, ended_at__isnull=True).only("workload_id", "stop_reason")
    return {a.workload_id: a for a in attempts}


def _refusal(
    actor: User,
    action: str,
    w: Workload,
    tree: dict[int, Budget],
    memberships: dict[int, str],
    attempts: dict[int, Attempt],
) -> tuple[str, str] | None:
    """Why the single-workload service would refuse ``action`` on ``w`` as read (``attempts``: the
    open attempts of :func:`_open_attempts`), or None; ``unchanged`` for one it would not change."""
    if action == "cancel":
        problem = cancel_refusal(actor, w, tree, memberships)
        if problem is None and not cancel_changes(w, attempts.get(w.pk)):
            return UNCHANGED, STOPPING_WORDS
    else:
        problem = hold_refusal(actor, w, release=action == "release", tree=tree, memberships=memberships)
    if problem is not None:
        return problem.code, problem.message
    if action == "hold" and not hold_changes(actor, w, tree, memberships):
        return UNCHANGED, UNCHANGED_WORDS
    return None


def _apply(actor: User, action: str, w: Workload) -> tuple[bool, bool]:
    """``action`` on ``w`` by its service (one transaction, the row locked first); (changed,
    stopping). Raises the service's error when the row, read again under its lock, refuses it."""
    if action == "cancel":
        done, changed = cancel_workload(actor, w)  # what the service changed, not what was read (left53)
        return changed, changed and done.state not in Workload.FINAL_STATES
    if action == "release":
        do_release_workload(actor, w)  # it changed the hold, or raised
        return True, False
    return hold_workload(actor, w)[1], False  # what it changed, not the hold as read (brk55)


def do_bulk_action(
    actor: User,
    action: str,
    workloads: QuerySet[Workload],
    *,
    dry_run: bool = False,
    tree: dict[int, Budget] | None = None,
    memberships: dict[int, str] | None = None,
) -> BulkOutcome:
    """Cancel, hold or release (``action``) every workload of ``workloads`` that ``actor`` may,
    one by one in id order, each by its single-workload service in a transaction of its own (no
    transaction spans two workloads: each holds one workload's row, then its attempt and GPUs,
    as a single cancel does, so the tick never waits long and cannot deadlock with it; a bulk
    action is therefore not atomic, as Slurm's ``scancel`` of many jobs is not). A workload whose
    row, read again under its lock, refuses the action (the tick started it meanwhile) is skipped
    with the service's code. ``dry_run``: the same reads and refusals, nothing written.
    ``tree``, ``memberships``: already loaded this request. Raises BulkError ``invalid_action``,
    ``too_many_matched`` (nothing changed)."""
    if action not in ACTIONS:
        raise BulkError("invalid_action", "action", f"The actions are: {', '.join(ACTIONS)}.")
    tree = load_tree() if tree is None else tree
    memberships = user_memberships(actor) if memberships is None else memberships
    outcome = BulkOutcome(action=action, dry_run=dry_run)
    rows = _matches(workloads)
    outcome.matched = len(rows)
    attempts = _open_attempts(action, rows)
    for w in rows:
        if w.budget_id in tree:
            w.budget = tree[w.budget_id]  # the permission's ancestry, from the tree: no query per row
        refused = _refusal(actor, action, w, tree, memberships, attempts)
        if refused is not None:
            outcome.skip(w.pk, *refused, state=w.state)
            continue
        if dry_run:
            outcome.changed.append(w.pk)
            if action == "cancel" and w.state != Workload.State.PENDING:
                outcome.stopping.append(w.pk)
            continue
        try:
            changed, stopping = _apply(actor, action, w)
        except ServiceError as exc:
            outcome.skip(w.pk, exc.code, exc.message, state=getattr(exc, "state", None))
            continue
        if not changed:
            outcome.skip(w.pk, UNCHANGED, STOPPING_WORDS if action == "cancel" else UNCHANGED_WORDS)
            continue
        outcome.changed.append(w.pk)
        if stopping:
            outcome.stopping.append(w.pk)
    return outcome
