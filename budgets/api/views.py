"""Budget API: the share tree, read-only (changes go through the admin)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from budgets.api.serializers import BudgetSerializer, ClusterStandingSerializer
from budgets.models import Budget
from budgets.services import active_boosts, normalized_shares
from config.api import FairwayViewSet

_DAY = "the day of an instant: a duration back from now (e.g. 7d, 36h, 2w) or an ISO 8601 date or date-time"


ARCHIVED_VALUES = {"": True, "true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
"""``?archived=``'s values: whether archived budgets are listed (empty: not given, listed)."""


class BudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Every budget with its path and normalized share; ``?archived=false`` hides archived ones."""

    serializer_class = BudgetSerializer
    filter_backends: list = []
    pagination_class = None  # the tree is small and is read whole

    def get_queryset(self) -> QuerySet[Budget]:
        queryset = Budget.objects.all()
        if self.action == "list":
            from scheduler.api.params import refuse_unknown

            refuse_unknown(self.request.query_params, ["archived"])
        archived = self.request.query_params.get("archived") or ""
        if archived not in ARCHIVED_VALUES:  # brk55: ?archived=False (or a typo) listed them all, as if asked
            raise ValidationError(
                {"archived": [f"{archived[:40]!r}: give true or false (also 1 or 0, yes or no)."]}, code="invalid"
            )
        if not ARCHIVED_VALUES[archived]:
            queryset = queryset.filter(archived_at__isnull=True)
        return queryset

    def list(self, request, *args: Any, **kwargs: Any):  # noqa: ANN201 -- DRF's signature
        response = super().list(request, *args, **kwargs)
        paths = self.get_serializer_context()["budget_paths"]
        response.data = sorted(response.data, key=lambda row: paths.get(row["id"], ""))
        return response

    @extend_schema(
        parameters=[OpenApiParameter("cluster", OpenApiTypes.STR, description="one cluster (name); default all")],
        responses=ClusterStandingSerializer(many=True),
    )
    @action(detail=False, methods=["get"])
    def tree(self, request: Request) -> Response:
        """The share tree per cluster with usage, committed usage, entitlement, ratio, rank among
        siblings and attainment over the lookback window (DESIGN.md §1, §3.2, §8)."""
        # local: budgets does not depend on scheduler at import time
        from scheduler.api.params import cluster_only_params
        from scheduler.reports import budget_standings

        clusters = cluster_only_params(request.query_params)  # the budgets page's reading too
        data = [budget_standings(c, self.budget_tree).as_dict() for c in clusters]
        return Response(ClusterStandingSerializer(data, many=True).data)

    @extend_schema(
        parameters=[
            # As history and the pyramid read theirs (scheduler.api.params.INSTANT_HELP), by UTC day.
            OpenApiParameter("since", OpenApiTypes.STR, description=f"first UTC day (default until - 29 days); {_DAY}"),
            OpenApiParameter("until", OpenApiTypes.STR, description=f"last UTC day (default today); {_DAY}"),
        ],
        responses={(200, "text/csv"): OpenApiTypes.STR},
        operation_id="budgets_statement_csv",
    )
    def statement(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The budget's accounting statement as CSV: GPU-hours by UTC day, allocated vs unallocated, by
        project (leaf) and user, the budget and everything under it. Members of the budget (or an
        ancestor) and admins."""
        from budgets.statement import (
            STATEMENT_REFUSAL,
            budget_statement,
            may_read_statement,
            parse_range,
            statement_csv,
            statement_file_name,
        )

        budget = self.get_object()
        if not may_read_statement(request.user, budget.pk, self.accessible_budget_ids):
            raise PermissionDenied(STATEMENT_REFUSAL)
        from scheduler.api.params import refuse_unknown

        refuse_unknown(request.query_params, ["since", "until"])  # ?sinc= read as the default range
        since, until = parse_range(request.query_params.get("since"), request.query_params.get("until"))
        response = HttpResponse(statement_csv(budget, budget_statement(budget, since, until)), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{statement_file_name([budget.path], since, until)}"'
        return response

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if getattr(self, "swagger_fake_view", False):  # the schema's build reads no tree (config/api.py)
            return context
        tree = self.budget_tree
        context["normalized_shares"] = normalized_shares(tree)
        context["active_boosts"] = active_boosts()
        context["live_parent_ids"] = {b.parent_id for b in tree.values() if b.archived_at is None and b.parent_id}
        return context
