"""Who may do what with which budget, memberships, and API tokens.

Membership of a budget gives access to every budget under it (DESIGN.md §1); a
``manager`` membership also lets its holder cancel other people's workloads there.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from knox.models import AuthToken

from accounts.models import ApiTokenInfo, Membership, User
from budgets.models import Budget
from budgets.rules import membership_problem, submission_problem
from budgets.services import ancestor_ids, archived_children_work, load_tree, subtree_ids
from config.errors import ServiceError
from scheduler.gpu_text import invisible_problem


class AccountError(ServiceError):
    """A refused account change; ``code`` is stable, ``field`` names the offending input."""


def user_memberships(user: User) -> dict[int, str]:
    """``user``'s memberships, budget id → role (one query; empty for an anonymous user). A view
    loads them once per request and passes them to the helpers below, which then ask nothing."""
    if not user.is_authenticated:
        return {}
    return dict(Membership.objects.filter(user=user).values_list("budget_id", "role"))


def member_roles(
    user: User, budget: Budget, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> set[str]:
    """Roles ``user`` holds on ``budget`` or any of its ancestors (empty: no access).
    ``memberships``: ``user_memberships(user)`` already loaded this request (no query then)."""
    if not user.is_authenticated:
        return set()
    ids = ancestor_ids(budget, tree)
    if memberships is not None:
        return {memberships[i] for i in ids if i in memberships}
    return set(Membership.objects.filter(user=user, budget_id__in=ids).values_list("role", flat=True))


def is_member(
    user: User, budget: Budget, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> bool:
    """True when ``user`` is a member (any role) of ``budget`` or of an ancestor."""
    return bool(member_roles(user, budget, tree, memberships))


def is_manager(
    user: User, budget: Budget, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> bool:
    """True when ``user`` holds the ``manager`` role on ``budget`` or an ancestor."""
    return Membership.Role.MANAGER in member_roles(user, budget, tree, memberships)


def accessible_budget_ids(
    user: User, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> set[int]:
    """Ids of every budget ``user`` has access to: their memberships and everything under them."""
    if not user.is_authenticated:
        return set()
    roots = (
        list(memberships)
        if memberships is not None
        else list(Membership.objects.filter(user=user).values_list("budget_id", flat=True))
    )
    return subtree_ids(roots, load_tree() if tree is None else tree)


def submit_budget_paths(
    user: User,
    tree: dict[int, Budget] | None = None,
    memberships: dict[int, str] | None = None,
    accessible: set[int] | None = None,
) -> list[str]:
    """Paths, sorted, of the budgets ``user`` may submit to (a superuser: every one), by the rule a
    submission is judged by (:func:`budgets.rules.submission_problem`: live leaves, not the parent
    of archived sub-budgets with unfinished work): the
    one list of ``me/``'s ``submit_budgets``, the submit page's choices and the default of a
    submission that names no budget (``scheduler.services.do_submit_workload``: the only one).
    ``accessible``: :func:`accessible_budget_ids` already computed this request."""
    tree = load_tree() if tree is None else tree
    if user.is_superuser:
        allowed = set(tree)
    else:
        allowed = accessible_budget_ids(user, tree, memberships) if accessible is None else accessible
    live_parents = {b.parent_id for b in tree.values() if b.archived_at is None}
    with_archived_children = {b.parent_id for b in tree.values() if b.archived_at is not None}

    def takes_work(b: Budget) -> bool:
        # the submission's own rule (budgets.rules.submission_problem), with the same inputs: a
        # parent of archived sub-budgets with unfinished work was offered, then refused (words63);
        # the count (one query) only where it could decide: a live budget with no live sub-budget
        # but an archived one
        has_children, archived = b.id in live_parents, b.archived_at is not None
        counted = b.id in with_archived_children and not (has_children or archived)
        work = archived_children_work(b, tree) if counted else 0
        return (
            submission_problem(b.path, has_children=has_children, archived=archived, archived_children_work=work)
            is None
        )

    return sorted(tree[b].path for b in allowed if b in tree and takes_work(tree[b]))


def archived_budget_paths(
    user: User, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> list[str]:
    """Paths, sorted, of the archived leaf budgets ``user`` was given: what a submission naming no
    budget names when :func:`submit_budget_paths` is empty (try56)."""
    tree = load_tree() if tree is None else tree
    allowed = set(tree) if user.is_superuser else accessible_budget_ids(user, tree, memberships)
    parents = {b.parent_id for b in tree.values()}
    return sorted(tree[b].path for b in allowed if b in tree and tree[b].archived_at is not None and b not in parents)


def do_add_membership(user: User, budget: Budget, role: str = Membership.Role.MEMBER) -> Membership:
    """Make ``user`` a member of ``budget`` with ``role`` (updates the role if already a member).

    Raises AccountError ``invalid_role`` for an unknown role, ``budget_archived`` for a new member
    of an archived budget (:func:`budgets.rules.membership_problem`; a member it has changes role).
    """
    if role not in Membership.Role.values:
        raise AccountError("invalid_role", "role", f"Role must be one of {', '.join(Membership.Role.values)}.")
    with transaction.atomic():
        if not Membership.objects.filter(user=user, budget=budget).exists() and (
            problem := membership_problem(budget.path, archived=budget.archived)
        ):
            raise AccountError(*problem)
        membership, created = Membership.objects.select_for_update().get_or_create(
            user=user, budget=budget, defaults={"role": role}
        )
        if not created and membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    return membership


def create_api_token(
    user: User,
    *,
    expiry: timedelta | None = None,
    name: str = "",
    kind: str = ApiTokenInfo.Kind.LOGIN,
    made_with_login: bool = False,
) -> tuple[AuthToken, str]:
    """Create a knox API token for ``user``; returns the token row and the plaintext (shown once).

    Only knox's digest (SHA-512 hex) and the first 15 characters (``token_key``, to tell tokens
    apart) are stored; ``expiry`` None means it never expires. ``name``, ``kind`` (login or
    personal) and ``made_with_login`` (:func:`ends_with_logins`) go into ``ApiTokenInfo``.
    """
    with transaction.atomic():
        instance, token = AuthToken.objects.create(user=user, expiry=expiry)
        ApiTokenInfo.objects.create(token=instance, name=name[:100], kind=kind, made_with_login=made_with_login)
    return instance, token


def ends_with_logins(token: AuthToken) -> bool:
    """Whether ``token`` ends when its user's login tokens do (a password change,
    :func:`end_login_tokens`): a login token (or one with no ``ApiTokenInfo``, counted as one) and a
    personal token made with such a token (``made_with_login``, brk50: a stolen login token made a
    personal one that the password change meant to shut the thief out left working)."""
    info = ApiTokenInfo.objects.filter(token=token).values_list("kind", "made_with_login").first()
    return info is None or info[0] != ApiTokenInfo.Kind.PERSONAL or info[1]


MAX_TOKEN_DAYS = 3650


def login_token_expiry() -> timedelta | None:
    """How long a login token works: ``FAIRWAY_LOGIN_TOKEN_DAYS`` days from its creation, fixed
    (a new ``fairway login`` makes a new one); None (the setting 0): until revoked."""
    days = settings.FAIRWAY["LOGIN_TOKEN_DAYS"]
    return timedelta(days=days) if days else None


def check_token_name(name: object) -> None:
    """Raise AccountError ``invalid_name`` unless ``name`` is a token's name: 1-100 characters (once
    stripped), no NUL, nothing invisible that shows it as another's on the tokens page."""
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > 100 or "\x00" in name:
        raise AccountError("invalid_name", "name", "A token name is 1-100 characters.")
    if problem := invisible_problem(name):  # a name that shows as another's on the tokens page
        raise AccountError("invalid_name", "name", f"The token name {problem}.")


