"""Scheduler API: workloads (submit, list, detail, cancel, log tails) and clusters (read-only)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection
from django.db.models import F, IntegerField, Prefetch, QuerySet, prefetch_related_objects
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from budgets.services import budget_paths, unknown_budget_words
from config.api import FairwayAPIView, FairwayViewSet, no_such
from config.api import prefill as _prefill
from config.pagination import FairwayLimitOffsetPagination
from config.throttling import ExecRateThrottle, QuoteRateThrottle
from fairway_common.limits import DEFAULT_LOG_TAIL_BYTES, MAX_LOG_TAIL_BYTES
from scheduler import hardware_memo
from scheduler.accounting import account_page, as_never_started
from scheduler.api.filters import SkipUnaskedFilterBackend, WorkloadFilter
from scheduler.api.params import INSTANT_HELP, MAX_BACK, cluster_param, int_param, parse_instant, refuse_unknown
from scheduler.api.serializers import (
    EVENT_ORDER,
    HELD_BY_NAME,
    IDLE,
    ROW_JSON,
    ROW_NAMES,
    ArrayGroupSerializer,
    BulkActionSerializer,
    BulkOutcomeSerializer,
    ClusterSerializer,
    ExecRequestSerializer,
    ExecResultSerializer,
    GroupCanceledSerializer,
    GroupHoldSerializer,
    GroupReleaseSerializer,
    GroupUpdatedSerializer,
    GroupUpdateSerializer,
    HistorySerializer,
    NotificationSettingsSerializer,
    QuoteSerializer,
    WorkloadDetailSerializer,
    WorkloadHeldSerializer,
    WorkloadListSerializer,
    WorkloadQuoteSerializer,
    WorkloadReleasedSerializer,
    WorkloadResubmitSerializer,
    WorkloadRowSerializer,
    WorkloadSpecSerializer,
    WorkloadSubmitSerializer,
    WorkloadSubmittedSerializer,
    WorkloadUpdatedSerializer,
    WorkloadUpdateSerializer,
)
from scheduler.bulk import do_bulk_action, require_filter
from scheduler.efficiency import efficiency_of_attempts
from scheduler.idle import idle_of_workloads
from scheduler.lifecycle import charged_seconds
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
    WorkloadDependency,
    WorkloadEvent,
)
from scheduler.notifications import SETTINGS_FIELDS, listed_kinds
from scheduler.notifications import save_settings as save_notification_settings
from scheduler.services import (
    LOGS_FORBIDDEN,
    do_cancel_group,
    do_cancel_workload,
    do_hold_group,
    do_release_workload,
    do_submit_workload,
    do_update_group,
    do_update_workload,
    hold_workload,
    may_read_private,
)

HISTORY_MAX = 10_000
"""At most this many finished attempts in one history answer."""


def _is_id(pk: object) -> bool:
    """``pk`` is a row id: ASCII digits, few enough for a database integer (``"²".isdigit()`` is
    true and its query's ``int("²")`` failed: a 500, brk35)."""
    text = str(pk)
    return text.isascii() and text.isdigit() and len(text) <= 18


class WorkloadLogsMixin:
    """``GET /api/v1/workloads/{id}/logs/?attempt=N&tail=BYTES``: the tail of an attempt's log,
    fetched live from the agent(s) that ran it (its owner, members of its budget, and staff)."""

    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """200 ``{"workload", "attempt", "attempt_id", "ended", "parts": [{"host", "rank", "data",
        "offset", "eof", "error"}]}`` (last attempt unless ``attempt``; ``ended``: the attempt has
        ended, its log grows no more); 403 ``forbidden`` for others; 404 ``no_attempt``; 400
        ``invalid`` for a bad ``attempt``/``tail``."""
        from scheduler.gateway import attempt_log_tails

        workload = Workload.objects.select_related("budget").filter(pk=pk).first() if _is_id(pk) else None
        if workload is None:
            raise no_such("workload", pk)
        if not may_read_private(request.user, workload, self.accessible_budget_ids):
            raise PermissionDenied(LOGS_FORBIDDEN)
        values: dict[str, int | None] = {"tail": DEFAULT_LOG_TAIL_BYTES, "attempt": None}
        for field in values:  # the refusal names the parameter that is not a number
            given = int_param(field, request.query_params.get(field), f"{field} is an integer.")
            values[field] = given if given is not None else values[field]
        tail, number = int(values["tail"] or 0), values["attempt"]
        if not 0 <= tail <= MAX_LOG_TAIL_BYTES:
            raise ValidationError({"tail": [f"tail is 0..{MAX_LOG_TAIL_BYTES} bytes."]}, code="invalid")
        attempts = Attempt.objects.filter(workload=workload)
        attempt = (attempts.filter(number=number) if number is not None else attempts.order_by("-number")).first()
        if attempt is None:
            if number is None:
                from scheduler.reports import no_attempt_words

                raise NotFound(no_attempt_words(workload.state), code="no_attempt")
            which = f"attempt {number}" if 0 < number < 10**9 else "such attempt"
            raise NotFound(f"This workload has no {which}.", code="no_attempt")
        parts = attempt_log_tails(attempt.pk, tail)
        return Response(
            {
                "workload": workload.pk,
                "attempt": attempt.number,
                "attempt_id": attempt.pk,
                "ended": attempt.ended_at is not None,
                "parts": [
                    {"host": p.host, "rank": p.rank, "data": p.data, "offset": p.offset, "eof": p.eof, "error": p.error}
                    for p in parts
                ],
            }
        )


EVENT_COLUMNS = ("workload", "at", "kind", "message", "data", "actor")
"""The event columns a detail reads (``WorkloadEventSerializer``; ``workload``: the prefetch's join)."""

LIST_COLUMNS = WorkloadListSerializer.Meta.model_columns
"""What ``WorkloadRowSerializer`` reads of a workload row besides :data:`ROW_NAMES` (tests: no
query per row)."""


class CountedPagination(FairwayLimitOffsetPagination):
    """The API's pagination, counting ``count_queryset`` when the view sets one (a queryset of the
    same rows that is cheaper to count: no joins, no annotations), else the page's queryset."""

    count_queryset: QuerySet[Any] | None = None

    def get_count(self, queryset: Any) -> int:
        return super().get_count(self.count_queryset if self.count_queryset is not None else queryset)


RELATIONS = "fairway_relations"
"""The annotation of :meth:`WorkloadViewSet.detail_rows`: the sum of the bits of
:data:`RELATION_BITS` whose relation holds a row of the workload."""

RELATION_BITS = {"attempts": 1, "dependencies": 2, "resubmissions": 4}
"""The relations of a detail that many workloads have no row in (never started; waits for nothing)."""


def _relations_sql() -> RawSQL:
    """:data:`RELATIONS` in the workload row's own statement: one index probe per relation (its
    foreign key to the workload), written out: ``Exists`` of a queryset per relation costs more of
    the ORM's building and compiling than the queries it spares (docs/benchmarks/api_load.md)."""
    quote = connection.ops.quote_name
    workload = f"{quote(Workload._meta.db_table)}.{quote(Workload._meta.pk.column)}"
    probes = []
    for name, bit in RELATION_BITS.items():
        relation = Workload._meta.get_field(name)
        table, column = quote(relation.related_model._meta.db_table), quote(relation.field.column)
        probes.append(
            # aliased: a relation of the workload table itself (resubmissions) names the outer row too
            f"CASE WHEN EXISTS (SELECT 1 FROM {table} AS rel WHERE rel.{column} = {workload}) THEN {bit} ELSE 0 END"  # noqa: S608 -- the models' own names
        )
    return RawSQL(" + ".join(probes), [], output_field=IntegerField())  # noqa: S611 -- the models' own names, no input


def refuse_body(request: Request) -> None:
    """The body of an action that reads none (hold, release, cancel) must be empty (``{}``, the
    CLI's, or none): ``{"reason": "x"}`` was accepted and ignored (api48); a 400 ``unknown_field``
    naming its keys, nothing done."""
    data = request.data
    if not data:
        return
    if not hasattr(data, "keys"):
        raise ValidationError({"non_field_errors": ["This action takes no body (or {})."]}, code="invalid")
    message = "Unknown field (this action takes no body)."
    raise ValidationError({str(k)[:40]: [message] for k in sorted(map(str, data.keys()))[:10]}, code="unknown_field")


class WorkloadViewSet(WorkloadLogsMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Every authenticated user sees the whole queue; env values only within their budgets."""

    filterset_class = WorkloadFilter
    filter_backends = [SkipUnaskedFilterBackend]
    pagination_class = CountedPagination

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
            # Of the actor and of the workload waited for, only what the answer shows: a join of every
            # column costs its compilation and its decoding (the whole waited-for workload: its JSON
            # too) on every detail (tests/api/test_fast_representation.py: no deferred column read).
            Prefetch(
                "events",
                queryset=WorkloadEvent.objects.select_related("actor")
                .only(*EVENT_COLUMNS, "actor__username")
                .order_by(*EVENT_ORDER),
            ),
            Prefetch(
                "dependencies",
                queryset=WorkloadDependency.objects.select_related("after")
                .only("workload", "after", "condition", "after__state")
                .order_by("after_id"),
            ),
            Prefetch("resubmissions", queryset=Workload.objects.only("id", "resubmitted_from").order_by("id")),
        ]

    @staticmethod
    def detail_rows(workloads: QuerySet[Workload]) -> QuerySet[Workload]:
        """``workloads`` as a detail reads them: the row with its owner, cluster and budget, and
        :data:`RELATIONS`, which of the relations the detail shows hold rows
        (:meth:`fetch_relations` reads only those)."""
        return workloads.select_related("owner", "cluster", "budget").annotate(
            **{RELATIONS: _relations_sql(), HELD_BY_NAME: F("held_by__username")}
        )

    @classmethod
    def fetch_relations(cls, workload: Workload) -> Workload:
        """The :meth:`detail_prefetches` of a workload read by :meth:`detail_rows`: the attempts
        and dependencies its row says it has none of are known empty (no query: most workloads
        of a queue never started and wait for nothing), the rest prefetched as before. The
        answer is the one ``prefetch_related(*detail_prefetches())`` gives
        (``tests/api/test_detail_relations.py``)."""
        held = workload.__dict__.pop(RELATIONS)
        prefetches = []
        for prefetch in cls.detail_prefetches():
            bit = RELATION_BITS.get(prefetch.prefetch_to, 0)
            if bit and not held & bit:
                _prefill(workload, prefetch.prefetch_to, [])
            else:
                prefetches.append(prefetch)
        prefetch_related_objects([workload], *prefetches)
        return workload

    def get_queryset(self) -> QuerySet[Workload]:
        if self.action == "list":
            return self.list_rows(Workload.objects.all())
        if self.action == "retrieve":
            return self.detail_rows(Workload.objects.all())  # its relations: retrieve()
        if self.action in ("cancel", "partial_update"):
            # Only its id: the cancel reads the row under its lock, the answer after it (_detail).
            return Workload.objects.only("id")
        if self.action in ("resubmit", "resubmit_quote", "spec"):
            return Workload.objects.select_related("cluster")  # its spec: the row and its cluster's name
        queryset = Workload.objects.select_related("owner", "cluster", "budget")
        return queryset.prefetch_related(*self.detail_prefetches())  # accounting from the attempts

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # DRF's, the workload's relations read by fetch_relations (no docstring: the schema's
        # description of the operation stays the view's).
        workload = self.fetch_relations(self.get_object())
        return Response(self.get_serializer(workload).data)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The queue, newest first, paginated; each row's accounting from one query of the page's
        attempts (``scheduler.accounting.account_page``), not an aggregate over the whole join.

        The filters apply to the plain workloads, which the page's count counts (the owner and
        cluster are non-null foreign keys: joining them, as the rows' names do, counts the same
        rows); the rows are those workloads with their columns and names."""
        pages = self.paginator
        known = [*WorkloadFilter.base_filters, pages.limit_query_param, pages.offset_query_param]
        refuse_unknown(request.query_params, known, several=["state"])
        filtered = self.filter_queryset(Workload.objects.all())
        queryset = self.list_rows(filtered)
        self.paginator.count_queryset = filtered  # type: ignore[union-attr]
        page = self.paginate_queryset(queryset)
        rows = list(page if page is not None else queryset)
        account_page(rows)
        idle = idle_of_workloads([w.pk for w in rows if w.state == Workload.State.RUNNING])
        for w in rows:
            w.__dict__[IDLE] = idle.get(w.pk)
        data = self.get_serializer(rows, many=True).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    @staticmethod
    def list_rows(workloads: QuerySet[Workload]) -> QuerySet[Workload]:
        """``workloads`` as the queue's rows: only the columns a row shows (not env, command,
        pending_detail, ...: JSON the row would decode for nothing; the budget's path comes from
        the tree), newest first; the owner's and cluster's names as columns of the row
        (``ROW_NAMES``), not a user and a cluster model per row. Accounting: one query of the
        page's attempts (``list()``)."""
        names = {name: F(column) for name, column in ROW_NAMES.items()}
        names |= {name: KeyTransform(key, column) for name, (column, key) in ROW_JSON.items()}
        return workloads.only(*LIST_COLUMNS).annotate(**names).order_by("-id")

    def get_serializer_class(self):  # noqa: ANN201 -- DRF's signature
        if self.action == "list":
            # The schema (drf-spectacular's fake view) names the serializer the rows' JSON follows.
            return WorkloadListSerializer if getattr(self, "swagger_fake_view", False) else WorkloadRowSerializer
        if self.action == "create":
            return WorkloadSubmitSerializer
        if self.action in ("resubmit", "resubmit_quote"):
            return WorkloadResubmitSerializer
        if self.action == "quote":
            return WorkloadQuoteSerializer
        if self.action == "partial_update" and getattr(self, "swagger_fake_view", False):
            return WorkloadUpdateSerializer  # the schema's request body (the answer: the detail)
        return WorkloadDetailSerializer

    def _detail(self, workload_id: int) -> dict:
        workload = self.fetch_relations(self.detail_rows(Workload.objects.all()).get(pk=workload_id))
        return WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data

    def create(self, request: Request) -> Response:
        """Submit a workload: 201 with the workload, or 400 in the API's error format."""
        serializer = WorkloadSubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        kwargs = serializer.to_service_kwargs()
        workload = do_submit_workload(
            request.user,
            tree=self.budget_tree,
            memberships=self.memberships,
            hardware_token=hardware_memo.MEMO.token(request),  # read with the tree's (config.memo)
            **kwargs,
        )
        return self._submitted(workload, bool(kwargs["after"]))

    def _submitted(self, workload: Workload, after: bool) -> Response:
        """201 with the workload a submission just wrote."""
        # The row just written (owner, budget, cluster attached) is the answer: no second read of
        # it. Known without a query: no attempt yet, the one ``submitted`` event the service wrote,
        # no resubmission, and, without an ``after`` list, no dependencies.
        _prefill(workload, "attempts", [])
        _prefill(workload, "events", [workload.submitted_event])
        _prefill(workload, "resubmissions", [])  # nothing is submitted again from it yet
        if not after:
            _prefill(workload, "dependencies", [])
        else:
            prefetch_related_objects(
                [workload], *[p for p in self.detail_prefetches() if p.prefetch_to == "dependencies"]
            )
        as_never_started(workload)
        data = WorkloadSubmittedSerializer(workload, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("since", OpenApiTypes.STR, description=f"{INSTANT_HELP} (default 7d)"),
            OpenApiParameter("budget", OpenApiTypes.STR, description="a budget (path or id): it and its sub-budgets"),
            OpenApiParameter("cluster", OpenApiTypes.STR, description="one cluster (name)"),
            OpenApiParameter(
                "limit", OpenApiTypes.INT, description=f"at most this many (default and maximum {HISTORY_MAX})"
            ),
        ],
        responses=HistorySerializer,
    )
    @action(detail=False, methods=["get"])
    def history(self, request: Request) -> Response:
        """Finished attempts, newest first, like ``sacct``: who, where, when, how long, why it ended,
        GPU-hours charged, mean GPU utilization. Three queries whatever the number of rows (a fourth counts
        them when ``limit`` cut the answer: only the rows answered are read, brk46); 400 ``invalid`` on a bad
        ``since``, ``budget`` or ``limit``."""
        from budgets.services import resolve_budget, subtree_ids
        from scheduler.accounting import finished_attempts

        params = request.query_params
        refuse_unknown(params, ["since", "budget", "cluster", "limit"])
        now = timezone.now()
        since = parse_instant("since", params.get("since"), now, now - timedelta(days=7))
        if not timedelta(0) < now - since <= MAX_BACK:
            raise ValidationError(
                {"since": [f"an instant in the past, at most {MAX_BACK.days} days back"]}, code="invalid"
            )
        limit = int_param("limit", params.get("limit"), "an integer")
        limit = HISTORY_MAX if limit is None else limit
        if not 1 <= limit <= HISTORY_MAX:
            raise ValidationError({"limit": [f"1..{HISTORY_MAX}"]}, code="invalid")
        budget_ids = None
        if params.get("budget"):
            found = resolve_budget(params["budget"].replace("\x00", ""), self.budget_tree)
            if found is None:
                raise ValidationError(
                    {"budget": [unknown_budget_words(params["budget"], self.budget_tree)]}, code="invalid"
                )
            budget_ids = subtree_ids([found.id], self.budget_tree)
        attempts = finished_attempts(since, budget_ids, cluster_param(params.get("cluster")))
        shown = list(attempts[:limit])  # only the rows answered are read (brk46), counted apart
        # Every host of a gang (``hosts``), for the rows shown only: one more query.
        prefetch_related_objects(shown, Prefetch("gpu_links", queryset=AttemptGPU.objects.select_related("gpu__host")))
        # Their mean GPU utilization (scheduler.efficiency): one more query.
        held = efficiency_of_attempts([a.pk for a in shown], now)
        paths = budget_paths(self.budget_tree)
        rows = [
            {
                "workload": a.workload_id,
                "name": a.workload.name,
                "owner": a.workload.owner.username,
                "budget": paths.get(a.workload.budget_id, str(a.workload.budget_id)),
                "cluster": a.workload.cluster.name,
                "attempt": a.number,
                "host": a.host.name,
                "hosts": a.host_names(),
                "gpus": a.workload.gpu_count,
                "gpu_model": a.workload.gpu_model,
                "allocated": a.allocated and not a.unfunded,
                "submitted_at": a.workload.submitted_at,
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                # the whole seconds its charge counts: elapsed × GPUs is the charge
                "elapsed_s": charged_seconds(a.started_at, a.ended_at) if a.started_at else 0,
                "end_reason": a.end_reason,
                "exit_code": a.exit_code,
                "charged_gpu_hours": round(a.charged_gpu_seconds / 3600, 4),
                "charged_gpu_seconds": a.charged_gpu_seconds,
                "utilization": held[a.pk].as_data()["utilization"] if a.pk in held else None,
                "utilization_why": held[a.pk].utilization_why if a.pk in held else None,
            }
            for a in shown
        ]
        count = len(shown) if len(shown) < limit else attempts.count()
        return Response(HistorySerializer({"since": since, "until": now, "count": count, "results": rows}).data)

    @action(
        detail=False, methods=["post"], throttle_classes=[*api_settings.DEFAULT_THROTTLE_CLASSES, QuoteRateThrottle]
    )
    def quote(self, request: Request) -> Response:
        """Quote before submitting (DESIGN.md §3.8): the submission's body, validated like a
        submission (400 in the same format) but for ``min_runtime``, which may be left out; 200
        with, for minimum runtimes 0, 30 min, 2 h, 8 h, 24 h (``scheduler.estimates.QUOTE_RUNTIMES_S``,
        up to the site's longest) and the request's own, the estimated start, the GPU-hours charged and the ratio after
        admission; ``waits_for`` (its ``after`` work not ended: then no start), ``array`` (the lines
        price one member; it gives the whole array's first and last starts and charge) and
        ``notes`` (what the lines assume, in words). Nothing is written. Throttled per user on top
        of the API's rates (429, ``FAIRWAY_THROTTLE_QUOTE``: :class:`config.throttling.QuoteRateThrottle`)."""
        from scheduler.estimates import do_quote

        serializer = WorkloadQuoteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return self._quote_answer(*do_quote(request.user, **serializer.to_service_kwargs()))

    @staticmethod
    def _quote_answer(workload: Workload, lines: list[Any], terms: Any) -> Response:
        body = {
            "budget": workload.budget.path,
            "cluster": workload.cluster.name,
            "gpu_model": workload.gpu_model,
            "gpu_count": workload.gpu_count,
            "quotes": [line.__dict__ for line in lines],
            "waits_for": terms.waits_for,
            "array": terms.array.__dict__ if terms.array is not None else None,
            "notes": terms.notes,
        }
        return Response(QuoteSerializer(body).data)

    def _resubmission(self, request: Request) -> dict[str, Any]:
        """``do_submit_workload``'s arguments that submit this workload again with the request's
        overrides (``scheduler.resubmit``): 403 for whoever may not read its spec; the overrides
        parsed, and the result refused, as a submission's."""
        from scheduler.resubmit import resubmission_data

        old = self.get_object()
        WorkloadResubmitSerializer(data=request.data).is_valid(raise_exception=True)  # the overrides' form
        data = resubmission_data(
            request.user,
            old,
            request.data,
            budget_path=budget_paths(self.budget_tree).get(old.budget_id, str(old.budget_id)),
            accessible=self.accessible_budget_ids,
        )
        serializer = WorkloadSubmitSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        return {**serializer.to_service_kwargs(), "resubmitted_from": old}

    @extend_schema(request=WorkloadResubmitSerializer, responses={201: WorkloadSubmittedSerializer})
    @action(detail=True, methods=["post"])
    def resubmit(self, request: Request, pk: str | None = None) -> Response:
        """Submit again (docs/jobs.md "Submit again"): a new workload from this one's spec
        (``spec/``) with the body's overrides, through the submission's every rule; 201 with the new
        workload (``resubmitted_from``: this one), as ``POST workloads/``. Any state may be
        submitted again. Not copied: its ``after`` list and its array group (a member comes back as
        ``array: "<index>"``). Secret values are reused for the owner only: anyone else gets 400
        ``secret_values_required`` naming them unless the body's ``env`` gives them. 403
        ``forbidden`` for whoever may not read its env; 429 ``too_many_submitted`` past the limit."""
        kwargs = self._resubmission(request)
        workload = do_submit_workload(
            request.user,
            tree=self.budget_tree,
            memberships=self.memberships,
            hardware_token=hardware_memo.MEMO.token(request),
            **kwargs,
        )
        return self._submitted(workload, bool(kwargs["after"]))

    @extend_schema(request=WorkloadResubmitSerializer, responses=QuoteSerializer)
    @action(
        detail=True,
        methods=["post"],
        url_path="resubmit/quote",
        url_name="resubmit-quote",
        throttle_classes=[*api_settings.DEFAULT_THROTTLE_CLASSES, QuoteRateThrottle],
    )
    def resubmit_quote(self, request: Request, pk: str | None = None) -> Response:
        """The quote (``quote/``) of this resubmission: the same body as ``resubmit/``, the same
        refusals; nothing is written."""
        from scheduler.estimates import do_quote

        kwargs = self._resubmission(request)
        kwargs.pop("resubmitted_from")
        return self._quote_answer(*do_quote(request.user, **kwargs))

    @extend_schema(responses=WorkloadSpecSerializer)
    @action(detail=True, methods=["get"])
    def spec(self, request: Request, pk: str | None = None) -> Response:
        """The workload's spec: the submission fields that make it again (``POST workloads/``'s,
        ``fairway submit -f``'s YAML), what ``resubmit/`` submits. Secret values are the
        placeholder ``<secret: give its value>``, which a submission refuses
        (``secret_values_required``). 403 ``forbidden`` for whoever may not read its env."""
        from scheduler.resubmit import RESUBMIT_FORBIDDEN, workload_spec

        workload = self.get_object()
        if not may_read_private(request.user, workload, self.accessible_budget_ids):
            raise PermissionDenied(RESUBMIT_FORBIDDEN)
        path = budget_paths(self.budget_tree).get(workload.budget_id, str(workload.budget_id))
        return Response(workload_spec(workload, path))

    @extend_schema(request=WorkloadUpdateSerializer, responses=WorkloadUpdatedSerializer)
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change a pending workload (``scontrol update``; docs/jobs.md, "Changing a pending
        workload"): some of ``name``, ``budget``, ``gpu_model``, ``gpu_count``, ``min_runtime``,
        ``max_runtime``, ``retries``, ``cpus``, ``memory``, ``shared_memory``, checked as a
        submission checks them (400 in its format and codes); 200 with the workload (its ``updated``
        event lists old → new); 400 ``not_updatable`` (image, command, env, mounts, after, array,
        cluster); 403 ``forbidden`` (only those who may cancel it); 409 ``not_pending`` (it has
        started or ended), ``budget_charged`` (a workload that has run keeps its budget). It keeps
        its place in its budget's queue (submission time and sequence).

        A starting or running workload takes ``max_runtime`` alone (Slurm's ``TimeLimit=``;
        docs/jobs.md "The wall-time limit of a running workload"): lowered by whoever may cancel it,
        never below its minimum runtime (400 ``max_runtime_below_min_runtime``); raised or removed
        (``null``) only by an admin (403 ``raise_needs_admin``); a limit it has already run past
        stops it (``timeout``) at the next tick. Any other field: 409 ``not_pending``.

        ``changed``: false when every value given was already the workload's (nothing written, no
        event; ``fairway update`` and the web page then say ``nothing_to_change_text``)."""
        workload = self.get_object()
        serializer = WorkloadUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = workload.spec_version  # read before: the queryset may defer it
        done = do_update_workload(request.user, workload, serializer.to_changes(), tree=self.budget_tree)
        return Response({**self._detail(workload.pk), "changed": done.spec_version != version})

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel: 200 with the workload when it is canceled at once (it held no GPUs); 202 when a
        stop was issued to its running attempt: ``stop`` says which, and ``stop.ends_as`` the
        state to expect (``canceled``) once the agent reports the release (it keeps running, and an
        allocated attempt is charged, until then); 403 ``forbidden``; 409 ``already_final``."""
        refuse_body(request)
        workload = self.get_object()
        do_cancel_workload(request.user, workload)
        data = self._detail(workload.pk)
        final = data["state"] in Workload.FINAL_STATES
        return Response(data, status=status.HTTP_200_OK if final else status.HTTP_202_ACCEPTED)

    @extend_schema(request=ExecRequestSerializer, responses=ExecResultSerializer)
    @action(
        detail=True,
        methods=["post"],
        url_path="exec",
        throttle_classes=[*api_settings.DEFAULT_THROTTLE_CLASSES, ExecRateThrottle],
    )
    def exec_command(self, request: Request, pk: str | None = None) -> Response:
        """Run a command once inside the workload's running attempt, as its processes run (its
        owner's identity, cgroup, private /tmp, environment: docs/jobs.md, "Run a command in a
        running workload"); no TTY, no stdin. Body ``{"command": [...], "timeout": 60, "attempt":
        null, "rank": 0}`` (``rank``: a gang member's host). 200 ``{"exit_code", "stdout", "stderr",
        "stdout_base64", "stderr_base64", "truncated", "timed_out"}`` (each stream's first 1 MiB: as
        text, bad bytes replaced, and its bytes as they are in base64); 400 ``invalid_command``,
        ``invalid_timeout``, ``invalid_attempt``, ``invalid_rank``; 403 ``forbidden`` (anyone but
        the owner: managers and admins too); 409 ``not_running``, ``host_offline``,
        ``agent_too_old``, ``exec_readopted``, ``exec_failed``; 429 (``FAIRWAY_THROTTLE_EXEC``,
        ``exec_busy``); 503 ``exec_unavailable`` (the channel layer failed: the command did not run,
        or its answer was lost: it may have run); 504
        ``exec_timeout`` (the agent did not answer)."""
        from scheduler.execs import do_exec, exec_arguments

        workload = self.get_object()
        command, timeout, number, rank = exec_arguments(request.data)
        done = do_exec(request.user, workload, command, timeout, number, rank)
        return Response(
            {
                "exit_code": done.exit_code,
                "stdout": done.stdout.decode(errors="replace"),
                "stderr": done.stderr.decode(errors="replace"),
                "stdout_base64": base64.b64encode(done.stdout).decode(),
                "stderr_base64": base64.b64encode(done.stderr).decode(),
                "truncated": done.truncated,
                "timed_out": done.timed_out,
            }
        )

    @extend_schema(
        request=BulkActionSerializer,
        responses=BulkOutcomeSerializer,
        parameters=[
            OpenApiParameter(name, OpenApiTypes.STR, description=f"the workload list's {name} filter")
            for name in WorkloadFilter.base_filters
        ],
    )
    @action(detail=False, methods=["post"])
    def bulk(self, request: Request) -> Response:
        """Cancel, hold or release every workload the query's filters match: the workload list's
        filters (``?owner=me&state=pending&budget=nlp&cluster=c&group=7``), so what the list shows
        is what this acts on (Slurm's ``scancel -u me --state=PENDING``; docs/jobs.md "Bulk
        actions"). Each workload by its own action's rules, one at a time in id order; those the
        requester may not act on, or whose state refuses it, are skipped with that action's code.
        200 with counts, the ids changed and the skips; ``dry_run``: the same answer, nothing
        changed. 400 ``filter_required`` (no filter), ``too_many_matched`` (more than
        ``FAIRWAY_BULK_MAX``, default 10,000), a filter's error as the list's, ``unknown_field``."""
        names = list(WorkloadFilter.base_filters)
        refuse_unknown(request.query_params, names, several=["state"])
        require_filter(request.query_params, names)
        serializer = BulkActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        body = serializer.validated_data
        workloads = self.filter_queryset(Workload.objects.all())
        if "ids" in body:
            workloads = workloads.filter(pk__in=body["ids"])
        outcome = do_bulk_action(
            request.user,
            body["action"],
            workloads,
            dry_run=body["dry_run"],
            tree=self.budget_tree,
            memberships=self.memberships,
        )
        return Response(BulkOutcomeSerializer.of(outcome))

    @extend_schema(request=None, responses=WorkloadHeldSerializer)
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        """Hold a pending workload (Slurm's ``scontrol hold``; docs/jobs.md "Hold and release"):
        200 with the workload, reason ``held``, its ``hold`` ``user`` (by its owner or a budget
        manager) or ``admin`` (by an admin); holding a held workload again changes nothing (an
        admin's hold replaces a user's): ``changed`` false then. 403 ``forbidden`` (who may cancel
        it may hold it); 409 ``not_pending``."""
        refuse_body(request)
        workload = self.get_object()
        _done, changed = hold_workload(request.user, workload)  # not another's hold meanwhile (brk55)
        return Response({**self._detail(workload.pk), "changed": changed})

    @extend_schema(request=None, responses=WorkloadReleasedSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """Release a held workload (``scontrol release``): 200 with the workload, back in its
        place in its budget's queue (its submission time and sequence never changed), and
        ``changed`` as a hold's and an update's answer. 403 ``forbidden`` (not one who may cancel
        it, or an admin's hold and the requester no admin); 409 ``not_pending``, ``not_held``."""
        refuse_body(request)
        workload = self.get_object()
        version = workload.spec_version  # read before: a release bumps it
        done = do_release_workload(request.user, workload)
        return Response({**self._detail(workload.pk), "changed": done.spec_version != version})


class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Clusters and their hardware by GPU model (what a submission may ask for)."""

    serializer_class = ClusterSerializer
    lookup_field = "name"
    filter_backends: list = []

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.prefetch_related(
            Prefetch(
                "hosts", queryset=Host.objects.prefetch_related(Prefetch("gpus", queryset=GPU.objects.registered()))
            ),
            Prefetch("mounts", queryset=Mount.objects.order_by("name")),
        ).order_by("name")


class ArrayGroupViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FairwayViewSet):
    """Array groups (docs/jobs.md): ``GET /api/v1/groups/`` (``?owner=me``), one group,
    ``POST /api/v1/groups/{id}/cancel/`` to cancel every member not final yet, ``hold/`` and
    ``release/`` to hold or release every pending member."""

    serializer_class = ArrayGroupSerializer
    filter_backends: list = []

    def get_queryset(self) -> QuerySet[ArrayGroup]:
        qs = ArrayGroup.objects.select_related("owner", "cluster").prefetch_related(
            Prefetch("members", queryset=Workload.objects.only("id", "state", "group_id"))
        )
        if self.action == "list":  # ?owner=teammate listed every group (only "me" was read): brk31
            params = self.request.query_params
            pages = self.paginator
            refuse_unknown(params, ["owner", pages.limit_query_param, pages.offset_query_param])
            owner = params.get("owner") or ""
            if owner == "me":
                qs = qs.filter(owner=self.request.user)
            elif owner:
                from scheduler.api.filters import known_owner

                try:
                    known_owner(owner)
                except DjangoValidationError as exc:
                    raise ValidationError({"owner": exc.messages}, code="invalid") from None
                qs = qs.filter(owner__username=owner)
        return qs.order_by("-id")

    @extend_schema(request=None, responses=GroupCanceledSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """200 ``{"group", "canceled", "members"}``: members canceled (or asked to stop), their
        ids (the shape of hold, release and update: left50); 403 ``forbidden``."""
        refuse_body(request)
        group = self.get_object()
        done = do_cancel_group(request.user, group)
        return Response({"group": group.pk, "canceled": len(done), "members": done, "changed": bool(done)})

    @extend_schema(request=GroupUpdateSerializer, responses=GroupUpdatedSerializer)
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change every pending member of the group as ``PATCH workloads/{id}/`` changes one (not
        ``name``: each member keeps ``NAME[i]``); members that started are left as they are.
        200 ``{"group", "updated", "members"}`` (the ids changed); 403 ``forbidden``; 400 as a
        workload's update."""
        group = self.get_object()
        serializer = GroupUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changed = do_update_group(request.user, group, serializer.to_changes())
        members = [w.pk for w in changed]
        return Response({"group": group.pk, "updated": len(members), "members": members, "changed": bool(members)})

    @extend_schema(request=None, responses=GroupHoldSerializer)
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        """200 ``{"group", "held"}``: pending members held now (docs/jobs.md "Hold and release");
        403 ``forbidden``."""
        refuse_body(request)
        group = self.get_object()
        done = do_hold_group(request.user, group)
        return Response({"group": group.pk, "held": len(done), "members": done, "changed": bool(done)})

    @extend_schema(request=None, responses=GroupReleaseSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """200 ``{"group", "released"}``: held pending members released now (an admin's hold only
        by an admin); 403 ``forbidden``."""
        refuse_body(request)
        group = self.get_object()
        done = do_hold_group(request.user, group, release=True)
        return Response({"group": group.pk, "released": len(done), "members": done, "changed": bool(done)})


class NotificationSettingsView(FairwayAPIView):
    """``GET``/``PUT /api/v1/notifications/``: the requester's own notification choices."""

    serializer_class = NotificationSettingsSerializer

    def _data(self, user: Any) -> dict[str, Any]:
        pref = NotificationSettings.objects.filter(user=user).first()
        if pref is None:
            return {"email_kinds": [], "webhook_kinds": [], "webhook_url": ""}
        return {
            "email_kinds": listed_kinds(pref.email_kinds),
            "webhook_kinds": listed_kinds(pref.webhook_kinds),
            "webhook_url": pref.webhook_url,
        }

    @extend_schema(responses=NotificationSettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(self._data(request.user))

    @extend_schema(request=NotificationSettingsSerializer, responses=NotificationSettingsSerializer)
    def put(self, request: Request) -> Response:
        serializer = NotificationSettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # Webhook kinds need a URL, counting what the PUT leaves as it was: checked under the row
        # lock against the settings as saved (a concurrent PUT's outcome included).
        pref = save_notification_settings(request.user, serializer.validated_data)
        return Response({name: getattr(pref, name) for name in SETTINGS_FIELDS})
