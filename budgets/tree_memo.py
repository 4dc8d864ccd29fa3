"""The budget tree kept per web process while no budget changed (issue 15).

Every API request reads the whole tree (scoping, paths, the submission's checks): one query and
a model instance per budget, ~0.8 ms of a 8–10 ms request at 25 budgets. The tree changes a few
times a day, so a process keeps it under a version (:class:`config.memo.VersionedMemo`: one cache
read per request). Every write to a budget forgets the version: ``Budget``'s ``save``/``delete``
signals (``budgets.apps``) and its queryset's ``update``/``bulk_create``/``bulk_update``/``delete``
(``budgets.models.BudgetQuerySet``).

A request reads the version once (:func:`token`) and passes it to the reads it makes together:
the tree, and the requesting user's memberships (:func:`shared_memberships`), which every
membership write forgets the same way (``accounts.apps``, ``accounts.models.MembershipQuerySet``):
the web tier's memberships query per request is gone, the cache read is the tree's. The budget
paths of a tree are computed once per tree object (:func:`paths_of`).

The trees handed out are shared by the requests of a process: read them, never change them
(budget changes go through ``budgets.services`` on rows of their own, ``select_for_update``).
:func:`budgets.services.load_tree` stays the plain reading and the oracle
(``tests/api/test_web_tier.py``).
"""

from __future__ import annotations

from typing import Any

from budgets.models import Budget
from config.memo import READ, VersionedMemo

MEMO = VersionedMemo("fairway:budget-tree-version", per_request=True)
_paths: tuple[dict[int, Budget], dict[int, str]] | None = None  # the last tree and its paths


def token(request: Any = None) -> Any:
    """The version one request's reads share (one cache read; with ``request``, the one it read
    with the other memos' versions, ``config.memo.request_tokens``): pass it to the functions below."""
    return MEMO.token(request)


def shared_tree(token: Any = READ) -> dict[int, Budget]:
    """Every budget by id, as :func:`budgets.services.load_tree`; loaded again only when a budget
    changed since this process last loaded it (one cache read otherwise, none with ``token``).
    Read-only."""
    from budgets.services import load_tree

    return MEMO.get("tree", load_tree, token)


def shared_memberships(user: Any, token: Any = READ) -> dict[int, str]:
    """``accounts.services.user_memberships(user)`` (budget id → role), kept under the tree's
    version, which every membership write forgets. Read-only."""
    from accounts.services import user_memberships

    if not user.is_authenticated:
        return {}
    return MEMO.get(("memberships", user.pk), lambda: user_memberships(user), token)


def paths_of(tree: dict[int, Budget]) -> dict[int, str]:
    """``budgets.services.budget_paths(tree)``, computed once per tree object (a kept tree is
    never changed, so its paths do not change either). Read-only."""
    global _paths
    last = _paths
    if last is not None and last[0] is tree:
        return last[1]
    from budgets.services import budget_paths

    paths = budget_paths(tree)
    _paths = (tree, paths)
    return paths


def forget() -> None:
    """A budget changed: every process reloads the tree at its next request."""
    MEMO.forget()
