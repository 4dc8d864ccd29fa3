"""Budget API: the share tree, read-only (changes go through the admin)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins

from budgets.api.serializers import BudgetSerializer
from budgets.models import Budget
from budgets.services import normalized_shares
from config.api import FairwayViewSet


class BudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Every budget with its path and normalized share; ``?archived=false`` hides archived ones."""

    serializer_class = BudgetSerializer
    filter_backends: list = []
    pagination_class = None  # the tree is small and is read whole

    def get_queryset(self) -> QuerySet[Budget]:
        queryset = Budget.objects.all()
        if self.request.query_params.get("archived") in {"false", "0", "no"}:
            queryset = queryset.filter(archived_at__isnull=True)
        return queryset

    def list(self, request, *args: Any, **kwargs: Any):  # noqa: ANN201 -- DRF's signature
        response = super().list(request, *args, **kwargs)
        paths = self.get_serializer_context()["budget_paths"]
        response.data = sorted(response.data, key=lambda row: paths.get(row["id"], ""))
        return response

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        tree = self.budget_tree
        context["normalized_shares"] = normalized_shares(tree)
        context["live_parent_ids"] = {b.parent_id for b in tree.values() if b.archived_at is None and b.parent_id}
        return context
