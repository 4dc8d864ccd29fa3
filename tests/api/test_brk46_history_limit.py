"""brk46: ``GET workloads/history/?limit=N`` read every attempt finished since ``since`` (up to 400
days of a cluster's) into the web process, however small ``N``: the cap bounded the answer, not
the read. Any user could make each request load the whole history."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db.models.signals import post_init
from django.utils import timezone

from scheduler import lifecycle
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick

MANY = 300


def _finished_attempts(researcher, cluster, submit_kwargs) -> None:
    """One attempt run through the lifecycle, then ``MANY`` more of its workload ended before it."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(cluster.pk)
    first = Attempt.objects.select_related("host").get(workload=w)
    now = timezone.now()
    lifecycle.attempt_started(first.host, first.pk, now=now - timedelta(hours=2))
    lifecycle.attempt_exited(first.host, first.pk, 0, now=now - timedelta(hours=1))
    first.refresh_from_db()
    Attempt.objects.bulk_create(
        Attempt(
            workload=w,
            number=first.number + i,
            host=first.host,
            allocated=True,
            placed_at=first.placed_at - timedelta(minutes=i),
            started_at=first.started_at - timedelta(minutes=i),
            ended_at=first.ended_at - timedelta(minutes=i),
            end_reason="preempted",
        )
        for i in range(1, MANY + 1)
    )


def test_a_history_limit_reads_only_the_rows_it_answers(researcher, cluster, submit_kwargs, researcher_client):
    _finished_attempts(researcher, cluster, submit_kwargs)
    made: list[int] = []

    def count(sender, instance, **kwargs) -> None:  # noqa: ANN001 -- a signal receiver
        made.append(1)

    post_init.connect(count, sender=Attempt)
    try:
        began = time.monotonic()
        answer = researcher_client.get("/api/v1/workloads/history/", {"since": "1d", "limit": 2})
        took = time.monotonic() - began
    finally:
        post_init.disconnect(count, sender=Attempt)
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["count"] == MANY + 1  # the count still says how many finished in the range
    assert [row["attempt"] for row in body["results"]] == [1, 2]  # newest first
    assert len(made) <= 2, f"{len(made)} attempts read for 2 rows ({took:.2f} s)"
