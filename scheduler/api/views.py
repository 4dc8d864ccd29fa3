"""Scheduler API: workloads (submit, list, detail, cancel, log tails) and clusters (read-only)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet, prefetch_related_objects
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import FairwayViewSet
from scheduler.api.filters import WorkloadFilter
from scheduler.api.serializers import (
    ClusterSerializer,
    WorkloadDetailSerializer,
    WorkloadListSerializer,
    WorkloadSubmitSerializer,
)
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload, WorkloadEvent
from scheduler.services import do_cancel_workload, do_submit_workload

MAX_LOG_TAIL_BYTES = 64 * 1024


class WorkloadLogsMixin:
    """``GET /api/v1/workloads/{id}/logs/?attempt=N&tail=BYTES``: the tail of an attempt's log,
    fetched live from the agent(s) that ran it (members of the workload's budget, and staff)."""

    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """200 ``{"workload", "attempt", "attempt_id", "parts": [{"host", "rank", "data", "offset",
        "eof", "error"}]}`` (last attempt unless ``attempt``); 403 ``forbidden`` for non-members;
        404 ``no_attempt``; 400 ``invalid`` for a bad ``attempt``/``tail``."""
        from scheduler.gateway import attempt_log_tails

        workload = get_object_or_404(Workload.objects.select_related("budget"), pk=pk)
        if not (request.user.is_staff or workload.budget_id in self.accessible_budget_ids):
            raise PermissionDenied("Only members of the workload's budget may read its logs.")
        try:
            tail = int(request.query_params.get("tail", 16384))
            number = request.query_params.get("attempt")
            number = int(number) if number not in (None, "") else None
        except (TypeError, ValueError):
            raise ValidationError({"tail": ["attempt and tail are integers."]}, code="invalid") from None
        if not 0 <= tail <= MAX_LOG_TAIL_BYTES:
            raise ValidationError({"tail": [f"tail is 0..{MAX_LOG_TAIL_BYTES} bytes."]}, code="invalid")
        attempts = Attempt.objects.filter(workload=workload)
        attempt = (attempts.filter(number=number) if number is not None else attempts.order_by("-number")).first()
        if attempt is None:
            raise NotFound("This workload has no such attempt.", code="no_attempt")
        parts = attempt_log_tails(attempt.pk, tail)
        return Response(
            {
                "workload": workload.pk,
                "attempt": attempt.number,
                "attempt_id": attempt.pk,
                "parts": [
                    {"host": p.host, "rank": p.rank, "data": p.data, "offset": p.offset, "eof": p.eof, "error": p.error}
                    for p in parts
                ],
            }
        )


class WorkloadViewSet(WorkloadLogsMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Every authenticated user sees the whole queue; env values only within their budgets."""

    filterset_class = WorkloadFilter

    @staticmethod
    def detail_prefetches() -> list[Prefetch]:
        """What the detail serializer reads besides the workload row (tests guard the query count)."""
        return [
            Prefetch(
                "attempts",
                queryset=Attempt.objects.select_related("host")
                .prefetch_related(Prefetch("gpu_links", queryset=AttemptGPU.objects.select_related("gpu__host")))
                .order_by("number"),
            ),
            Prefetch("events", queryset=WorkloadEvent.objects.select_related("actor").order_by("at", "id")),
        ]

    def get_queryset(self) -> QuerySet[Workload]:
        queryset = Workload.objects.select_related("owner", "cluster", "budget")
        if self.action == "list":
            return queryset.order_by("-id")
        return queryset.prefetch_related(*self.detail_prefetches())

    def get_serializer_class(self):  # noqa: ANN201 -- DRF's signature
        if self.action == "list":
            return WorkloadListSerializer
        if self.action == "create":
            return WorkloadSubmitSerializer
        return WorkloadDetailSerializer

    def _detail(self, workload_id: int) -> dict:
        workload = self.get_queryset().get(pk=workload_id)
        return WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data

    def create(self, request: Request) -> Response:
        """Submit a workload: 201 with the workload, or 400 in the API's error format."""
        serializer = WorkloadSubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        workload = do_submit_workload(request.user, tree=self.budget_tree, **serializer.to_service_kwargs())
        # The row just written (owner, budget, cluster attached) is the answer: no second read of it.
        prefetch_related_objects([workload], *self.detail_prefetches())
        data = WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel: 200 with the workload; 403 ``forbidden``; 409 ``already_final``."""
        workload = self.get_object()
        do_cancel_workload(request.user, workload)
        return Response(self._detail(workload.pk))


class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Clusters and their hardware by GPU model (what a submission may ask for)."""

    serializer_class = ClusterSerializer
    lookup_field = "name"
    filter_backends: list = []

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.prefetch_related(
            Prefetch("hosts", queryset=Host.objects.prefetch_related(Prefetch("gpus", queryset=GPU.objects.all())))
        ).order_by("name")
