"""``GET /api/v1/metrics/pyramid/``: the four-metric pyramid (DESIGN.md §8) per cluster, hourly and in total."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import FairwayAPIView
from scheduler.api.params import INSTANT_HELP, cluster_param, parse_instant, refuse_unknown
from scheduler.models import Cluster
from scheduler.pyramid import DEFAULT_RANGE, pyramid_report

MAX_RANGE = timedelta(days=400)
STARTS_IN_FUTURE = "the range starts in the future: nothing is counted there"


def pyramid_params(params: Any, now: datetime, *, api: bool = True) -> tuple[datetime, datetime, list[Cluster]]:
    """The pyramid's range and clusters from its query parameters (``since``, ``until``: an instant
    or a duration back, default the last 7 days; ``cluster``: one, default every one), or a DRF
    ``ValidationError`` naming the parameter. The one reading of the API's ``metrics/pyramid/`` and
    the metrics page's (tryout46: the page showed the last 7 days only); ``api``: DRF's ``format``
    read too (:func:`~scheduler.api.params.refuse_unknown`)."""
    refuse_unknown(params, ["since", "until", "cluster"], api=api)
    until = parse_instant("until", params.get("until"), now, now)
    try:
        since = parse_instant("since", params.get("since"), now, until - DEFAULT_RANGE)
    except OverflowError:
        raise serializers.ValidationError({"until": ["out of range"]}) from None
    if since >= until:
        raise serializers.ValidationError({"since": ["must be before until"]})
    if since >= now:  # nothing is counted after now: 0 % of 0 GPU-hours read as unavailable (brk35)
        if not params.get("since"):  # ?until=2030-01-01 alone: the default start follows until (admin47)
            raise serializers.ValidationError(
                {"until": [f"{STARTS_IN_FUTURE} (with no since, the {DEFAULT_RANGE.days} days before until)"]}
            )
        raise serializers.ValidationError({"since": [STARTS_IN_FUTURE]})
    if until - since > MAX_RANGE:
        raise serializers.ValidationError({"since": [f"at most {MAX_RANGE.days} days"]})
    clusters = Cluster.objects.order_by("name")
    if cluster := cluster_param(params.get("cluster")):
        clusters = clusters.filter(name=cluster)
    return since, until, list(clusters)


class PyramidFigures(serializers.Serializer):
    registered_gpu_hours = serializers.FloatField()
    available_gpu_hours = serializers.FloatField()
    allocated_gpu_hours = serializers.FloatField()
    unallocated_gpu_hours = serializers.FloatField()
    measured_gpu_hours = serializers.FloatField(help_text="occupied GPU-hours whose NVML utilization was measured")
    utilized_gpu_hours = serializers.FloatField(help_text="measured GPU-hours × NVML utilization")
    availability = serializers.FloatField(help_text="available / registered GPU-time")
    occupancy = serializers.FloatField(help_text="occupied / registered GPU-time (≤ availability)")
    occupancy_allocated = serializers.FloatField()
    occupancy_unallocated = serializers.FloatField()
    utilization = serializers.FloatField(
        allow_null=True,
        help_text="occupancy × utilization_of_occupied (≤ occupancy); null: not measured, or less than half of the "
        "occupied GPU-time (e.g. imported history)",
    )
    utilization_of_occupied = serializers.FloatField(
        allow_null=True,
        help_text="mean NVML utilization over the occupied GPU-time where it was measured; null: less than half "
        "of the occupied GPU-time measured (e.g. imported history)",
    )
    utilization_measured = serializers.FloatField(help_text="measured / occupied GPU-time")
    utilization_text = serializers.CharField(help_text="the utilization in words, as the web page and CLI show it")
    impact = serializers.FloatField(help_text="allocated share of occupied GPU-time")


class PyramidHour(PyramidFigures):
    hour = serializers.DateTimeField()
    partial = serializers.BooleanField(help_text="the current hour, computed now up to now (not rolled up yet)")


class PyramidRange(serializers.Serializer):
    since = serializers.DateTimeField(help_text="start of the first hour counted")
    until = serializers.DateTimeField(allow_null=True, help_text="end of what is counted (now for a partial hour)")
    complete_hours = serializers.IntegerField(help_text="rolled-up hours counted")
    partial_hour_until = serializers.DateTimeField(
        allow_null=True, help_text="the current hour is counted up to this instant"
    )


class PyramidBudget(serializers.Serializer):
    path = serializers.CharField()
    delivered_gpu_hours = serializers.FloatField(help_text="allocated GPU-hours delivered in the lookback window")
    owed_gpu_hours = serializers.FloatField(help_text="min(entitlement, demand) over the lookback window")
    entitlement_gpu_hours = serializers.FloatField()
    demand_gpu_hours = serializers.FloatField()
    attainment = serializers.FloatField(allow_null=True, help_text="delivered ÷ owed, capped at 1 (DESIGN.md §8)")
    archived = serializers.BooleanField(help_text="archived: takes no new work; its GPU-hours stay in its parents'")


class PyramidSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    range = PyramidRange()
    total = PyramidFigures()
    hours = PyramidHour(many=True)
    budgets = PyramidBudget(many=True, help_text="impact per budget: the budgets' standing (budgets/tree/)")
    budgets_window_s = serializers.IntegerField(help_text="the lookback window of the budget figures")


class PyramidView(FairwayAPIView):
    """The pyramid of the hourly roll-ups plus the current, partial hour: default the last 7 days (the
    metrics page's and ``fairway metrics``' range, ``pyramid.DEFAULT_RANGE``),
    every cluster; ``range`` says what is covered."""

    @extend_schema(
        parameters=[
            OpenApiParameter("cluster", OpenApiTypes.STR, description="one cluster (name)"),
            OpenApiParameter("since", OpenApiTypes.STR, description=f"start, {INSTANT_HELP} (default: 7 days ago)"),
            OpenApiParameter("until", OpenApiTypes.STR, description="end, exclusive, the same forms (default: now)"),
        ],
        responses=PyramidSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        now = timezone.now()  # one instant: the default until and the current hour's end (try51)
        since, until, clusters = pyramid_params(request.query_params, now)
        return Response(pyramid_report(clusters, since, until, now))
