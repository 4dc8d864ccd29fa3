"""The budget tree's structural refusals as pure predicates: no ORM, no clock.

One statement of each rule (STYLE.md), called by every surface that applies it: the services
(``do_submit_workload``, ``do_create_budget``), the admin (``Budget.clean`` through
:func:`budgets.models.placement_problem`) and both scenario backends (the memory backend calls
these directly, the db backend through the services). Each returns ``(code, field, message)``, the
refusal as :class:`budgets.services.BudgetError` and :class:`scheduler.services.SubmissionError`
carry it, or None when the rule allows the change.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from fairway_cli.numbers import instant_text
from scheduler.gpu_text import invisible_problem

Refusal = tuple[str, str, str]
"""``(code, field, message)``: a refusal's stable code, the input field it names, its sentence."""


def submission_problem(
    path: str, *, has_children: bool, archived: bool, archived_children_work: int = 0
) -> Refusal | None:
    """Why budget ``path`` takes no new workload, or None: workloads are submitted to leaves
    (``not_a_leaf``, DESIGN.md §3.7) and an archived budget takes no new work
    (``budget_archived``). ``has_children``: it has a live sub-budget (archived ones do not make
    it a parent, :func:`budgets.services.is_leaf`). ``archived_children_work``: the unfinished
    workloads under its archived sub-budgets (:func:`budgets.services.archived_children_work`):
    while there are some it is still their parent, whose own queue the dispatch would serve before
    theirs (the state :func:`parent_problem` rules out the other way round; brk63), so it is
    ``not_a_leaf`` until they end."""
    if has_children:
        return "not_a_leaf", "budget", f"Budget {path} has sub-budgets; submit to one of them."
    if archived_children_work:
        n = archived_children_work
        return (
            "not_a_leaf",
            "budget",
            f"Budget {path}'s archived sub-budgets still have {n} unfinished workload{'s' if n != 1 else ''}: "
            "it takes work of its own once they end (its own queue would be served before theirs).",
        )
    if archived:
        return "budget_archived", "budget", _takes_no_new_work(path)
    return None


def _takes_no_new_work(path: str) -> str:
    return f"Budget {path} is archived and takes no new work."


def membership_problem(path: str, *, archived: bool) -> Refusal | None:
    """Why budget ``path`` takes no new member, or None: an archived budget takes no new work, so a
    member given it now could submit nothing (``budget_archived``, in :func:`submission_problem`'s
    words; admin47: the admin and ``accounts.services.do_add_membership`` added one silently). A
    member it has keeps its membership and may change role."""
    if archived:
        return "budget_archived", "budget", _takes_no_new_work(path)
    return None


def submitted_limit(budget_limit: int | None, setting: int) -> int:
    """The most pending + running workloads one user may hold when submitting to a budget whose own
    limit is ``budget_limit`` (``Budget.max_submitted_per_user``, set by leadership in the admin):
    that limit, or, where it is empty, ``setting`` (``FAIRWAY_MAX_SUBMITTED_PER_USER``). 0: no limit.
    The user's workloads are counted in every budget, as the setting counts them; only the number
    is the budget's (thr47)."""
    return setting if budget_limit is None else budget_limit


def submitted_limit_words(budget_limit: int | None) -> str:
    """A budget's own submission limit (``Budget.max_submitted_per_user``) in words, as its change
    history says it: ``250``, ``no limit`` (0), ``FAIRWAY_MAX_SUBMITTED_PER_USER`` (empty: the
    setting's, :func:`submitted_limit`)."""
    if budget_limit is None:
        return "FAIRWAY_MAX_SUBMITTED_PER_USER"
    return f"{budget_limit:,}" if budget_limit else "no limit"


def archived_growth_problem(path: str, grown: list[str]) -> Refusal | None:
    """Why a pending workload staying in archived budget ``path`` may not take a change, or None:
    archiving refuses new work only (DESIGN.md §3.7), so its pending work may shrink but not grow
    (``budget_archived``; docs/jobs.md "Changing a pending workload"). ``grown``: the changes that
    add demand, in words (``scheduler.services.archived_growth``)."""
    if not grown:
        return None
    return (
        "budget_archived",
        "budget",
        f"Budget {path} is archived: its pending work may shrink but not grow ({', '.join(grown)}). "
        "Move it to a live budget, or cancel it.",
    )


def parent_problem(path: str, *, archived: bool, unfinished: int) -> Refusal | None:
    """Why budget ``path`` takes no new sub-budget, or None: it is archived (``budget_archived``)
    or has ``unfinished`` workloads of its own (``parent_has_work``; DESIGN.md §3.7: workloads are
    submitted to leaves, and a parent's own queue would be served ahead of its children's,
    docs/policy.md). ``unfinished``: its own pending, starting, running or preempting workloads."""
    if archived:
        return "budget_archived", "parent", f"Budget {path} is archived."
    if unfinished:
        return (
            "parent_has_work",
            "parent",
            f"Budget {path} has {unfinished} unfinished workload{'s' if unfinished != 1 else ''}: "
            "workloads are submitted to leaves, so it takes sub-budgets once they end "
            "(let them finish or cancel them first).",
        )
    return None


