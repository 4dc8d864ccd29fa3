"""Users and budget memberships."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """A Fairway user (researcher, leader or operator). Custom from the start."""

    class Meta:
        db_table = "accounts_user"


class Membership(models.Model):
    """Membership of a budget; gives access to every leaf budget under it (DESIGN.md §1)."""

    class Role(models.TextChoices):
        MEMBER = "member", "member"
        MANAGER = "manager", "manager"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    budget = models.ForeignKey("budgets.Budget", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "budget"], name="membership_unique_user_budget")]

    def __str__(self) -> str:
        return f"{self.user} in {self.budget}"


class ApiTokenInfo(models.Model):
    """What Fairway adds to a knox token (which stores only a digest and the first characters):
    a name its owner gave it and whether it is a personal token or one made by a login."""

    class Kind(models.TextChoices):
        LOGIN = "login", "login"
        PERSONAL = "personal", "personal"

    token = models.OneToOneField("knox.AuthToken", on_delete=models.CASCADE, primary_key=True, related_name="info")
    name = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LOGIN)

    def __str__(self) -> str:
        return f"{self.kind} token {self.name or self.token_id[:8]}"
