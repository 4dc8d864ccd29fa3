"""Scheduler API: workloads (submit, list, detail, cancel) and clusters (read-only)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from rest_framework import mixins, status
from rest_framework.decorators import action
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


class WorkloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Every authenticated user sees the whole queue; env values only within their budgets."""

    filterset_class = WorkloadFilter

    def get_queryset(self) -> QuerySet[Workload]:
        queryset = Workload.objects.select_related("owner", "cluster", "budget")
        if self.action == "list":
            return queryset.order_by("-id")
        return queryset.prefetch_related(
            Prefetch(
                "attempts",
                queryset=Attempt.objects.select_related("host")
                .prefetch_related(Prefetch("gpu_links", queryset=AttemptGPU.objects.select_related("gpu__host")))
                .order_by("number"),
            ),
            Prefetch("events", queryset=WorkloadEvent.objects.select_related("actor").order_by("at", "id")),
        )

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
        workload = do_submit_workload(request.user, **serializer.to_service_kwargs())
        return Response(self._detail(workload.pk), status=status.HTTP_201_CREATED)

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
