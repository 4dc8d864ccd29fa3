"""Hosts (read by everybody; cordon, drain, drain now, resume, remove by admins) and the metrics summary."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, inline_serializer
from rest_framework import exceptions, mixins, serializers
from rest_framework.decorators import action
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from agent.protocol import HOST_NAME_PATTERN
from config.api import FairwayAPIView, FairwayViewSet
from fairway_cli.numbers import instant_text
from fairway_cli.words import host_reason_words
from scheduler import lifecycle
from scheduler.api.params import cluster_only_params, cluster_param, host_state_param, refuse_unknown
from scheduler.gpu_report import current_sample, sampled_at, unreported
from scheduler.models import GPU, Attempt, AttemptGPU, Host, HostEvent
from scheduler.reports import occupancy
from scheduler.services import (
    HOST_OPERATOR_REFUSAL,
    SCHEDULED_DRAIN_FORM,
    HostError,
    do_cancel_scheduled_drain,
    do_remove_host,
    do_schedule_drain,
    do_set_host_state,
    drain_in,
    host_reason_problem,
    may_operate_hosts,
    scheduled_drain,
    scheduled_drain_note,
)


class GpuSerializer(serializers.ModelSerializer):
    """One GPU with its latest sample and the workload holding it (``null``: free). A GPU missing
    from its agent's last report (an inventory held for approval) has no sample: ``reported``
    false, ``missing_since`` and ``report_text`` say since when (``scheduler.gpu_report``).
    ``sampled_at``: when the server received the sample the numbers are from (``null``: none),
    one sample period old at most while its agent reports (util49); a sample older than
    ``FAIRWAY_HOST_LOST_AFTER_S`` is stale: its numbers ``null`` (not measured), ``sampled_at`` its
    age (left50, ``gpu_report.current_sample``)."""

    reported = serializers.SerializerMethodField()
    missing_since = serializers.SerializerMethodField()
    report_text = serializers.SerializerMethodField()
    sampled_at = serializers.SerializerMethodField()
    utilization_pct = serializers.SerializerMethodField()
    memory_used_mb = serializers.SerializerMethodField()
    temperature_c = serializers.SerializerMethodField()
    workload = serializers.SerializerMethodField()
    allocated = serializers.SerializerMethodField()

    class Meta:
        model = GPU
        fields = [
            "index",
            "uuid",
            "model",
            "memory_mb",
            "health",
            "reported",
            "missing_since",
            "report_text",
            "sampled_at",
            "utilization_pct",
            "memory_used_mb",
            "temperature_c",
            "workload",
            "allocated",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.BooleanField())
    def get_reported(self, obj: GPU) -> bool:
        return unreported(obj) is None

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_missing_since(self, obj: GPU) -> str | None:
        gap = unreported(obj)
        return serializers.DateTimeField().to_representation(gap.since) if gap and gap.since else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_report_text(self, obj: GPU) -> str | None:
        gap = unreported(obj)
        return gap.text if gap else None

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_sampled_at(self, obj: GPU) -> str | None:
        at = None if unreported(obj) is not None else sampled_at(obj.last_sample)
        return serializers.DateTimeField().to_representation(at) if at else None

    def _sample(self, obj: GPU, key: str) -> float | None:
        if unreported(obj) is not None:
            return None  # measured by nothing now (its sample is dropped at the hold; an older hold's stays)
        value = current_sample(obj.last_sample, timezone.now()).get(key)  # a stale one: not measured (left50)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def get_utilization_pct(self, obj: GPU) -> float | None:
        return self._sample(obj, "utilization_pct")

    def get_memory_used_mb(self, obj: GPU) -> float | None:
        return self._sample(obj, "memory_used_mb")

    def get_temperature_c(self, obj: GPU) -> float | None:
        return self._sample(obj, "temperature_c")

    def _link(self, obj: GPU) -> AttemptGPU | None:
        links = [link for link in obj.attempt_links.all() if link.open]
        return links[0] if links else None

    def get_workload(self, obj: GPU) -> int | None:
        link = self._link(obj)
        return link.attempt.workload_id if link else None

    def get_allocated(self, obj: GPU) -> bool | None:
        link = self._link(obj)
        return (link.attempt.allocated and not link.attempt.unfunded) if link else None


# The events that take a host out of placement, by the state they lead to (an offline host: the
# state it returns to). A drain the scheduler ends (``drained``) keeps the operator's reason.
REASON_EVENT_KINDS: dict[str, tuple[str, ...]] = {
    Host.State.CORDONED: ("cordoned", "inventory_held"),
    Host.State.DRAINING: ("draining", "drain_now"),
    Host.State.DRAINED: ("draining", "drain_now"),
}
_REASON_EVENTS_KEPT = 4  # the latest few of those kinds: the one matching the state is among them


def state_reason(host: Host) -> dict[str, Any] | None:
    """Why ``host`` is out of placement: the latest event that cordoned or drained it, as
    ``{"kind", "message", "by", "at", "scheduled", "summary"}`` (``by``: the user, None for the
    system or the agent; ``at``: when it took effect; ``scheduled``: a scheduled drain's ``at`` and
    ``asked_at``, None for an immediate change; ``summary``: the one wording,
    :func:`fairway_cli.words.host_reason_words`), or None when it is active or no event says.
    Reads ``host.reason_events`` (``hosts_queryset``)."""
    state = host.state_before_offline if host.state == Host.State.OFFLINE else host.state
    kinds = REASON_EVENT_KINDS.get(state, ())
    event = next((e for e in getattr(host, "reason_events", ()) if e.kind in kinds), None)
    if event is None:
        return None
    scheduled = (event.data or {}).get("scheduled")
    reason: dict[str, Any] = {
        "kind": event.kind,
        "message": event.message,
        "by": event.actor.username if event.actor is not None else None,
        "at": event.at,
        "scheduled": {"at": scheduled.get("at"), "asked_at": scheduled.get("asked_at")}
        if isinstance(scheduled, dict)
        else None,
    }
    reason["summary"] = host_reason_words(reason, offline=host.state == Host.State.OFFLINE)
    return reason


def _gpu_counts(models: list[str]) -> str:
    """``3×H100`` (``2×A100 + 1×H100`` for a mix; ``no GPUs``)."""
    counts: dict[str, int] = {}
    for model in models:
        counts[model] = counts.get(model, 0) + 1
    return " + ".join(f"{n}×{model}" for model, n in sorted(counts.items())) or "no GPUs"


def attempts_lost_at(host: Host, open_attempts: int) -> datetime | None:
    """When the open attempts of an offline host end ``lost`` unless its agent is back
    (:func:`scheduler.lifecycle.host_lost_at`); None for a host that is not offline or holds none."""
    if host.state != Host.State.OFFLINE or not open_attempts:
        return None
    return lifecycle.host_lost_at(host)


def pending_inventory(host: Host) -> dict[str, Any] | None:
    """The GPU inventory ``host``'s agent reported that differs from the registered one and waits
    for an admin's approval (``Host.pending_inventory``, docs/deploy.md §11), as ``{"gpus",
    "summary"}``; None when none waits. The one wording of it: the API, ``fairway hosts`` and the
    clusters page show ``summary`` (try41: none of them showed a held inventory)."""
    held = host.pending_inventory
    if held is None:
        return None
    gpus = [
        {key: g.get(key) for key in ("index", "uuid", "model", "memory_mb")}
        for g in ((held.get("gpus") if isinstance(held, dict) else held) or [])
        if isinstance(g, dict)
    ]
    reported = _gpu_counts([str(g["model"]) for g in gpus])
    registered = _gpu_counts([g.model for g in host.gpus.all()])
    return {
        "gpus": gpus,
        "summary": f"the agent reports {reported}, {registered} registered: awaiting an admin's approval "
        "(admin → Hosts → Approve the GPU inventory the agent reported); resume is refused until then",
    }


class HostSerializer(serializers.ModelSerializer):
    """A host, its GPUs and its drain progress: ``open_attempts`` still on it and the time the last
    protection on it ends (``protected_until``; a drain ends then, DESIGN.md §6); ``state_reason``:
    who cordoned or drained it, when and why (:func:`state_reason`)."""

    cluster = serializers.CharField(source="cluster.name", read_only=True)
    model = serializers.SerializerMethodField()
    gpu_count = serializers.SerializerMethodField()
    gpus = GpuSerializer(many=True, read_only=True)
    open_attempts = serializers.SerializerMethodField()
    protected_until = serializers.SerializerMethodField()
    state_reason = serializers.SerializerMethodField()
    pending_inventory = serializers.SerializerMethodField()
    attempts_lost_at = serializers.SerializerMethodField()
    scheduled_drain = serializers.SerializerMethodField()
    scheduled_drain_change = serializers.SerializerMethodField()
    idle_gpus = serializers.SerializerMethodField()

    class Meta:
        model = Host
        fields = [
            "id",
            "name",
            "cluster",
            "state",
            "state_reason",
            "drain_now",
            "scheduled_drain",
            "scheduled_drain_change",
            "labels",
            "agent_version",
            "isolation",
            "last_heartbeat",
            "model",
            "gpu_count",
            "cpus",
            "memory_bytes",
            "open_attempts",
            "idle_gpus",
            "protected_until",
            "attempts_lost_at",
            "gpus",
            "pending_inventory",
        ]
        read_only_fields = fields

    def get_model(self, obj: Host) -> str:
        gpus = list(obj.gpus.all())
        return gpus[0].model if gpus else ""

    def get_gpu_count(self, obj: Host) -> int:
        return len(obj.gpus.all())

    def _attempts(self, obj: Host) -> list[Attempt]:
        seen: dict[int, Attempt] = {}
        for gpu in obj.gpus.all():
            for link in gpu.attempt_links.all():
                if link.open:
                    seen[link.attempt_id] = link.attempt
        return list(seen.values())

    @extend_schema_field(
        inline_serializer(
            "HostStateReason",
            {
                "kind": serializers.CharField(help_text="cordoned, inventory_held, draining or drain_now"),
                "message": serializers.CharField(
                    help_text="the reason given (an admin's, the agent's, the scheduler's)"
                ),
                "by": serializers.CharField(allow_null=True, help_text="the user; null: the system or the agent"),
                "at": serializers.DateTimeField(help_text="when it took effect (a scheduled drain: began)"),
                "scheduled": inline_serializer(
                    "HostStateReasonScheduled",
                    {
                        "at": serializers.DateTimeField(help_text="the time the drain was scheduled for"),
                        "asked_at": serializers.DateTimeField(
                            allow_null=True, help_text="when it was scheduled (null: before lt61)"
                        ),
                    },
                    allow_null=True,
                    help_text="a scheduled drain's times; null: an immediate change",
                ),
                "summary": serializers.CharField(
                    help_text="who, when and why in words, as the CLI and the page say it"
                ),
            },
            allow_null=True,
        )
    )
    def get_state_reason(self, obj: Host) -> dict[str, Any] | None:
        return state_reason(obj)

    @extend_schema_field(
        inline_serializer(
            "HostScheduledDrain",
            {
                "at": serializers.DateTimeField(help_text="when the tick drains the host"),
                "drain_now": serializers.BooleanField(help_text="a drain now (protection ignored) at that time"),
                "by": serializers.CharField(allow_null=True, help_text="the admin who scheduled it"),
                "reason": serializers.CharField(),
                "summary": serializers.CharField(help_text="the scheduled drain in words"),
            },
            allow_null=True,
        )
    )
    def get_scheduled_drain(self, obj: Host) -> dict[str, Any] | None:
        return scheduled_drain(obj)

    @extend_schema_field(
        serializers.CharField(
            allow_null=True,
            help_text="in the answer of a cordon, drain, drain now, resume or cancel-drain: what it did to the host's "
            "scheduled drain, in words ('its drain scheduled at 08:00:00 UTC is canceled' or 'stands'); "
            "null otherwise",
        )
    )
    def get_scheduled_drain_change(self, obj: Host) -> str | None:
        return self.context.get("scheduled_drain_change") or None

    @extend_schema_field(
        inline_serializer(
            "HostPendingInventory",
            {
                "gpus": serializers.ListField(
                    child=serializers.DictField(), help_text="index, uuid, model, memory_mb as the agent reported"
                ),
                "summary": serializers.CharField(help_text="the held inventory in words"),
            },
            allow_null=True,
        )
    )
    def get_pending_inventory(self, obj: Host) -> dict[str, Any] | None:
        return pending_inventory(obj)

    @extend_schema_field(
        serializers.DateTimeField(
            allow_null=True,
            help_text="an offline host: when its open attempts end lost (and are requeued) unless its agent is back",
        )
    )
    def get_attempts_lost_at(self, obj: Host) -> datetime | None:
        return attempts_lost_at(obj, len(self._attempts(obj)))

    def get_open_attempts(self, obj: Host) -> int:
        return len(self._attempts(obj))

    @extend_schema_field(
        serializers.IntegerField(help_text='its GPUs held idle (docs/jobs.md "Idle GPUs": scheduler.idle)')
    )
    def get_idle_gpus(self, obj: Host) -> int:
        idle = self.context.get("idle")
        if idle is None:  # one host: its own open attempts (the list reads them once for all: HostViewSet.list)
            idle = idle_of_hosts([obj])
        return sum(
            1 for gpu in obj.gpus.all() for link in gpu.attempt_links.all() if link.open and link.attempt_id in idle
        )

    def get_protected_until(self, obj: Host) -> datetime | None:
        now = timezone.now()
        ends = [a.protected_until for a in self._attempts(obj) if a.protected_until and a.protected_until > now]
        return max(ends) if ends else None


_reason_body = inline_serializer(
    "HostActionRequest", {"reason": serializers.CharField(required=False, allow_blank=True, max_length=500)}
)
_drain_body = inline_serializer(
    "HostDrainRequest",
    {
        "reason": serializers.CharField(required=False, allow_blank=True, max_length=500),
        "at": serializers.CharField(
            required=False, help_text=f"schedule the drain for this time: {SCHEDULED_DRAIN_FORM}"
        ),
        "in": serializers.CharField(required=False, help_text="schedule the drain this long from now: 2h, 1d 6h"),
    },
)


class HostRemovedSerializer(serializers.Serializer):
    """A host removed from its cluster for good (``POST hosts/{name}/remove/``)."""

    name = serializers.CharField()
    cluster = serializers.CharField(source="cluster.name")
    removed_at = serializers.DateTimeField()


def idle_of_hosts(hosts: list[Host]) -> set[int]:
    """The ids of the idle open attempts on ``hosts`` (read with :func:`hosts_queryset`'s links):
    :func:`scheduler.idle.idle_attempts`, once for them all."""
    from scheduler.idle import idle_attempts

    ids = [link.attempt_id for h in hosts for gpu in h.gpus.all() for link in gpu.attempt_links.all() if link.open]
    return set(idle_attempts(ids)) if ids else set()


def hosts_queryset() -> QuerySet[Host]:
    """Registered hosts with GPUs, their open attempt links and their latest cordon or drain events
    (``reason_events``, for :func:`state_reason`): a fixed number of queries."""
    links = AttemptGPU.objects.filter(open=True).select_related("attempt")
    gpus = GPU.objects.registered().order_by("index").prefetch_related(Prefetch("attempt_links", queryset=links))
    kinds = sorted({k for group in REASON_EVENT_KINDS.values() for k in group})
    # the latest recorded (id), not the latest ``at``: a tick stamps its events with its start, a
    # heartbeat with its receipt before it waited for the host's lock (scheduler.models.HostEvent)
    events = HostEvent.objects.filter(kind__in=kinds).select_related("actor").order_by("-id")
    return (
        Host.objects.filter(removed_at__isnull=True)
        .select_related("cluster", "drain_at_by")
        .prefetch_related(
            Prefetch("gpus", queryset=gpus),
            Prefetch("events", queryset=events[:_REASON_EVENTS_KEPT], to_attr="reason_events"),
        )
        .order_by("name")
    )


class IsAdminForHosts(IsAdminUser):
    """Staff with ``change_host`` (``services.may_operate_hosts``), the admin's rule for its host
    actions: a view-only staff member drained and removed hosts here (brk42)."""

    message = HOST_OPERATOR_REFUSAL

    def has_permission(self, request: Request, view: Any) -> bool:
        return may_operate_hosts(request.user)


@extend_schema(
    parameters=[
        OpenApiParameter("cluster", str, description="only hosts of this cluster (name)"),
        OpenApiParameter("state", str, description="only hosts in this state"),
    ]
)
class HostViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Hosts by name. Everybody may read them; only admins (staff) cordon, drain, resume or remove."""

    serializer_class = HostSerializer
    lookup_field = "name"
    lookup_value_regex = HOST_NAME_PATTERN
    filter_backends: list = []
    pagination_class = None

    def get_queryset(self) -> QuerySet[Host]:
        queryset = hosts_queryset()
        params = self.request.query_params
        if self.action == "list":  # a filter naming nothing is a 400 (params.py); actions find by name
            refuse_unknown(params, ["cluster", "state"])
            if cluster := cluster_param(params.get("cluster")):
                queryset = queryset.filter(cluster__name=cluster)
            if state := host_state_param(params.get("state")):
                queryset = queryset.filter(state=state)
        return queryset

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        hosts = list(self.filter_queryset(self.get_queryset()))
        context = {**self.get_serializer_context(), "idle": idle_of_hosts(hosts)}  # one read for the list
        return Response(self.get_serializer_class()(hosts, many=True, context=context).data)

    def get_permissions(self) -> list[Any]:
        if self.action in {"cordon", "drain", "drain_now", "resume", "remove", "cancel_drain"}:
            return [IsAuthenticated(), IsAdminForHosts()]
        return super().get_permissions()

    def get_object(self) -> Host:
        try:
            return super().get_object()
        except exceptions.NotFound:  # FairwayViewSet's "No host 'gpu3'.", also for a removed one
            name = self.kwargs.get(self.lookup_field, "")
            removed = (
                Host.objects.filter(name=name, removed_at__isnull=False).select_related("cluster").first()
                if isinstance(name, str)
                else None
            )
            if removed is not None and removed.removed_at is not None:  # try56: it read as a typo
                # a live answer: today's time alone, as every live message says it (deploy48)
                raise exceptions.NotFound(
                    f"Host {name!r} was removed from cluster {removed.cluster.name} at "
                    f"{instant_text(removed.removed_at)}; its name stays taken "
                    "(a machine that comes back joins under another name)."
                ) from None
            raise

    def _reason(self, request: Request, fields: tuple[str, ...] = ("reason",)) -> str:
        """The body's ``reason`` ("" when none); a 400 for any other body (a field not in ``fields``)."""
        # A body other than {"reason": ...} ({"reasn": ...}, a list) acted without its reason (brk31)
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"non_field_errors": ['The body is {"reason": "..."} or empty.']})
        unknown = sorted(str(k) for k in request.data if k not in fields)
        if unknown:
            message = f"Unknown field (the fields are: {', '.join(fields)})."
            raise serializers.ValidationError({k[:40]: [message] for k in unknown[:10]}, code="unknown_field")
        reason = request.data.get("reason", "")
        if problem := host_reason_problem(reason):  # the services' rule, before the host is looked at
            raise serializers.ValidationError({"reason": [problem]}, code="invalid_reason")
        return reason

    def _change(self, request: Request, state: str, drain_now: bool = False) -> Response:
        host = self.get_object()
        after = do_set_host_state(request.user, host, state, self._reason(request), drain_now=drain_now)
        return self._host(host, scheduled_drain_note(host, after))

    def _host(self, host: Host, drain_change: str = "") -> Response:
        context = {**self.get_serializer_context(), "scheduled_drain_change": drain_change}
        return Response(HostSerializer(self.get_queryset().get(pk=host.pk), context=context).data)

    def _drain(self, request: Request, drain_now: bool) -> Response:
        """A drain (or drain now) at once, or at the body's ``at`` (a time) or ``in`` (a duration
        from now): scheduled (``services.do_schedule_drain``), applied then by the tick."""
        reason = self._reason(request, ("reason", "at", "in"))
        if "at" not in request.data and "in" not in request.data:
            return self._change(request, Host.State.DRAINING, drain_now)
        at, after = request.data.get("at"), request.data.get("in")
        if "at" in request.data and "in" in request.data:
            raise serializers.ValidationError({"at": ["Give at (a time) or in (a duration from now), not both."]})
        if "in" in request.data:  # {"in": null} is refused, not read as "now"
            try:
                at = drain_in(after)
            except ValueError:
                raise serializers.ValidationError(
                    {"in": ["in is a duration from now: seconds (an integer) or like 2h30m, 1d 6h."]}, code="invalid_at"
                ) from None
        host = self.get_object()
        try:
            do_schedule_drain(request.user, host, at, reason, drain_now=drain_now)
        except HostError as exc:
            if exc.field == "at" and "in" in request.data:  # said of the duration the body gave
                raise HostError(exc.code, "in", exc.message, status=exc.status) from None
            raise
        return self._host(host)

    @extend_schema(request=_reason_body, responses=HostSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, name: str | None = None) -> Response:
        """Cordon: no new work; running work stays (DESIGN.md §6). Admins only."""
        return self._change(request, Host.State.CORDONED)

    @extend_schema(request=_drain_body, responses=HostSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str | None = None) -> Response:
        """Drain: no new work; attempts leave as their protection ends. With ``at`` (or ``in``):
        scheduled for that time, replacing any scheduled before (docs/deploy.md). Admins only."""
        return self._drain(request, drain_now=False)

    @extend_schema(request=_drain_body, responses=HostSerializer)
    @action(detail=True, methods=["post"], url_path="drain-now")
    def drain_now(self, request: Request, name: str | None = None) -> Response:
        """Drain now: stop every attempt at once, ignoring protection (audited). With ``at`` (or
        ``in``): scheduled for that time. Admins only."""
        return self._drain(request, drain_now=True)

    @extend_schema(request=_reason_body, responses=HostSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str | None = None) -> Response:
        """Resume: the host is schedulable again; cancels its scheduled drain too. Admins only."""
        return self._change(request, Host.State.ACTIVE)

    @extend_schema(request=_reason_body, responses=HostSerializer)
    @action(detail=True, methods=["post"], url_path="cancel-drain")
    def cancel_drain(self, request: Request, name: str | None = None) -> Response:
        """Cancel the host's scheduled drain, leaving its state as it is (with none scheduled: a
        no-op, ``scheduled_drain`` null). Admins only."""
        host = self.get_object()
        after = do_cancel_scheduled_drain(request.user, host, self._reason(request))
        # try62: the CLI said "no drain scheduled" of a cancelled one, the words of a cancel of none
        return self._host(host, scheduled_drain_note(host, after))

    @extend_schema(request=_reason_body, responses=HostRemovedSerializer)
    @action(detail=True, methods=["post"])
    def remove(self, request: Request, name: str | None = None) -> Response:
        """Remove from the cluster for good (a decommissioned machine: its GPUs leave every
        entitlement, its agent is refused; its history stays). Refused (409 ``host_busy``) while an
        attempt is open there: drain it first. Admins only; as the admin's action
        (``services.do_remove_host``)."""
        host = self.get_object()
        removed = do_remove_host(request.user, host, self._reason(request))
        return Response(HostRemovedSerializer(removed).data)