COMMAND_TOKEN_NAME = "manage.py create_token"  # noqa: S105 -- a name, not a secret
"""The name of a token ``manage.py create_token`` makes without ``--name``: it said "login" with no
name on the tokens page, as if a login had made it (tryout45)."""


def do_create_personal_token(
    user: User, name: str, expiry_days: int | None = None, via: AuthToken | None = None
) -> tuple[AuthToken, str]:
    """A personal API token named ``name`` (1-100 characters) for scripts and the CLI, valid
    ``expiry_days`` days (None: until revoked). Returns the row and the plaintext, shown once.
    ``via``: the token the request came with (None: a session's): the new token expires no later,
    so a stolen login token cannot make one that outlives it, and it is made only while ``via``
    still exists, under :func:`lock_tokens_of` (brk49); made with a login token, it ends with the
    login tokens at a password change (:func:`ends_with_logins`, brk50).

    Raises AccountError ``invalid_name``, ``invalid_expiry`` (1..3650 days, or past ``via``'s
    expiry) or ``authentication_failed`` (401: ``via`` deleted meanwhile, a logout).
    """
    not_after = getattr(via, "expiry", None)
    check_token_name(name)
    if expiry_days is not None and (
        not isinstance(expiry_days, int) or isinstance(expiry_days, bool) or not 1 <= expiry_days <= MAX_TOKEN_DAYS
    ):
        raise AccountError("invalid_expiry", "expiry_days", f"A token lives 1 to {MAX_TOKEN_DAYS} days (or forever).")
    if not_after is not None:
        most = (not_after - timezone.now()).days
        if expiry_days is None or expiry_days > most:
            room = f"expiry_days at most {most} days" if most >= 1 else "none can be made with it"
            raise AccountError(
                "invalid_expiry",
                "expiry_days",
                f"The token this request came with expires {not_after:%Y-%m-%d %H:%M} UTC, and a token it "
                f"makes expires no later ({room}): make a longer-lived token on the tokens page.",
            )
    expiry = timedelta(days=expiry_days) if expiry_days is not None else None
    with transaction.atomic():
        lock_tokens_of(user)
        if via is not None and not AuthToken.objects.filter(pk=via.pk).exists():
            raise AccountError(
                "authentication_failed",
                None,
                "This token was deleted (a logout) meanwhile: nothing made.",
                status=401,
            )
        return create_api_token(
            user,
            expiry=expiry,
            name=name.strip(),
            kind=ApiTokenInfo.Kind.PERSONAL,
            made_with_login=via is not None and ends_with_logins(via),
        )


