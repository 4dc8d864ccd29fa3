"""Serializers of the budget API. Fields are listed explicitly."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from budgets.models import Budget


class BudgetSerializer(serializers.ModelSerializer):
    """A node of the share tree as everybody may see it (shares are public), plus what the
    requester may do: ``access`` (member here or above) and ``can_submit`` (a live leaf in access)."""

    path = serializers.SerializerMethodField()
    normalized_share = serializers.SerializerMethodField()
    leaf = serializers.SerializerMethodField()
    archived = serializers.BooleanField(read_only=True)
    access = serializers.SerializerMethodField()
    can_submit = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "name",
            "path",
            "parent",
            "shares",
            "normalized_share",
            "leaf",
            "hold",
            "archived",
            "archived_at",
            "cap_gpu_hours",
            "cap_period_days",
            "on_cap",
            "description",
            "access",
            "can_submit",
        ]
        read_only_fields = fields

    def _ctx(self, key: str) -> Any:
        return self.context.get(key) or {}

    def get_path(self, obj: Budget) -> str:
        return self._ctx("budget_paths").get(obj.id, obj.name)

    def get_normalized_share(self, obj: Budget) -> float:
        return float(self._ctx("normalized_shares").get(obj.id, 0))

    def get_leaf(self, obj: Budget) -> bool:
        return obj.id not in self._ctx("live_parent_ids")

    def get_access(self, obj: Budget) -> bool:
        request = self.context.get("request")
        if request is not None and request.user.is_superuser:
            return True
        return obj.id in self._ctx("accessible_budget_ids")

    def get_can_submit(self, obj: Budget) -> bool:
        return self.get_access(obj) and self.get_leaf(obj) and not obj.archived
