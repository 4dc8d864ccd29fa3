"""``FastRepresentationMixin`` (issue 15): the API's workload, attempt and event JSON planned once
per serializer instance must be DRF's own ``Serializer.to_representation`` (the oracle,
``drf_representation``) on every row: real rows of every state, in UTC and in another current time
zone, and rows whose values were scrambled at random (None, naive and far datetimes, callables,
other types). No timing.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest
from django.utils import timezone

from scheduler.api import serializers as api
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import do_cancel_workload, do_submit_workload

URL = "/api/v1/workloads/"
FAST = (
    api.WorkloadListSerializer,
    api.WorkloadRowSerializer,
    api.WorkloadDetailSerializer,
    api.WorkloadSubmittedSerializer,
    api.AttemptSerializer,
    api.WorkloadEventSerializer,
)


def _both(cls: type, rows: list[Any], context: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Each row through one serializer instance (a plan made per object) and through a list's
    child (one plan kept for every row), fast and by the oracle; an exception is an answer too (its
    type and text). Returns the first and the oracle; the child's must be the oracle's."""
    serializer = cls(context=context)
    child = cls(many=True, context=context).child
    fast, oracle, listed = [], [], []
    for row in rows:
        for out, call in (
            (fast, serializer.to_representation),
            (oracle, lambda r: api.drf_representation(serializer, r)),
            (listed, child.to_representation),
        ):
            try:
                out.append(call(row))
            except Exception as exc:  # noqa: BLE001 -- the oracle's refusal must be the fast path's
                out.append((type(exc).__name__, str(exc)))
    assert listed == oracle, cls.__name__
    assert "_plan" in child.__dict__ and "_plan" not in serializer.__dict__
    return fast, oracle


@pytest.fixture
def queue(researcher, teammate, submit_kwargs, cluster) -> dict[str, Any]:
    """Running, pending, canceled (an event with an actor) and tick-made events (no actor)."""
    from scheduler.tick import run_tick

    running = do_submit_workload(researcher, **submit_kwargs(gpu_count=2))
    for _ in range(2):
        do_submit_workload(teammate, **submit_kwargs(gpu_count=8))
    do_cancel_workload(researcher, do_submit_workload(researcher, **submit_kwargs()))
    run_tick(running.cluster_id)
    return {"running": running}


def _rows(cls: type) -> list[Any]:
    from scheduler.accounting import account_page
    from scheduler.api.views import WorkloadViewSet

    if cls is api.AttemptSerializer:
        return list(Attempt.objects.select_related("host").prefetch_related("gpu_links__gpu__host"))
    if cls is api.WorkloadEventSerializer:
        return list(WorkloadEvent.objects.select_related("actor").order_by("id"))
    rows = list(
        Workload.objects.select_related("owner", "cluster", "budget").prefetch_related(
            *WorkloadViewSet.detail_prefetches()
        )
    )
    if cls is api.WorkloadRowSerializer:
        for row in rows:
            row.owner_name, row.cluster_name = row.owner.username, row.cluster.name
    account_page(rows)
    return rows


def test_the_planned_representation_is_drf_s_on_every_row_in_any_time_zone(researcher_client, queue):
    view_request = researcher_client.get(URL)
    context = view_request.renderer_context["view"].get_serializer_context()
    assert any(e.actor_id is None for e in WorkloadEvent.objects.all())
    assert any(e.actor_id is not None for e in WorkloadEvent.objects.all())
    for zone in ("UTC", "Asia/Kolkata", "America/St_Johns"):
        with timezone.override(zone), _one_instant():
            for cls in FAST:
                assert issubclass(cls, api.FastRepresentationMixin)
                rows = _rows(cls)
                fast, oracle = _both(cls, rows, context)
                assert rows and fast == oracle, (zone, cls.__name__)
    with timezone.override("Asia/Kolkata"):
        answer = researcher_client.get(f"{URL}{queue['running'].pk}/").json()
    assert answer["submitted_at"].endswith("+05:30") and answer["attempts"][0]["placed_at"].endswith("+05:30")


def _scramble(rng: random.Random, value: Any) -> Any:
    """Another value of some type the plan must hand to DRF, or read as DRF does."""
    far = dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5)))  # overflows east of it
    return rng.choice(
        [
            None,
            value,
            "",
            "text",
            0,
            7,
            True,
            2.5,
            [1, "a"],
            {"k": [1]},
            dt.datetime(2026, 1, 2, 3, 4, 5),  # naive
            dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
            dt.datetime(2026, 6, 1, tzinfo=dt.timezone(dt.timedelta(hours=3, minutes=30))),
            far,
            dt.date(2026, 1, 2),
            lambda: "called",
        ]
    )