def archive_problem(path: str, *, root: bool) -> Refusal | None:
    """Why budget ``path`` may not be archived, or None: the root never is (``budget_root``).
    Archiving takes a budget's whole subtree (DESIGN.md §3.7), so the root's archived every budget:
    every submission refused, and no budget could be made again, since an archived parent takes no
    sub-budget (:func:`parent_problem`) and the tree keeps its one root (brk63)."""
    if not root:
        return None
    return (
        "budget_root",
        "budget",
        f"Budget {path} is the root: archiving it would archive every budget and no budget could be made "
        "again; archive the programs or projects under it instead.",
    )


def boost_problem(path: str, *, archived: bool, root: bool = False) -> Refusal | None:
    """Why budget ``path`` takes no temporary share, or None: an archived budget's shares count
    for nothing (``budget_archived``; docs/standing.md "Temporary shares"), nor do the root's, the
    whole tree's share whatever they are (``budget_root``: ``s(root) = 1``, DESIGN.md §1; brk58)."""
    if root:
        return (
            "budget_root",
            "budget",
            f"Budget {path} is the root: its share is the whole tree's whatever its shares; "
            "give one of the budgets under it a temporary share.",
        )
    if archived:
        return "budget_archived", "budget", f"Budget {path} is archived: its shares count for nothing."
    return None


def boost_shares_problem(path: str, shares: int, current: int, *, from_now: bool) -> Refusal | None:
    """Why a temporary share of ``shares`` for budget ``path``, which has ``current`` shares, changes
    nothing, or None: one from now of the shares it has (``same_shares``; lead47: "added
    successfully", then "1 → 1 @18:00" on the budgets page). One starting later is kept: an edit
    before its start is the value it returns to (docs/standing.md "Temporary shares")."""
    if not from_now or shares != current:
        return None
    word = "share" if current == 1 else "shares"
    return (
        "same_shares",
        "shares",
        f"Budget {path} has {current} {word} now: a temporary share of {shares} from now changes nothing.",
    )


SCHEDULE_AHEAD_MAX = timedelta(days=366)
"""How far ahead an admin schedules a change: a drain's time (``scheduler.services.drain_time``)
and a temporary share's end (:func:`boost_until_problem`). A typed year (2062 for 2026) is refused,
not kept for ever (left59: a temporary share had no bound and became permanent)."""


def boost_until_problem(ends_at: datetime, now: datetime) -> Refusal | None:
    """Why a temporary share may not end at ``ends_at``, or None: at most
    :data:`SCHEDULE_AHEAD_MAX` after ``now`` (``until_too_far``; a lasting change is a shares
    edit, docs/standing.md "Temporary shares")."""
    if ends_at <= now + SCHEDULE_AHEAD_MAX:
        return None
    return (
        "until_too_far",
        "ends_at",
        f"A temporary share ends at most {SCHEDULE_AHEAD_MAX.days} days ahead: "
        f"{instant_text(ends_at, absolute=True)} is later (a lasting change is an edit of the budget's shares).",
    )


def lone_shares_note(path: str, *, live_siblings: int, root: bool = False) -> str | None:
    """What a change of budget ``path``'s shares (an edit, a temporary share) does when it has no
    live sibling, or None when it has one: shares weigh a budget against its live siblings only
    (DESIGN.md §1, ``normalized_shares``), so alone it keeps its parent's whole share, whatever its
    shares (try58: a deadline's temporary share of an only project was saved and changed nothing).
    ``live_siblings``: the siblings counted in its normalization (a share above 0); ``root``: it is
    the tree's root, which holds every cluster whole."""
    if live_siblings:
        return None
    if root:
        return (
            f"Budget {path} is the root: shares weigh a budget against its siblings only, so its shares "
            "change no share of a cluster (it holds every cluster whole)."
        )
    return (
        f"Budget {path} has no live sibling: shares weigh a budget against its siblings only, so its "
        "shares change no share of a cluster (it keeps its parent's whole share). To give its work more "
        "of a cluster, change the shares of a budget above it that has siblings."
    )


def budget_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a budget (None: it can): a path joins names with '/', so a name
    holding one could never be found by its path; nor an invisible or control character, by the
    rule of every other name (``scheduler.gpu_text.invisible_problem``; brk42: ``olmo\u200b`` showed
    as a second ``nlp/olmo`` that no path typed could name)."""
    if not name or "/" in name or len(name) > 100:
        return "A budget name is 1-100 characters without '/'."
    if problem := invisible_problem(name):
        return f"A budget name {problem}."
    return None
