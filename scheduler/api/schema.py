"""OpenAPI descriptions of the workload endpoints whose views do not say everything themselves:
the submission answers with the workload's detail, the log tail's shape and parameters, and the
list filters. Applied once, when ``scheduler.api.urls`` is imported."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers

from fairway_common.limits import DEFAULT_LOG_TAIL_BYTES, MAX_LOG_TAIL_BYTES
from scheduler.api.serializers import (
    QuoteSerializer,
    WorkloadDetailSerializer,
    WorkloadSubmitSerializer,
    WorkloadSubmittedSerializer,
)


class LogPartSerializer(serializers.Serializer):
    host = serializers.CharField()
    rank = serializers.IntegerField()
    data = serializers.CharField(allow_blank=True)
    offset = serializers.IntegerField(help_text="byte offset of ``data`` in the log")
    eof = serializers.BooleanField()
    error = serializers.CharField(allow_null=True, allow_blank=True)


class LogTailSerializer(serializers.Serializer):
    workload = serializers.IntegerField()
    attempt = serializers.IntegerField(help_text="attempt number (1 for the first)")
    attempt_id = serializers.IntegerField()
    parts = LogPartSerializer(many=True)


def describe_workload_views(viewset: type) -> None:
    extend_schema_view(
        list=extend_schema(
            parameters=[
                OpenApiParameter("state", OpenApiTypes.STR, description="states, comma-separated"),
                OpenApiParameter("budget", OpenApiTypes.STR, description="budget path or id (its subtree)"),
                OpenApiParameter("owner", OpenApiTypes.STR, description="a username, or `me`"),
                OpenApiParameter("cluster", OpenApiTypes.STR, description="cluster name"),
            ]
        ),
        create=extend_schema(request=WorkloadSubmitSerializer, responses={201: WorkloadSubmittedSerializer}),
        cancel=extend_schema(request=None, responses=WorkloadDetailSerializer),
        quote=extend_schema(request=WorkloadSubmitSerializer, responses=QuoteSerializer),
        logs=extend_schema(
            parameters=[
                OpenApiParameter("attempt", OpenApiTypes.INT, description="attempt number (default: the last)"),
                OpenApiParameter(
                    "tail",
                    OpenApiTypes.INT,
                    description=f"bytes from the end, 0..{MAX_LOG_TAIL_BYTES} ({DEFAULT_LOG_TAIL_BYTES})",
                ),
            ],
            responses=LogTailSerializer,
        ),
    )(viewset)