class OccupancySerializer(serializers.Serializer):
    cluster = serializers.CharField()
    gpus = serializers.IntegerField()
    allocated = serializers.IntegerField(help_text="GPUs held by allocated (funded) attempts")
    unallocated = serializers.IntegerField(help_text="GPUs held by unallocated or unfunded attempts")
    idle = serializers.IntegerField(help_text="free GPUs that could take work")
    unavailable = serializers.IntegerField(help_text="free GPUs on hosts not active, or unhealthy")
    unhealthy = serializers.IntegerField(help_text="of the unavailable: free GPUs reporting unhealthy")
    occupancy = serializers.FloatField(help_text="(allocated + unallocated) / gpus")
    occupancy_text = serializers.CharField(
        help_text="the occupancy as every page says it: `7 of 8 GPUs occupied (88%)`"
    )
    hosts_by_state = serializers.DictField(child=serializers.IntegerField())
    workloads_by_state = serializers.DictField(child=serializers.IntegerField())
    pending_by_reason = serializers.DictField(child=serializers.IntegerField())
    pending_held = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="of pending_by_reason's held: those on a hold of their own, by kind (user, admin); "
        "the rest wait for their budget's hold",
    )
    pending_maintenance = serializers.IntegerField(
        help_text="of pending_by_reason's reserved_for_other: those a scheduled drain alone keeps out "
        '(the lists\' "GPUs reserved for maintenance"); the rest are reserved for a larger job',
    )
    models = serializers.DictField(child=serializers.IntegerField(), help_text="GPUs by model")


class MetricsView(FairwayAPIView):
    """``GET /api/v1/metrics/``: occupancy right now, per cluster (over time: ``metrics/pyramid/``)."""

    @extend_schema(
        parameters=[OpenApiParameter("cluster", OpenApiTypes.STR, description="one cluster (name)")],
        responses=OccupancySerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return Response([o.as_dict() for o in occupancy(cluster_only_params(request.query_params))])