def lock_tokens_of(user: User) -> None:
    """Take ``user``'s row for a change of their tokens (``FOR NO KEY UPDATE``: inserts naming the
    user, a submission's, go on): a token made with a token and "log out everywhere" one at a
    time (brk49). SQLite: one writer already."""
    list(User.objects.select_for_update(no_key=True).filter(pk=user.pk).values_list("pk", flat=True))


def do_logout_everywhere(user: User) -> int:
    """Delete every API token of ``user`` (``POST auth/logout/ {"all": true}``); returns how many.
    Under :func:`lock_tokens_of`: a token made meanwhile with one of them (a thief's) is deleted
    too or refused, never left (brk49: it was inserted unseen by the uncommitted delete)."""
    with transaction.atomic():
        lock_tokens_of(user)
        _total, by_model = AuthToken.objects.filter(user=user).delete()
    return by_model.get(AuthToken._meta.label, 0)


def end_login_tokens(user: User) -> int:
    """Delete ``user``'s login tokens (those a password login made, which expire; a token with no
    ``ApiTokenInfo`` counts as one) and the personal tokens made with them (:func:`ends_with_logins`:
    a thief's, made with the stolen login token), and keep their other personal tokens (the tokens
    page's, made on purpose, like GitHub's personal access tokens): what a password change does
    (``User.save``, docs/deploy.md, "API tokens: a password change"). Returns how many were deleted."""
    kept = ApiTokenInfo.objects.filter(
        token__user=user, kind=ApiTokenInfo.Kind.PERSONAL, made_with_login=False
    ).values_list("token_id", flat=True)
    with transaction.atomic():
        lock_tokens_of(user)
        _total, by_model = AuthToken.objects.filter(user=user).exclude(pk__in=list(kept)).delete()
    return by_model.get(AuthToken._meta.label, 0)


def password_changed_words(login_tokens_ended: int) -> str:
    """What a person reads after a password change (the admin's pages, ``manage.py
    changepassword``): how many login tokens it ended, and that personal tokens keep working."""
    ended = f"{login_tokens_ended} login token{'' if login_tokens_ended == 1 else 's'}"
    return (
        f"The password change ended {ended} (made by logging in with the password, or with such a token) and "
        "every other web session; personal API tokens (the tokens page's) keep working: revoke them there if "
        "the password was stolen."
    )


def do_revoke_token(user: User, token_key: str) -> int:
    """Delete ``user``'s tokens whose ``token_key`` (first 15 characters) is ``token_key``.

    Returns how many were deleted; raises AccountError ``not_found`` (404) when none is ``user``'s
    (another user's token is reported the same way: nobody learns that it exists).
    """
    if not isinstance(token_key, str) or not token_key or "\x00" in token_key:
        raise AccountError("not_found", None, "No such token.", status=404)
    _total, by_model = AuthToken.objects.filter(user=user, token_key=token_key).delete()
    deleted = by_model.get(AuthToken._meta.label, 0)
    if not deleted:
        raise AccountError("not_found", None, "No such token.", status=404)
    return deleted
