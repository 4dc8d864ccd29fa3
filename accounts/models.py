"""Users and budget memberships."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractUser, UserManager
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models, transaction
from django.dispatch import Signal

from budgets.models import TreeMemoQuerySet
from budgets.rules import membership_problem
from config.memo import ForgettingQuerySet, VersionedMemo


def validate_posix_groups(value: object) -> None:
    """A list of at most 64 distinct gids."""
    if (
        not isinstance(value, list)
        or len(value) > 64
        or any(type(g) is not int or not 0 <= g <= MAX_POSIX_ID for g in value)
    ):
        raise ValidationError("a list of at most 64 group ids (integers 0..4294967294)")


MAX_POSIX_ID = 2**32 - 2

POSIX_GROUPS_HELP = "extra group ids, e.g. 2000, 2001 (or the JSON list [2000, 2001])"


def system_gids(gids: list[int]) -> list[int]:
    """The system groups among ``gids`` (gid 0, or below ``FAIRWAY_POSIX_MIN_GID``, the hosts'
    first normal gid: useradd's ``GID_MIN``, 1000), each once, in order: root-equivalent on a
    host (``disk``, ``docker``, ``shadow``), so agents need both root consents for them. The
    agent's rule (``agent.runtime.isolation.system_ids``)."""
    from agent.runtime.isolation import system_ids

    return system_ids(gids, settings.FAIRWAY_POSIX_MIN_GID)


def system_uid(uid: int) -> bool:
    """Whether ``uid`` is a system account's (0, or below ``FAIRWAY_POSIX_MIN_UID``, the hosts'
    first normal uid: the agents' ``isolation.nss_min_uid``, useradd's ``UID_MIN``, 1000): agents
    need both root consents for it. The agent's rule (``agent.runtime.isolation.system_ids``)."""
    from agent.runtime.isolation import system_ids

    return bool(system_ids([uid], settings.FAIRWAY_POSIX_MIN_UID))


def parse_posix_groups(text: str) -> list[int]:
    """Group ids as an admin types them: ``2000, 2001``, ``2000 2001`` or the JSON list
    ``[2000, 2001]``; empty: none. Raises the validator's ValidationError on anything else."""
    words = text.strip().removeprefix("[").removesuffix("]").replace(",", " ").split()
    named = next((w for w in words if not w.lstrip("-").isdigit() and w.isascii() and w.isprintable()), None)
    if named is not None:  # try43: `docker` typed by name met only the list's message
        raise ValidationError(f"{named}: group ids are numbers; `getent group {named}` on a host gives its gid")
    if not all(w.isascii() and w.isdigit() for w in words):
        validate_posix_groups(None)  # the one message for a bad list
    groups = [int(w) for w in words]
    validate_posix_groups(groups)
    return groups


class UserQuerySet(ForgettingQuerySet):
    """Bulk writes of users (``update``, ``bulk_update``, ``bulk_create``, ``delete``) forget the
    token rows and users the web processes keep (``accounts.auth.kept_token_rows``), as saves and
    deletes do through signals (``accounts.apps``): a user deactivated by
    ``User.objects.filter(...).update(is_active=False)`` is refused at its next request."""

    def memo(self) -> VersionedMemo:
        from accounts.auth import TOKENS

        return TOKENS


class TokenQuerySet(ForgettingQuerySet):
    """Bulk writes of knox's API tokens forget the token rows the web processes keep, as
    :class:`UserQuerySet` does for users (a token made to expire by ``update()`` is refused at
    its next request). knox's model is third-party: ``accounts.apps`` makes its manager build
    these (:func:`forget_token_bulk_writes`)."""

    def memo(self) -> VersionedMemo:
        from accounts.auth import TOKENS

        return TOKENS


def forget_token_bulk_writes() -> None:
    """Make ``AuthToken.objects`` (and so the related ``user.auth_token_set``, whose manager class
    Django derives from it on first use) build :class:`TokenQuerySet`. The manager instance is
    the model's own copy (Django copies an abstract model's managers), so giving it a subclass
    of knox's manager changes nothing else of knox; a manager of our own on the model would need
    a swapped token model (``KNOX_TOKEN_MODEL``: a new table). Called once from ``ready()``."""
    from knox.models import AuthToken

    manager = AuthToken._default_manager
    if issubclass(manager._queryset_class, TokenQuerySet):
        return
    manager.__class__ = type(
        "ForgettingAuthTokenManager", (manager.__class__,), {"_queryset_class": TokenQuerySet, "__module__": __name__}
    )


password_changed = Signal()
"""Sent by :meth:`User.save` after a password change, with ``user`` and ``login_tokens_ended``
(``manage.py changepassword`` listens, to say it)."""


class FairwayUserManager(UserManager.from_queryset(UserQuerySet)):  # type: ignore[misc]
    """Django's ``UserManager`` (``create_user``, ``create_superuser``, ``get_by_natural_key``)
    over :class:`UserQuerySet`."""


class User(AbstractUser):
    """A Fairway user (researcher, leader or operator). Custom from the start.

    ``posix_uid``/``posix_gid``/``posix_groups``: the POSIX identity the user's attempts run under
    on every host (docs/isolation.md), set by an admin. Left empty, each agent maps the user name
    through its host's NSS/LDAP, else runs the attempts under a dedicated account ``fw-<name>``.
    """

    posix_uid = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        unique=True,
        validators=[MaxValueValidator(MAX_POSIX_ID)],
        help_text="uid attempts run under on every host (empty: the host maps the user name, "
        "else a dedicated fw-<name> account). 0 (root) is refused by agents unless allowed.",
    )
    posix_gid = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_POSIX_ID)],
        help_text="primary gid (empty: the uid's own group on the host, else the uid)",
    )
    posix_groups = models.JSONField(
        default=list, blank=True, validators=[validate_posix_groups], help_text="extra group ids, e.g. [2000, 2001]"
    )

    objects = FairwayUserManager()

    login_tokens_ended: int | None = None
    """How many login tokens the last :meth:`save` ended by changing the password (None: it changed
    none): what the pages that change it say (``accounts.services.password_changed_words``)."""

    class Meta:
        db_table = "accounts_user"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; a changed password (``set_password`` then ``save``: the admin's pages, ``manage.py
        changepassword``; not a login's hash upgrade, which Django saves with ``_password`` unset)
        of an existing user ends their login tokens, in the same transaction
        (``accounts.services.end_login_tokens``, docs/deploy.md, "API tokens: a password change").
        Other web sessions end by Django's session hash."""
        from accounts.services import end_login_tokens

        changed = self._password is not None and not self._state.adding
        with transaction.atomic():
            super().save(*args, **kwargs)
            self.login_tokens_ended = end_login_tokens(self) if changed else None
        if changed:
            password_changed.send(sender=type(self), user=self, login_tokens_ended=self.login_tokens_ended)

    def clean(self) -> None:
        super().clean()
        if self.posix_uid is None and (self.posix_gid is not None or self.posix_groups):
            raise ValidationError({"posix_uid": "set a uid with a gid or groups"})


class MembershipQuerySet(TreeMemoQuerySet):
    """Bulk writes forget the memberships the web processes keep (``budgets.tree_memo``), as saves
    and deletes do (``accounts.apps``)."""


class Membership(models.Model):
    """Membership of a budget; gives access to every leaf budget under it (DESIGN.md §1)."""

    class Role(models.TextChoices):
        MEMBER = "member", "member"
        MANAGER = "manager", "manager"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    budget = models.ForeignKey("budgets.Budget", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "budget"], name="membership_unique_user_budget")]

    def __str__(self) -> str:
        return f"{self.user} in {self.budget}"

    def clean(self) -> None:
        """What the admin may save (the memberships admin, a user's memberships inline): no new
        membership of an archived budget (:func:`budgets.rules.membership_problem`; admin47); one it
        has may change role."""
        super().clean()
        if self.budget_id is None:
            return
        same = self.pk is not None and Membership.objects.filter(pk=self.pk, budget_id=self.budget_id).exists()
        if not same and (problem := membership_problem(self.budget.path, archived=self.budget.archived)):
            raise ValidationError({problem[1]: problem[2]})


class ApiTokenInfo(models.Model):
    """What Fairway adds to a knox token (which stores only a digest and the first characters):
    a name its owner gave it and whether it is a personal token or one made by a login."""

    class Kind(models.TextChoices):
        LOGIN = "login", "login"
        PERSONAL = "personal", "personal"

    token = models.OneToOneField("knox.AuthToken", on_delete=models.CASCADE, primary_key=True, related_name="info")
    name = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LOGIN)
    made_with_login = models.BooleanField(
        default=False,
        help_text="a personal token made with a login token (or with a token made so): a password change ends it "
        "with the login tokens (brk50)",
    )

    def __str__(self) -> str:
        return f"{self.kind} token {self.name or self.token_id[:8]}"


class OidcIdentity(models.Model):
    """A user's account at the OpenID Connect provider: the provider's ``iss`` and the stable
    ``sub`` it gives that person. Single sign-on finds the user by this pair first (then, once, by
    a verified email; docs/deploy.md, "Single sign-on")."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "OIDC identity"
        verbose_name_plural = "OIDC identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique_sub")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