def test_rows_with_scrambled_values_answer_as_drf_or_refuse_as_drf(researcher_client, queue):
    view_request = researcher_client.get(URL)
    context = view_request.renderer_context["view"].get_serializer_context()
    rng = random.Random(15)
    for round_ in range(12):
        zone = rng.choice(["UTC", "Asia/Kolkata", "Pacific/Kiritimati"])
        with timezone.override(zone), _one_instant():
            for cls in FAST:
                rows = _rows(cls)
                plain = {f.attname for f in cls.Meta.model._meta.concrete_fields if not f.is_relation}
                plain -= {"id", "state", "env", "mounts", "pending_detail", "submitted_at", "finished_at"}
                for row in rows:
                    for name in rng.sample(sorted(plain), k=min(4, len(plain))):
                        setattr(row, name, _scramble(rng, getattr(row, name)))
                    if cls is api.WorkloadRowSerializer and rng.random() < 0.3:
                        row.owner_name = _scramble(rng, row.owner_name)
                fast, oracle = _both(cls, rows, context)
                assert fast == oracle, (round_, zone, cls.__name__)


def test_a_mapping_and_a_missing_relation_are_read_as_drf_reads_them(researcher_client, queue):
    context = researcher_client.get(URL).renderer_context["view"].get_serializer_context()
    event = WorkloadEvent.objects.filter(actor__isnull=False).first()
    event.actor = None  # ``actor.username`` through None: the field's default
    mapping = {"at": timezone.now(), "kind": "k", "message": "m", "data": {}, "actor": {"username": "x"}}
    fast, oracle = _both(api.WorkloadEventSerializer, [event, mapping], context)
    assert fast == oracle and fast[0]["actor"] is None


class _one_instant:  # noqa: N801 -- a context manager read like a statement
    """Both sides read one ``now`` (a waiting workload's wait_s counts whole seconds up to now)."""

    def __enter__(self) -> None:
        from unittest import mock

        self._patch = mock.patch("django.utils.timezone.now", return_value=timezone.now())
        self._patch.start()

    def __exit__(self, *exc: object) -> None:
        self._patch.stop()


def test_a_detail_reads_no_deferred_column(researcher, researcher_client, submit_kwargs, queue):
    """The detail's prefetches load only some columns of an event's actor and of a waited-for
    workload (``views.detail_prefetches``): reading any other would be a query per row."""
    from unittest import mock

    from django.db.models import Model

    waiting = do_submit_workload(researcher, **submit_kwargs(after=[str(queue["running"].pk)]))
    pks = [w.pk for w in Workload.objects.all()] + [waiting.pk]
    with mock.patch.object(Model, "refresh_from_db", side_effect=AssertionError("a deferred column was read")):
        for pk in pks:
            answer = researcher_client.get(f"{URL}{pk}/")
            assert answer.status_code == 200, answer.content
        assert researcher_client.get(f"{URL}{waiting.pk}/").json()["after"] == [
            {"workload": queue["running"].pk, "condition": "ok", "state": "starting"}
        ]
        cancel = researcher_client.post(f"{URL}{waiting.pk}/cancel/")
        assert cancel.status_code == 200 and [e["actor"] for e in cancel.json()["events"]] == ["researcher"] * 2


@pytest.mark.parametrize(
    "query",
    [
        "",
        "limit=50",
        "offset=10&limit=5",
        "state=pending",
        "state=pending,running",
        "state=runing",
        "owner=me",
        "owner=researcher",
        "budget=nlp",
        "budget=nosuch",
        "cluster=nosuch",
        "group=1",
        "group=x",
        "group=0",
        "state=",
        "other=1",
    ],
)
def test_the_filter_backend_that_skips_unasked_filters_answers_as_django_filter(researcher_client, queue, query):
    from django_filters.rest_framework import DjangoFilterBackend
    from rest_framework.exceptions import ValidationError

    from scheduler.api.filters import SkipUnaskedFilterBackend

    answer = researcher_client.get(f"{URL}?{query}")
    view = answer.renderer_context["view"]
    outcomes = []
    for backend in (SkipUnaskedFilterBackend(), DjangoFilterBackend()):
        try:
            qs = backend.filter_queryset(view.request, view.get_queryset(), view)
            outcomes.append((str(qs.query), [w.pk for w in qs]))
        except ValidationError as exc:
            outcomes.append(("refused", exc.detail))
    assert outcomes[0] == outcomes[1], query
    # The page as django-filter over the annotated rows counted and sliced them (the list counts the
    # plain filtered workloads): the same count and the same rows.
    if answer.status_code == 200:
        params = dict(p.split("=", 1) for p in query.split("&") if p)
        offset, limit = int(params.get("offset", 0)), int(params.get("limit", 10**9))
        rows = DjangoFilterBackend().filter_queryset(view.request, view.get_queryset(), view)
        body = answer.json()
        assert body["count"] == rows.count() and [r["id"] for r in body["results"]] == [
            w.pk for w in rows[offset : offset + limit]
        ], query
    elif answer.json()["code"] == "unknown_parameter":  # refused by the view before any filter (brk31)
        assert query == "other=1" and answer.status_code == 400
    else:
        assert outcomes[0][0] == "refused" and answer.status_code == 400, query
