"""Serializers of the budget API. Fields are listed explicitly."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rest_framework import serializers

from budgets.models import Budget, ShareBoost
from budgets.services import boost_words


class BudgetSerializer(serializers.ModelSerializer):
    """A node of the share tree as everybody may see it (shares are public), plus what the
    requester may do: ``access`` (member here or above) and ``can_submit`` (a live leaf in access)."""

    path = serializers.SerializerMethodField()
    normalized_share = serializers.SerializerMethodField()
    leaf = serializers.SerializerMethodField()
    archived = serializers.BooleanField(read_only=True)
    access = serializers.SerializerMethodField()
    can_submit = serializers.SerializerMethodField()
    boost_until = serializers.SerializerMethodField(help_text="when its active temporary share ends; null: none")
    boost_then_shares = serializers.SerializerMethodField(help_text="the shares it returns to then")
    boost_text = serializers.SerializerMethodField(
        help_text='the temporary share in words, e.g. "share 3 until Dec 20 00:00:00 UTC (then 1)"; "" without one'
    )
    cap_gpu_hours = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="allocated GPU-hours per cap_period_days (DESIGN.md §3.7); null: no cap. A number, as in "
        'budgets/tree/ (DRF sent the model\'s decimal as the string "700.00": try38)',
    )
    max_submitted_per_user = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="the budget's own submission limit per user: the most pending + running workloads a user "
        "may hold when submitting here (docs/jobs.md); null: FAIRWAY_MAX_SUBMITTED_PER_USER; 0: no limit",
    )

    class Meta:
        model = Budget
        fields = [
            "id",
            "name",
            "path",
            "parent",
            "shares",
            "boost_until",
            "boost_then_shares",
            "boost_text",
            "normalized_share",
            "leaf",
            "hold",
            "archived",
            "archived_at",
            "cap_gpu_hours",
            "cap_period_days",
            "on_cap",
            "max_submitted_per_user",
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

    def _boost(self, obj: Budget) -> ShareBoost | None:
        return self._ctx("active_boosts").get(obj.id)

    def get_boost_until(self, obj: Budget) -> datetime | None:
        boost = self._boost(obj)
        return boost.ends_at if boost is not None else None

    def get_boost_then_shares(self, obj: Budget) -> int | None:
        boost = self._boost(obj)
        return boost.base_shares if boost is not None else None

    def get_boost_text(self, obj: Budget) -> str:
        return boost_words(self._boost(obj))

    def get_leaf(self, obj: Budget) -> bool:
        return obj.id not in self._ctx("live_parent_ids")

    def get_access(self, obj: Budget) -> bool:
        request = self.context.get("request")
        if request is not None and request.user.is_superuser:
            return True
        return obj.id in self._ctx("accessible_budget_ids")

    def get_can_submit(self, obj: Budget) -> bool:
        return self.get_access(obj) and self.get_leaf(obj) and not obj.archived


class BudgetStandingSerializer(serializers.Serializer):
    """One budget's standing on one cluster (``scheduler.reports.BudgetStanding``)."""

    budget_id = serializers.IntegerField()
    name = serializers.CharField()
    path = serializers.CharField()
    parent_id = serializers.IntegerField(allow_null=True)
    depth = serializers.IntegerField()
    leaf = serializers.BooleanField()
    archived = serializers.BooleanField()
    hold = serializers.BooleanField()
    shares = serializers.IntegerField()
    normalized_share = serializers.FloatField(help_text="s(b), a fraction of the cluster")
    usage_gpu_hours = serializers.FloatField(help_text="U(b): allocated GPU-hours in the window")
    committed_gpu_hours = serializers.FloatField(help_text="C(b): protection still ahead, GPU-hours")
    entitlement_gpu_hours = serializers.FloatField(help_text="E(b) = s(b) × GPUs × W, GPU-hours")
    ratio = serializers.FloatField(allow_null=True, help_text="r(b) = (U + C) / E; lower goes first")
    ratio_text = serializers.CharField(
        help_text="r(b) with the significant digits that tell it from every other budget's ratio"
    )
    rank = serializers.IntegerField(allow_null=True, help_text="1 = most deserving among its siblings")
    siblings = serializers.IntegerField()
    rank_text = serializers.CharField(help_text='the rank as the pages and the CLI say it: `3rd of 3`; "" for a root')
    demand_gpu_hours = serializers.FloatField(
        help_text="GPU-hours its allocated workloads asked for in the window while they could run "
        "(each at most the run time it needed; docs/standing.md)"
    )
    owed_gpu_hours = serializers.FloatField(help_text="min(E, demand): what the window owed it, GPU-hours")
    attainment = serializers.FloatField(
        allow_null=True, help_text="U ÷ min(E, demand) over the window, capped at 1 (DESIGN.md §8)"
    )
    effective_usage = serializers.FloatField(
        help_text="Slurm's EffectvUsage (Fair Tree): U(b) ÷ U(parent), its fraction of the usage under its "
        "parent; a root 1 when it has usage; 0 when there is none"
    )
    running_gpus = serializers.IntegerField()
    pending_workloads = serializers.IntegerField()
    cap_gpu_hours = serializers.FloatField(
        allow_null=True, help_text="allocated GPU-hours per cap_period_days (DESIGN.md §3.7); null: no cap"
    )
    cap_period_days = serializers.IntegerField()
    on_cap = serializers.CharField(help_text="downgrade (run unfunded) or hold, once the cap is reached")
    capped = serializers.BooleanField(help_text="the cap is reached now")
    cap_used_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="allocated GPU-hours of the subtree over the cap period, every cluster (what capped "
        "compares with the cap); null: no cap",
    )
    cap_text = serializers.CharField(
        help_text='the cap in words, e.g. "41.2 of 100 GPU-h / 30 d, then unfunded"; "" without one'
    )
    boost_until = serializers.DateTimeField(
        allow_null=True, help_text="when its active temporary share ends (docs/standing.md); null: none"
    )
    boost_then_shares = serializers.IntegerField(allow_null=True, help_text="the shares it returns to then")
    boost_text = serializers.CharField(
        help_text='the temporary share in words, e.g. "share 3 until Dec 20 00:00:00 UTC (then 1)"; "" without one'
    )


class ClusterStandingSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    gpus = serializers.IntegerField(help_text="registered GPUs of the cluster")
    window_s = serializers.IntegerField(help_text="lookback window W in seconds")
    heading_text = serializers.CharField(
        help_text="the standing's heading as the budgets page and the CLI write it: "
        "`default: 20 GPUs × 7d = 3,360 GPU-h per window`"
    )
    at = serializers.DateTimeField()
    budgets = BudgetStandingSerializer(many=True)
