"""Scheduler API: workloads (submit, list, detail, cancel, log tails) and clusters (read-only)."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import FairwayAPIView, FairwayViewSet
from scheduler.api.filters import WorkloadFilter
from scheduler.api.serializers import (
    ArrayGroupSerializer,
    ClusterSerializer,
    NotificationSettingsSerializer,
    WorkloadDetailSerializer,
    WorkloadListSerializer,
    WorkloadSubmitSerializer,
)
from scheduler.models import (
    GPU,
    ArrayGroup,
    Attempt,
    AttemptGPU,
    Cluster,
    Host,
    Mount,
    NotificationSettings,
    Workload,
    WorkloadEvent,
)
from scheduler.services import do_cancel_group, do_cancel_workload, do_submit_workload

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
            Prefetch("hosts", queryset=Host.objects.prefetch_related(Prefetch("gpus", queryset=GPU.objects.all()))),
            Prefetch("mounts", queryset=Mount.objects.order_by("name")),
        ).order_by("name")


class ArrayGroupViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Array groups (docs/jobs.md): ``GET /api/v1/groups/`` (``?owner=me``), one group, and
    ``POST /api/v1/groups/{id}/cancel/`` to cancel every member not final yet."""

    serializer_class = ArrayGroupSerializer
    filter_backends: list = []

    def get_queryset(self) -> QuerySet[ArrayGroup]:
        qs = ArrayGroup.objects.select_related("owner", "cluster").prefetch_related(
            Prefetch("members", queryset=Workload.objects.only("id", "state", "group_id"))
        )
        if self.request.query_params.get("owner") == "me":
            qs = qs.filter(owner=self.request.user)
        return qs.order_by("-id")

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """200 ``{"group", "canceled"}``: members canceled (or asked to stop); 403 ``forbidden``."""
        group = self.get_object()
        canceled = do_cancel_group(request.user, group)
        return Response({"group": group.pk, "canceled": canceled})


class NotificationSettingsView(FairwayAPIView):
    """``GET``/``PUT /api/v1/notifications/``: the requester's own notification choices."""

    serializer_class = NotificationSettingsSerializer

    def _data(self, user: Any) -> dict[str, Any]:
        pref = NotificationSettings.objects.filter(user=user).first()
        if pref is None:
            return {"email_kinds": [], "webhook_kinds": [], "webhook_url": ""}
        return {"email_kinds": pref.email_kinds, "webhook_kinds": pref.webhook_kinds, "webhook_url": pref.webhook_url}

    @extend_schema(responses=NotificationSettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(self._data(request.user))

    @extend_schema(request=NotificationSettingsSerializer, responses=NotificationSettingsSerializer)
    def put(self, request: Request) -> Response:
        serializer = NotificationSettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        NotificationSettings.objects.update_or_create(user=request.user, defaults=dict(serializer.validated_data))
        return Response(self._data(request.user))
