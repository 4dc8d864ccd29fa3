"""A workload's detail reads only the relations its row says it has (issue 15): the attempts and
dependencies of a workload that never started or waits for nothing are known empty from the row's
statement (``WorkloadViewSet.detail_rows``/``fetch_relations``), not read by a query each. The
oracle is the detail read with every prefetch (``prefetch_related(*detail_prefetches())``): the
same answer, byte for byte, for workloads with and without attempts and dependencies, through
``GET`` and ``cancel``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection, reset_queries
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from scheduler.api.serializers import WorkloadDetailSerializer
from scheduler.api.views import RELATIONS, WorkloadViewSet
from scheduler.models import Attempt, Workload, WorkloadDependency, WorkloadEvent
from scheduler.services import do_cancel_workload, do_submit_workload

URL = "/api/v1/workloads/"


@pytest.fixture
def queue(researcher, teammate, submit_kwargs, cluster) -> dict[str, Workload]:
    """Running (attempts), pending after it (a dependency), pending alone (the researcher's and the
    teammate's), canceled after the researcher's one, and a pending one after the canceled one."""
    from scheduler.tick import run_tick

    running = do_submit_workload(researcher, **submit_kwargs(gpu_count=2))
    run_tick(running.cluster_id)
    after_running = do_submit_workload(researcher, **submit_kwargs(after=[running.pk]))
    alone = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    theirs = do_submit_workload(teammate, **submit_kwargs(gpu_count=8))
    canceled = do_submit_workload(researcher, **submit_kwargs(after=[f"{alone.pk}:any"]))
    do_cancel_workload(researcher, canceled)
    after_canceled = do_submit_workload(researcher, **submit_kwargs(after=[f"{canceled.pk}:any"]))
    assert Workload.objects.get(pk=running.pk).attempts.exists()
    return {
        "running": running,
        "after_running": after_running,
        "alone": alone,
        "theirs": theirs,
        "canceled": canceled,
        "after_canceled": after_canceled,
    }


@pytest.fixture
def one_instant(queue, monkeypatch) -> None:
    """The clock stopped once the queue is made: a running attempt's figures follow it, and an
    answer and its oracle read a second apart differed by a digit under a loaded box."""
    from django.utils import timezone

    frozen = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: frozen)


def _oracle(client: Any, pk: int) -> bytes:
    """The detail as every prefetch reads it, rendered with the view's context and renderer."""
    answer = client.get(f"{URL}{pk}/")
    view = answer.renderer_context["view"]
    workload = (
        Workload.objects.select_related("owner", "cluster", "budget")
        .prefetch_related(*WorkloadViewSet.detail_prefetches())
        .get(pk=pk)
    )
    data = WorkloadDetailSerializer(workload, context=view.get_serializer_context()).data
    return JSONRenderer().render(data, renderer_context=answer.renderer_context)


def test_the_detail_is_the_one_every_prefetch_reads(researcher_client, teammate_client, queue, monkeypatch):
    from django.utils import timezone

    frozen = timezone.now()  # a running attempt's figures follow the clock: both reads at one instant
    monkeypatch.setattr(timezone, "now", lambda: frozen)
    for name, workload in queue.items():
        for client in (researcher_client, teammate_client):
            answer = client.get(f"{URL}{workload.pk}/")
            assert answer.status_code == 200
            assert answer.content == _oracle(client, workload.pk), name
    body = json.loads(researcher_client.get(f"{URL}{queue['after_running'].pk}/").content)
    assert body["after"] == [{"workload": queue["running"].pk, "condition": "ok", "state": "starting"}]
    assert json.loads(researcher_client.get(f"{URL}{queue['running'].pk}/").content)["attempts"]


def test_the_row_says_which_relations_hold_rows(queue):
    held = dict(WorkloadViewSet.detail_rows(Workload.objects.all()).values_list("pk", RELATIONS))
    assert held == {
        queue["running"].pk: 1,
        queue["after_running"].pk: 2,
        queue["alone"].pk: 0,
        queue["theirs"].pk: 0,
        queue["canceled"].pk: 2,
        queue["after_canceled"].pk: 2,
    }


def _reads(queries: list[dict[str, Any]], model: type) -> int:
    """How many of ``queries`` read rows of ``model``'s table (a probe inside another is not one)."""
    return sum(q["sql"].startswith(f'SELECT "{model._meta.db_table}".') for q in queries)


def test_a_workload_without_attempts_or_dependencies_costs_two_queries_less(
    researcher_client, queue, django_assert_max_num_queries
):
    """Before: its attempts and its dependencies were read by a query each (both empty)."""
    reset_queries()  # the request's start clears the log: a capture counts from an empty one
    with django_assert_max_num_queries(5) as alone:  # token, workload row, events; tree, memberships (no memo)
        researcher_client.get(f"{URL}{queue['alone'].pk}/")
    assert _reads(alone.captured_queries, Attempt) == _reads(alone.captured_queries, WorkloadDependency) == 0
    assert _reads(alone.captured_queries, WorkloadEvent) == 1
    reset_queries()
    with django_assert_max_num_queries(6) as waiting:
        researcher_client.get(f"{URL}{queue['after_canceled'].pk}/")
    assert (_reads(waiting.captured_queries, Attempt), _reads(waiting.captured_queries, WorkloadDependency)) == (0, 1)
    reset_queries()
    with django_assert_max_num_queries(7) as running:  # its attempts, their GPUs
        researcher_client.get(f"{URL}{queue['running'].pk}/")
    assert (_reads(running.captured_queries, Attempt), _reads(running.captured_queries, WorkloadDependency)) == (1, 0)


def test_cancel_answers_the_detail_every_prefetch_reads(
    researcher_client, teammate_client, queue, submit_kwargs, researcher, one_instant
):
    fresh = do_submit_workload(researcher, **submit_kwargs(after=[queue["running"].pk]))
    for workload, client in (
        (fresh, researcher_client),
        (queue["theirs"], teammate_client),
        (queue["running"], researcher_client),
    ):
        reset_queries()  # the request's start clears the log: a capture counts from an empty one
        with CaptureQueriesContext(connection) as cancel:
            answer = client.post(f"{URL}{workload.pk}/cancel/")
        # Its lookup reads only the id (the cancel reads the row under its lock, then the answer).
        lookup = next(q["sql"] for q in cancel.captured_queries if q["sql"].startswith('SELECT "scheduler_workload"'))
        assert lookup.startswith('SELECT "scheduler_workload"."id" FROM "scheduler_workload" WHERE'), lookup
        assert answer.status_code in (200, 202), answer.content
        assert answer.content == _oracle(client, workload.pk)
