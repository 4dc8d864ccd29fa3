"""The budget tree kept per web process while no budget changed (issue 15).

Every API request reads the whole tree (scoping, paths, the submission's checks): one query and
a model instance per budget, ~0.8 ms of a 8–10 ms request at 25 budgets. The tree changes a few
times a day, so a process keeps it under a version (:class:`config.memo.VersionedMemo`: one cache
read per request). Every write to a budget forgets the version: ``Budget``'s ``save``/``delete``
signals (``budgets.apps``) and its queryset's ``update``/``bulk_create``/``bulk_update``/``delete``
(``budgets.models.BudgetQuerySet``).

The trees handed out are shared by the requests of a process: read them, never change them
(budget changes go through ``budgets.services`` on rows of their own, ``select_for_update``).
:func:`budgets.services.load_tree` stays the plain reading and the oracle
(``tests/api/test_web_tier.py``).
"""

from __future__ import annotations

from budgets.models import Budget
from config.memo import VersionedMemo

MEMO = VersionedMemo("fairway:budget-tree-version")


def shared_tree() -> dict[int, Budget]:
    """Every budget by id, as :func:`budgets.services.load_tree`; loaded again only when a budget
    changed since this process last loaded it (one cache read otherwise). Read-only."""
    from budgets.services import load_tree

    return MEMO.get("tree", load_tree)


def forget() -> None:
    """A budget changed: every process reloads the tree at its next request."""
    MEMO.forget()
