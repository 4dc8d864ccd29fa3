"""Budget tree services: lookups by path, the share normalization, and the few state changes.

The tree is small (tens to a few hundred budgets), so helpers that need the whole
tree load it with one query and walk it in memory.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from budgets import rules
from budgets.models import Budget, ShareBoost, ShareChange, budget_name_problem, placement_problem
from config.errors import ServiceError
from fairway_cli.numbers import instant_text
from fairway_cli.words import boost_text, budget_hint_text, unknown_budget_text


class BudgetError(ServiceError):
    """A refused budget change; ``code`` is stable, ``field`` names the offending input."""


# --- reading the tree ----------------------------------------------------------------


def load_tree() -> dict[int, Budget]:
    """Every budget by id, one query; parents are attached so ``.path`` costs no query."""
    budgets = {b.id: b for b in Budget.objects.all()}
    for b in budgets.values():
        if b.parent_id is not None and b.parent_id in budgets:
            b.parent = budgets[b.parent_id]  # fill the FK cache: path walks without queries
    return budgets


def budget_paths(tree: dict[int, Budget] | None = None) -> dict[int, str]:
    """Budget id → path (``nlp/olmo``; the root is its own name), one query."""
    tree = load_tree() if tree is None else tree
    return {bid: b.path for bid, b in tree.items()}


def tree_walk(tree: dict[int, Budget] | None = None) -> list[tuple[Budget, int]]:
    """Every budget a root reaches, with its depth (a root 0), in tree order: each budget followed
    by its sub-budgets, depth-first; siblings (and roots) live before archived, then by name, then
    id. The one order of the budgets page, ``budgets/tree/``, ``fairway share`` and the admin."""
    tree = load_tree() if tree is None else tree
    children: dict[int | None, list[Budget]] = defaultdict(list)
    for b in tree.values():
        children[b.parent_id if b.parent_id in tree else None].append(b)
    for kids in children.values():
        kids.sort(key=lambda b: (b.archived_at is not None, b.name, b.id))
    out: list[tuple[Budget, int]] = []
    seen: set[int] = set()
    stack = [(b, 0) for b in reversed(children[None])]
    while stack:
        b, depth = stack.pop()
        if b.id in seen:
            continue
        seen.add(b.id)
        out.append((b, depth))
        stack.extend((c, depth + 1) for c in reversed(children[b.id]))
    return out


def tree_order(tree: dict[int, Budget] | None = None) -> list[int]:
    """Every budget id in :func:`tree_walk`'s order; a budget no root reaches (a corrupt cycle of
    parents) comes last, by name then id."""
    tree = load_tree() if tree is None else tree
    order = [b.id for b, _depth in tree_walk(tree)]
    reached = set(order)
    return order + [b.id for b in sorted(tree.values(), key=lambda b: (b.name, b.id)) if b.id not in reached]


def ancestor_ids(budget: Budget, tree: dict[int, Budget] | None = None) -> list[int]:
    """Ids of ``budget`` and its ancestors, from ``budget`` up to the root."""
    tree = load_tree() if tree is None else tree
    ids: list[int] = []
    node_id: int | None = budget.id
    while node_id is not None and node_id not in ids:  # the "not in" guards against a corrupt cycle
        ids.append(node_id)
        node = tree.get(node_id)
        node_id = node.parent_id if node is not None else None
    return ids


def subtree_ids(root_ids: Iterable[int], tree: dict[int, Budget] | None = None) -> set[int]:
    """Ids of the given budgets and all their descendants (archived ones included)."""
    tree = load_tree() if tree is None else tree
    children: dict[int | None, list[int]] = defaultdict(list)
    for b in tree.values():
        children[b.parent_id].append(b.id)
    seen: set[int] = set()
    stack = [i for i in root_ids if i in tree]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(children.get(node, ()))
    return seen


def is_leaf(budget: Budget, tree: dict[int, Budget] | None = None) -> bool:
    """A leaf has no live child. (Archived children do not make a budget a parent.)"""
    if tree is None:
        return not Budget.objects.filter(parent=budget, archived_at__isnull=True).exists()
    return not any(b.parent_id == budget.id and b.archived_at is None for b in tree.values())


def archived_children_work(budget: Budget, tree: dict[int, Budget] | None = None) -> int:
    """How many unfinished workloads (pending, starting, running, preempting) the subtrees of
    ``budget``'s archived sub-budgets hold: :func:`budgets.rules.submission_problem` reads it. One
    query, only when it has an archived sub-budget."""
    tree = load_tree() if tree is None else tree
    archived = [b.id for b in tree.values() if b.parent_id == budget.id and b.archived_at is not None]
    if not archived:
        return 0
    from scheduler.models import Workload  # the scheduler app builds on this one

    unfinished = Workload.objects.filter(budget_id__in=subtree_ids(archived, tree))
    return unfinished.exclude(state__in=Workload.FINAL_STATES).count()


_ID_DIGITS = re.compile(r"[0-9]{1,18}")
"""An id given as text: ASCII digits only (``"²".isdigit()`` is true but ``int("²")`` fails), short
enough for ``int()`` and a database integer; anything else is read as a path."""


def resolve_budget(ref: Budget | int | str, tree: dict[int, Budget] | None = None) -> Budget | None:
    """The budget named by ``ref``: a Budget, an id (int or digits) or a path like ``nlp/olmo``.

    ``tree`` (from ``load_tree``) saves the queries. A path is walked from below the root
    (``Budget.path`` format); a leading root name is also accepted (``org/nlp/olmo``).
    At each step a live budget wins over an archived one of the same name, then the newest
    archived one. Returns None when nothing matches.
    """
    if isinstance(ref, Budget):
        return ref
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int) or (isinstance(ref, str) and _ID_DIGITS.fullmatch(ref.strip())):
        if tree is not None:
            return tree.get(int(ref))
        return Budget.objects.filter(pk=int(ref)).first()
    if not isinstance(ref, str):
        return None
    parts = [p for p in ref.strip().strip("/").split("/") if p]
    if not parts:
        return None
    tree = load_tree() if tree is None else tree
    roots = sorted((b for b in tree.values() if b.parent_id is None), key=_live_first)
    for start in ([r.id for r in roots], None):
        found = _walk(tree, start, parts)
        if found is not None:
            return found
    return None


def unknown_budget_words(ref: str, tree: dict[int, Budget] | None = None) -> str:
    """The one sentence of an unknown budget ("No budget 'olmo'. Budgets are named by their path:
    did you mean nlp/olmo?"): the lists' budget filter, history's and ``manage.py
    budget_statement``'s (try50: history said "no budget 'olmo'" alone); ``fairway statement``
    says it from the API's list (``fairway_cli.words.unknown_budget_text``, left52). They read
    archived budgets too, so it names those as well (tryout46: "No budget 'bert'." alone of an
    archived nlp/bert whose history ``--budget nlp/bert`` read); a submission's, :func:`budget_hint`,
    names live ones only."""
    return unknown_budget_text(ref, _paths(tree, archived=True))


def budget_hint(ref: object, tree: dict[int, Budget] | None = None) -> str:
    """What to add to "No budget 'olmo'." so the person knows what to type
    (``fairway_cli.words.budget_hint_text``: the live budgets whose own name is the last part of
    ``ref``), or "" when none is."""
    if not isinstance(ref, str):
        return ""
    return budget_hint_text(ref, _paths(tree))


def _paths(tree: dict[int, Budget] | None, *, archived: bool = False) -> Iterator[str]:
    """The paths of the live budgets below the root (the names a hint may suggest), and of the
    archived ones with ``archived``; the tree is read when the first is asked (a ref with no name
    asks none)."""
    tree = load_tree() if tree is None else tree
    yield from (b.path for b in tree.values() if (archived or b.archived_at is None) and b.parent_id is not None)


def _live_first(b: Budget) -> tuple[int, float]:
    return (0 if b.archived_at is None else 1, -(b.archived_at.timestamp() if b.archived_at else 0))


def _walk(tree: dict[int, Budget], parent_ids: list[int] | None, parts: list[str]) -> Budget | None:
    """Walk ``parts`` down from the children of ``parent_ids`` (None: match the root names first)."""
    if parent_ids is None:
        candidates = [b for b in tree.values() if b.parent_id is None and b.name == parts[0]]
    else:
        candidates = [b for b in tree.values() if b.parent_id in parent_ids and b.name == parts[0]]
    for cand in sorted(candidates, key=_live_first):
        if len(parts) == 1:
            return cand
        found = _walk(tree, [cand.id], parts[1:])
        if found is not None:
            return found
    return None


def normalized_shares(tree: dict[int, Budget] | None = None) -> dict[int, Fraction]:
    """Budget id → normalized share ``s(b)`` (DESIGN.md §1), exact, by the policy's one definition
    (:meth:`scheduler.policy.tree.BudgetTree.normalized_shares`).

    ``s(root) = 1``; ``s(b) = shares(b) / Σ shares(live siblings) × s(parent)``. An archived
    budget with no unfinished workload in its subtree (on any cluster: this view is not per
    cluster; the standing of each cluster, ``scheduler.reports.budget_standings``, counts that
    cluster's work, as its tick does) drops out of its siblings' normalization (§3.7), and its own
    share is then 0, as the policy gives it (left40). Each root's tree is normalized on its own.
    """
    from scheduler.models import Workload  # local: budgets must not depend on scheduler at import time
    from scheduler.policy.tree import BudgetTree
    from scheduler.policy.types import Budget as ShareNode

    tree = load_tree() if tree is None else tree
    unfinished = Workload.objects.exclude(state__in=Workload.FINAL_STATES)
    busy = {str(bid) for bid in unfinished.values_list("budget_id", flat=True).distinct()}
    by_root: dict[int, list[ShareNode]] = defaultdict(list)
    for bid, b in tree.items():
        by_root[ancestor_ids(b, tree)[-1]].append(
            ShareNode(
                key=str(bid),
                name=b.name,
                parent=str(b.parent_id) if b.parent_id in tree else None,
                shares=b.shares,
                archived=b.archived_at is not None,
            )
        )
    shares: dict[int, Fraction] = {}
    for nodes in by_root.values():
        share_tree = BudgetTree(nodes)
        shares.update((int(key), s) for key, s in share_tree.normalized_shares(share_tree.live(busy)).items())
    return shares


# --- changing the tree ---------------------------------------------------------------


def do_create_budget(
    *, name: str, parent: Budget | None, shares: int = 1, description: str = "", hold: bool = False
) -> Budget:
    """Create a live budget under ``parent`` (None: the root). Raises BudgetError on a bad name/shares
    (``invalid_name``, ``invalid_shares``), an archived parent (``budget_archived``), a parent
    with unfinished workloads of its own (``parent_has_work``), a live
    sibling of the same name (``duplicate_name``) or a second root (``second_root``): the rule of
    :func:`budgets.models.placement_problem`, which the admin applies too."""
    name = (name or "").strip()
    problem = budget_name_problem(name)
    if problem:
        raise BudgetError("invalid_name", "name", problem)
    if not isinstance(shares, int) or isinstance(shares, bool) or shares < 1:
        raise BudgetError("invalid_shares", "shares", "Shares are an integer >= 1.")
    with transaction.atomic():
        if parent is not None:
            # A share lock, as a submission's (docs/locking.md, "Budgets"): the parent's row is read,
            # never written, so creations under one parent do not wait for each other; an archive
            # (FOR UPDATE) or an edit of the parent waits for them, and they for it.
            parent = share_lock_budget(parent.pk)
        problem = placement_problem(name, parent)
        if problem is not None:
            raise BudgetError(*problem)
        try:
            with transaction.atomic():  # a savepoint: the refusal below leaves the transaction usable
                return Budget.objects.create(
                    name=name, parent=parent, shares=shares, description=description, hold=hold
                )
        except IntegrityError:
            # A creation of the same name, or of a root, committed meanwhile (the live-name unique
            # index, or the one-root index ``budget_one_root``, made this insert wait for it): the
            # rule's own answer (``duplicate_name``, ``second_root``), not a database error.
            problem = placement_problem(name, parent)
            if problem is None:
                raise
            raise BudgetError(*problem) from None


def share_lock_budget(pk: int) -> Budget:
    """Budget ``pk``, read under a row share lock until the transaction ends (PostgreSQL:
    ``SELECT … FOR SHARE``; Django's ``select_for_update`` has no share mode).

    Submissions into a budget and creations of its children hold it together; an archive
    (``FOR UPDATE``, then an ``UPDATE``), a change of shares, hold or caps waits for them, and they
    for it (docs/locking.md, "Budgets"). SQLite: a plain read, as ``select_for_update`` is there
    (one writer at a time)."""
    if connection.vendor != "postgresql":
        return Budget.objects.get(pk=pk)
    table = connection.ops.quote_name(Budget._meta.db_table)
    query = f"SELECT * FROM {table} WHERE id = %s FOR SHARE"  # noqa: S608 -- the model's own table name
    rows = list(Budget.objects.raw(query, [pk]))  # noqa: S611 -- a constant statement, the id a parameter
    if not rows:
        raise Budget.DoesNotExist(f"budget {pk}")
    return rows[0]


MOVE_LOCK_CLASS = 0x46574242
"""First key of the advisory lock that one budget move at a time holds ("FWBB"; the tick's is "FWAY")."""


def lock_new_parent(parent_pk: int, *, moving: bool) -> Budget:
    """The parent a budget is saved under (the admin's ``Budget.clean``), read again under the locks
    that keep its checks true until the transaction ends (docs/locking.md, "Budgets"): the parent's
    share lock (as a creation's), so an archive of it in flight is waited for and then seen; and for
    a budget that exists (``moving``: its parent may change) the transaction-wide advisory lock of
    budget moves, so two moves never both pass "not under its own sub-budgets" against a tree
    without the other (together they made a cycle: brk34). SQLite: a plain read."""
    if moving and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, 0)", [MOVE_LOCK_CLASS])
    return share_lock_budget(parent_pk)


def request_ticks_everywhere() -> None:
    """A budget change can reorder every cluster's queue: ask each cluster for a tick."""
    from scheduler.models import Cluster
    from scheduler.notify import request_tick_on_commit

    for cluster_id in Cluster.objects.values_list("id", flat=True):
        request_tick_on_commit(cluster_id)


def _record(budget: Budget, kind: str, old: int, new: int, actor: object | None, note: str = "") -> ShareChange:
    """Write one audit record; ``actor`` is a user (None or anonymous: the system)."""
    user = actor if getattr(actor, "pk", None) is not None else None
    return ShareChange.objects.create(
        budget=budget,
        kind=kind,
        old_shares=old,
        new_shares=new,
        actor=user,
        actor_name=getattr(user, "username", "") if user is not None else "",
        note=(note or "")[:500],
    )


def record_move_and_cap(budget: Budget, before: dict[str, Any], actor: object | None, note: str = "") -> None:
    """Audit a saved change of ``budget``'s parent, cap or own submission limit (``before``: the
    fields as they were; the admin's form initial). A move changes the entitlement of both parents'
    subtrees and a cap what a program may use, but neither was recorded (try38): leadership's history
    showed share changes only; nor was the submission limit (left47). One ``ShareChange`` per kind,
    the change in words before the reason."""
    from scheduler.reports import cap_words  # local: budgets does not import scheduler at load

    paths = budget_paths()
    if "parent" in before and before["parent"] != budget.parent_id:
        old = paths.get(before["parent"], "(none)") if before["parent"] is not None else "(none)"
        new = paths.get(budget.parent_id, "(none)") if budget.parent_id is not None else "(none)"
        words = f"moved from {old or '(root)'} to {new or '(root)'}"
        _record(
            budget, ShareChange.Kind.MOVE, budget.shares, budget.shares, actor, f"{words}: {note}" if note else words
        )
    cap_fields = ("cap_gpu_hours", "cap_period_days", "on_cap")
    if any(f in before for f in cap_fields):
        was = {f: before.get(f, getattr(budget, f)) for f in cap_fields}
        old_cap = was["cap_gpu_hours"]
        old_words = cap_words(
            float(old_cap) if old_cap is not None else None, int(was["cap_period_days"]), str(was["on_cap"]), False
        )
        new_cap = budget.cap_gpu_hours
        new_words = cap_words(
            float(new_cap) if new_cap is not None else None, budget.cap_period_days, budget.on_cap, False
        )
        if old_words != new_words:
            words = f"cap {old_words or 'none'} → {new_words or 'none'}"
            _record(
                budget, ShareChange.Kind.CAP, budget.shares, budget.shares, actor, f"{words}: {note}" if note else words
            )
    if "max_submitted_per_user" in before and before["max_submitted_per_user"] != budget.max_submitted_per_user:
        old_limit = rules.submitted_limit_words(before["max_submitted_per_user"])
        words = f"submission limit per user {old_limit} → {rules.submitted_limit_words(budget.max_submitted_per_user)}"
        _record(
            budget, ShareChange.Kind.LIMIT, budget.shares, budget.shares, actor, f"{words}: {note}" if note else words
        )


def do_set_shares(
    actor: object | None, budget: Budget, shares: int, note: str = "", *, by_boost: bool = False
) -> Budget:
    """Set a budget's shares (an integer >= 1, else BudgetError ``invalid_shares``), record who
    changed them from what to what (``ShareChange``), and request a tick of every cluster.
    Setting the shares a budget already has records nothing.

    The one path of every change of shares: the admin's edit, and a temporary share's start and end
    (``by_boost``, :func:`apply_due_boosts`). An explicit edit while a temporary share is active
    replaces the value it would return to, and ends it (docs/standing.md, "Temporary shares")."""
    if not isinstance(shares, int) or isinstance(shares, bool) or shares < 1:
        raise BudgetError("invalid_shares", "shares", "Shares are an integer >= 1.")
    with transaction.atomic():
        budget = Budget.objects.select_for_update().get(pk=budget.pk)
        old = budget.shares
        if not by_boost:  # the value set stays, equal to the boosted one or not (brk56)
            ShareBoost.objects.filter(budget_id=budget.pk, applied_at__isnull=False, ended_at__isnull=True).update(
                base_shares=shares, ended_at=timezone.now()
            )
        if old != shares:
            budget.shares = shares
            budget.save(update_fields=["shares"])
            _record(budget, ShareChange.Kind.SHARES, old, shares, actor, note)
            request_ticks_everywhere()
    return budget


def lone_shares_note(budget: Budget) -> str | None:
    """The admin's note beside a saved change of ``budget``'s shares (an edit, a temporary
    share) when it has no live sibling, so the change moves no share of a cluster
    (:func:`budgets.rules.lone_shares_note`); None when it has one. Live: counted in the
    normalization (:func:`normalized_shares` above 0)."""
    tree = load_tree()
    shares = normalized_shares(tree)
    siblings = [b for b in tree.values() if b.parent_id == budget.parent_id and b.pk != budget.pk and shares.get(b.pk)]
    path = budget_paths(tree).get(budget.pk, budget.path)
    return rules.lone_shares_note(path, live_siblings=len(siblings), root=budget.parent_id is None)


# --- temporary shares ("deadline boosts") ----------------------------------------------------


def boost_problem(
    budget: Budget, shares: object, starts_at: Any, ends_at: Any, now: Any = None
) -> tuple[str, str, str] | None:
    """Why a temporary share of ``shares`` for ``budget`` from ``starts_at`` (None: now) until
    ``ends_at`` cannot be scheduled, as ``(code, field, message)``, or None when it can: the one
    rule of :func:`do_schedule_boost` and the admin's form. Read under the budget's row lock, so
    two schedulings of one budget never both pass the overlap check."""
    now = now or timezone.now()
    if not isinstance(shares, int) or isinstance(shares, bool) or shares < 1:
        return "invalid_shares", "shares", "Shares are an integer >= 1."
    if ends_at is None:
        return "until_required", "ends_at", "Give the instant the temporary share ends (until)."
    if ends_at <= now:
        return "until_past", "ends_at", f"Until ({instant_text(ends_at, absolute=True)}) is not in the future."
    start = starts_at or now
    if start >= ends_at:
        return "from_after_until", "starts_at", "From is after until: the temporary share would never be active."
    refused = (
        rules.boost_problem(budget.path, archived=budget.archived_at is not None, root=budget.parent_id is None)
        or rules.boost_until_problem(ends_at, now)
        or rules.boost_shares_problem(budget.path, shares, budget.shares, from_now=start <= now)
    )
    if refused is not None:
        return refused
    clash = (
        ShareBoost.objects.filter(budget_id=budget.pk, ended_at__isnull=True, starts_at__lt=ends_at, ends_at__gt=start)
        .order_by("starts_at")
        .first()
    )
    if clash is not None:
        return (
            "overlap",
            "starts_at",
            f"Budget {budget.path} has a temporary share then already: share {clash.shares} from"
            f" {instant_text(clash.starts_at, absolute=True)} until {instant_text(clash.ends_at, absolute=True)}.",
        )
    return None


def do_schedule_boost(
    actor: object | None, budget: Budget, shares: int, ends_at: Any, starts_at: Any = None, note: str = ""
) -> ShareBoost:
    """Schedule a temporary share (BudgetError with :func:`boost_problem`'s code when refused;
    nothing is written then). The clock applies it at its start (:func:`apply_due_boosts`)."""
    now = timezone.now()
    with transaction.atomic():
        budget = Budget.objects.select_for_update().get(pk=budget.pk)
        problem = boost_problem(budget, shares, starts_at, ends_at, now)
        if problem is not None:
            raise BudgetError(*problem)
        user = actor if getattr(actor, "pk", None) is not None else None
        return ShareBoost.objects.create(
            budget=budget,
            shares=shares,
            starts_at=starts_at or now,
            ends_at=ends_at,
            actor=user,
            actor_name=getattr(user, "username", "") if user is not None else "",
            note=(note or "")[:500],
        )


def apply_due_boosts(now: Any = None) -> int:
    """Start and end the temporary shares due at ``now`` (the clock's sweep asks every few
    seconds): the ones whose end has come first, so one ending and another starting on a budget at
    the same instant hand over in order. Each in its own short transaction under the budget's row
    lock, read again there: applied at most once however many workers ask. Returns how many
    changed state."""
    now = now or timezone.now()
    pending = ShareBoost.objects.filter(ended_at__isnull=True)
    ending = list(pending.filter(ends_at__lte=now).order_by("ends_at", "pk").values_list("pk", flat=True))
    starting = list(
        pending.filter(applied_at__isnull=True, starts_at__lte=now, ends_at__gt=now)
        .order_by("starts_at", "pk")
        .values_list("pk", flat=True)
    )
    return sum(_step_boost(pk, now) for pk in [*ending, *starting])


def do_end_boost(actor: object | None, boost: ShareBoost) -> bool:
    """End temporary share ``boost`` now, as its end would (the admin's "End now"): an active one
    returns the budget to ``base_shares`` through :func:`do_set_shares`, recorded as ended early by
    ``actor``; one not yet started is canceled (nothing to undo). The clock's path, under the
    budget's row lock: at most once; False when it had ended already."""
    return _step_boost(boost.pk, timezone.now(), early=True, early_by=actor)


def _step_boost(pk: int, now: Any, *, early: bool = False, early_by: object | None = None) -> bool:
    """Start or end temporary share ``pk`` if it is due at ``now``; False when it was not (another
    worker did it, or an edit ended it). ``early``: ``early_by`` ends it now, due or not."""
    with transaction.atomic():
        budget_id = ShareBoost.objects.filter(pk=pk).values_list("budget_id", flat=True).first()
        if budget_id is None:
            return False
        budget = Budget.objects.select_for_update().get(pk=budget_id)  # the budget's lock first, as every edit
        boost = ShareBoost.objects.select_for_update().filter(pk=pk).first()
        if boost is None or boost.ended_at is not None:  # deleted meanwhile (brk56: DoesNotExist), or ended
            return False
        actor = boost.actor
        if boost.ends_at <= now or early:
            if boost.applied_at is not None and boost.base_shares is not None:
                note = f"temporary share {boost.shares} ended"
                if early:
                    actor = early_by
                    note += f" early by {getattr(actor, 'username', '') or 'the system'}"
                do_set_shares(actor, budget, boost.base_shares, note, by_boost=True)
            boost.ended_at = now
            boost.save(update_fields=["ended_at"])
            return True
        if boost.applied_at is not None or boost.starts_at > now:
            return False
        if budget.archived_at is not None:  # archived since it was scheduled: nothing to raise
            boost.ended_at = now
            boost.save(update_fields=["ended_at"])
            return True
        boost.base_shares, boost.applied_at = budget.shares, now
        boost.save(update_fields=["base_shares", "applied_at"])
        words = boost_text(boost.shares, boost.ends_at, boost.base_shares)
        note = f"temporary {words}: {boost.note}" if boost.note else f"temporary {words}"
        do_set_shares(actor, budget, boost.shares, note, by_boost=True)
        return True


def active_boosts(budget_ids: Iterable[int] | None = None) -> dict[int, ShareBoost]:
    """Budget id → its active temporary share (one query)."""
    boosts = ShareBoost.objects.filter(applied_at__isnull=False, ended_at__isnull=True)
    if budget_ids is not None:
        boosts = boosts.filter(budget_id__in=list(budget_ids))
    return {b.budget_id: b for b in boosts}


def boost_words(boost: ShareBoost | None, now: Any = None) -> str:
    """``share 3 until Dec 20 00:00:00 UTC (then 1)`` for an active temporary share; one not begun
    says from when (``share 3 from … until …``); "" for None."""
    if boost is None:
        return ""
    starts = boost.starts_at if boost.applied_at is None else None
    return boost_text(boost.shares, boost.ends_at, boost.base_shares, now, starts=starts)


def wait_for_ticks() -> None:
    """Inside a transaction: every cluster's tick lock, in id order (``scheduler.tick.wait_for_tick``),
    held until the transaction ends: the ticks in flight commit first, and none starts meanwhile.
    Taken first, before any budget row (docs/locking.md): a hold, and every admin save of a budget
    (its caps, parent, hold: brk39)."""
    from scheduler.models import Cluster  # local: budgets does not import scheduler at load
    from scheduler.tick import wait_for_tick

    for cluster_id in Cluster.objects.order_by("pk").values_list("pk", flat=True):
        wait_for_tick(cluster_id)


def do_set_hold(budget: Budget, hold: bool, *, actor: object | None = None, note: str = "") -> Budget:
    """Put a budget on hold (no new attempts, §3.7) or release it; records the change and
    requests a tick of every cluster. A hold first waits for the ticks in flight (each cluster's
    tick lock, in id order: ``scheduler.tick.wait_for_tick``), so no tick whose snapshot read the
    budget before the hold starts its work after it (brk38, docs/locking.md)."""
    with transaction.atomic():
        if hold:
            wait_for_ticks()
        budget = Budget.objects.select_for_update().get(pk=budget.pk)
        if budget.hold != hold:
            budget.hold = hold
            budget.save(update_fields=["hold"])
            kind = ShareChange.Kind.HOLD if hold else ShareChange.Kind.RELEASE
            _record(budget, kind, budget.shares, budget.shares, actor, note)
            request_ticks_everywhere()
    return budget


def do_archive_budget(budget: Budget, *, actor: object | None = None, note: str = "") -> Budget:
    """Archive a budget and its live descendants (§3.7): new submissions are refused, running and
    pending work carries on. Idempotent. Records each newly archived budget; requests a tick of
    every cluster. Raises BudgetError ``budget_root`` for the root (:func:`budgets.rules.archive_problem`)."""
    if (refused := rules.archive_problem(budget.path, root=budget.parent_id is None)) is not None:
        raise BudgetError(*refused)
    with transaction.atomic():
        now = timezone.now()
        # Lock the subtree, then read it again until no budget was added meanwhile: a child
        # created under one of its budgets while this waited for that budget's lock (the
        # creation's share lock) committed before the lock was granted, and must be archived
        # too, not left live under an archived parent. Once every budget of the subtree is
        # locked, no creation under one of them can commit before this does.
        locked: set[int] = set()
        ids = subtree_ids([budget.id])
        while ids - locked:
            list(Budget.objects.select_for_update().filter(pk__in=ids - locked).order_by("pk").values_list("pk"))
            locked |= ids
            ids = subtree_ids([budget.id])
        newly = list(Budget.objects.filter(pk__in=ids, archived_at__isnull=True).order_by("pk"))
        Budget.objects.filter(pk__in=[b.pk for b in newly]).update(archived_at=now)
        for b in newly:
            _record(b, ShareChange.Kind.ARCHIVE, b.shares, b.shares, actor, note)
        request_ticks_everywhere()
    budget.refresh_from_db()
    return budget
