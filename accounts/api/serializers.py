"""Serializers of the accounts API. Fields are listed explicitly."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from accounts.models import Membership, User
from accounts.services import submit_budget_paths
from config.serializers import FieldsOnceMixin, RefusesUnknownFieldsMixin


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False, style={"input_type": "password"})


class MembershipSerializer(FieldsOnceMixin, serializers.ModelSerializer):
    budget = serializers.SerializerMethodField()
    # As the budgets page's "archived" badge (``Budget.archived``): the budget takes no new work.
    archived = serializers.SerializerMethodField()

    class Meta:
        model = Membership
        fields = ["budget_id", "budget", "role", "archived"]
        read_only_fields = fields

    def get_budget(self, obj: Membership) -> str:
        return (self.context.get("budget_paths") or {}).get(obj.budget_id, str(obj.budget_id))

    def get_archived(self, obj: Membership) -> bool:
        budget = (self.context.get("budget_tree") or {}).get(obj.budget_id)
        return bool(budget is not None and budget.archived)


class MeSerializer(FieldsOnceMixin, serializers.ModelSerializer):
    """The requester: identity, memberships, and the budget paths they may submit to."""

    memberships = MembershipSerializer(many=True, read_only=True)
    # Blank for an account made without one (the admin's add form): the model field's
    # ``blank=True`` is dropped from a read-only field, and the schema said ``format: email``.
    email = serializers.EmailField(read_only=True, allow_blank=True)
    submit_budgets = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = [
            "id",
            "username",
            "email",
            "first_name",
            "last_name",
            "is_staff",
            "is_superuser",
            "memberships",
            "submit_budgets",
        ]
        read_only_fields = fields

    def get_submit_budgets(self, obj: User) -> list[str]:
        tree: dict[int, Any] = self.context.get("budget_tree") or {}
        return submit_budget_paths(obj, tree, accessible=self.context.get("accessible_budget_ids") or set())


class TokenSerializer(serializers.Serializer):
    """One API token of the requester. ``id`` is its first 15 characters (all that is stored
    besides a digest); ``current`` marks the token of this request."""

    id = serializers.CharField(source="token_key")
    name = serializers.SerializerMethodField()
    kind = serializers.SerializerMethodField()
    created = serializers.DateTimeField()
    expiry = serializers.DateTimeField(allow_null=True)
    current = serializers.SerializerMethodField()

    def _info(self, obj: Any) -> Any:
        return getattr(obj, "info", None)

    def get_name(self, obj: Any) -> str:
        info = self._info(obj)
        return info.name if info else ""

    def get_kind(self, obj: Any) -> str:
        info = self._info(obj)
        return info.kind if info else "login"

    def get_current(self, obj: Any) -> bool:
        request = self.context.get("request")
        auth = getattr(request, "auth", None)
        return getattr(auth, "digest", None) == obj.digest


class TokenCreateSerializer(RefusesUnknownFieldsMixin, serializers.Serializer):
    """A typo such as ``expires_in`` made a token that never expires: unknown fields are a 400."""

    name = serializers.CharField(max_length=100)
    # No min/max here: ``do_create_personal_token`` refuses a bad expiry in the words the tokens
    # page shows too (DRF's "Ensure this value is greater than or equal to 1." was a second wording).
    expiry_days = serializers.IntegerField(
        required=False, allow_null=True, help_text="1 to 3650 days; null: until revoked"
    )


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(help_text="the token itself: shown this once, never again")
