"""Admin of the share tree: paths, shares, normalized shares, holds, archive."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from budgets.models import Budget, UsageEntry
from budgets.services import (
    budget_paths,
    do_archive_budget,
    do_set_hold,
    normalized_shares,
    request_ticks_everywhere,
)


def _cluster_gpus() -> dict[str, int]:
    """Registered GPUs (hosts not removed) per cluster name, one query."""
    from django.db.models import Count, Q

    from scheduler.models import Cluster

    return dict(
        Cluster.objects.annotate(n=Count("hosts__gpus", filter=Q(hosts__removed_at__isnull=True)))
        .order_by("name")
        .values_list("name", "n")
    )


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ["path", "shares", "normalized_share", "entitlement", "hold", "archived", "cap_gpu_hours", "on_cap"]
    list_filter = ["hold", ("archived_at", admin.EmptyFieldListFilter), "on_cap", "parent"]
    search_fields = ["name", "description"]
    autocomplete_fields = ["parent"]
    readonly_fields = ["archived_at", "created_at"]
    fields = [
        "name",
        "parent",
        "shares",
        "hold",
        "cap_gpu_hours",
        "cap_period_days",
        "on_cap",
        "description",
        "archived_at",
        "created_at",
    ]
    actions = ["hold_budgets", "release_budgets", "archive_budgets"]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None):  # noqa: ANN201
        # One tree load per page instead of a parent walk per row. The admin instance is shared by
        # threads; a concurrent page may see the other's maps, which hold the same request-independent data.
        self._paths = budget_paths()
        self._shares = normalized_shares()
        self._cluster_gpus = _cluster_gpus()
        return super().changelist_view(request, extra_context)

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        request_ticks_everywhere()  # shares, holds and caps reorder every cluster's queue

    def get_ordering(self, request: HttpRequest) -> list[str]:
        return ["parent__name", "name"]

    @admin.display(description="path")
    def path(self, obj: Budget) -> str:
        return getattr(self, "_paths", {}).get(obj.pk) or obj.path

    @admin.display(description="normalized share")
    def normalized_share(self, obj: Budget) -> str:
        shares = getattr(self, "_shares", None) or normalized_shares()
        return f"{float(shares.get(obj.pk, 0)):.2%}"

    @admin.display(description="entitlement (GPU-h per window)")
    def entitlement(self, obj: Budget) -> str:
        """``E(b) = s(b) × registered GPUs × W`` per cluster (DESIGN.md §1), in GPU-hours."""
        from django.conf import settings

        shares = getattr(self, "_shares", None) or normalized_shares()
        clusters = getattr(self, "_cluster_gpus", None)
        if clusters is None:
            clusters = _cluster_gpus()
        hours = int(settings.FAIRWAY["LOOKBACK_WINDOW_S"]) / 3600
        share = float(shares.get(obj.pk, 0))
        return " · ".join(f"{name}: {share * gpus * hours:,.0f}" for name, gpus in clusters.items()) or "–"

    @admin.display(boolean=True, description="archived")
    def archived(self, obj: Budget) -> bool:
        return obj.archived

    def has_delete_permission(self, request: HttpRequest, obj: Budget | None = None) -> bool:
        # Budgets with workloads are archived, never deleted (DESIGN.md §3.7).
        return obj is not None and not obj.workloads.exists() and super().has_delete_permission(request, obj)

    @admin.action(description="Hold: start no new attempts")
    def hold_budgets(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        for budget in queryset:
            do_set_hold(budget, True)
        messages.success(request, f"{queryset.count()} budget(s) on hold.")

    @admin.action(description="Release hold")
    def release_budgets(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        for budget in queryset:
            do_set_hold(budget, False)
        messages.success(request, f"{queryset.count()} budget(s) released.")

    @admin.action(description="Archive (refuse new submissions; running work carries on)")
    def archive_budgets(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        for budget in queryset:
            do_archive_budget(budget)
        messages.success(request, f"{queryset.count()} budget(s) archived with their sub-budgets.")


@admin.register(UsageEntry)
class UsageEntryAdmin(admin.ModelAdmin):
    list_display = ["budget", "cluster", "start", "end", "gpus", "gpu_seconds", "note"]
    list_filter = ["cluster"]
    search_fields = ["budget__name", "note"]
    list_select_related = ["budget", "cluster"]
    autocomplete_fields = ["budget"]
    date_hierarchy = "end"
