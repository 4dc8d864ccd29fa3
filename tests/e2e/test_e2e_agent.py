"""End to end: REST submission → tick → websocket → real agent → real processes → exit → charge.

Each test runs the whole stack (see conftest.py) with one agent of 2 simulated
H100s and is bounded by a pytest timeout; waits poll the database.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import UsageEntry
from scheduler.lifecycle import charged_seconds
from scheduler.models import Attempt, Workload

pytestmark = [pytest.mark.timeout(60)]


def _workload(pk: int) -> Workload:
    return Workload.objects.get(pk=pk)


def test_submitted_workloads_run_on_the_agent_and_are_charged(stack):
    # Given an allocated 1-GPU and an allocated 2-GPU workload submitted through the API
    one = stack.submit("org/alpha", gpus=1, min_runtime=60, duration=2)
    two = stack.submit("org/beta", gpus=2, min_runtime=60, duration=2)

    # When the stack runs them (one after the other: the host has 2 GPUs)
    stack.wait_until(
        lambda: all(_workload(pk).state == Workload.State.SUCCEEDED for pk in (one, two)),
        45,
        "both workloads to succeed",
    )

    # Then each ran once as a real process, exited 0, and was charged GPUs × seconds
    for pk, gpus in ((one, 1), (two, 2)):
        (attempt,) = Attempt.objects.filter(workload_id=pk)
        assert (attempt.end_reason, attempt.exit_code, attempt.allocated) == ("succeeded", 0, True)
        assert attempt.started_at is not None and attempt.ended_at is not None
        seconds = (attempt.ended_at - attempt.started_at).total_seconds()
        assert 1.5 <= seconds <= 6, seconds
        assert attempt.charged_gpu_seconds == gpus * charged_seconds(attempt.started_at, attempt.ended_at)
        assert gpus * 1 <= attempt.charged_gpu_seconds <= gpus * 6
        log = stack.attempt_log(attempt.pk)
        assert "standin: done" in log, log
        assert f"CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(gpus))}" in log or gpus == 1


def test_unallocated_work_is_preempted_by_allocated_work_of_another_budget(stack):
    # Given an unallocated workload of alpha holding both GPUs
    free = stack.submit("org/alpha", gpus=2, min_runtime=0, duration=120, name="free-rider")
    first = stack.wait_until(
        lambda: Attempt.objects.filter(workload_id=free, started_at__isnull=False).first(),
        20,
        "the unallocated workload to start",
    )
    stack.wait_standin_running(first.pk)

    # When beta submits allocated work that needs those GPUs
    funded = stack.submit("org/beta", gpus=2, min_runtime=30, duration=2, name="funded")

    # Then the unallocated attempt is stopped by SIGTERM on the agent and requeued, uncharged
    stack.wait_until(lambda: Attempt.objects.get(pk=first.pk).ended_at, 20, "the unallocated attempt to end")
    first.refresh_from_db()
    assert (first.end_reason, first.exit_code, first.charged_gpu_seconds) == ("preempted", 143, 0)
    assert "SIGTERM received" in stack.attempt_log(first.pk)
    # and the allocated workload runs to completion
    stack.wait_until(lambda: _workload(funded).state == Workload.State.SUCCEEDED, 20, "the funded workload to succeed")
    (attempt,) = Attempt.objects.filter(workload_id=funded)
    assert attempt.allocated and attempt.exit_code == 0 and attempt.charged_gpu_seconds >= 2
    # and the preempted workload kept its place: same submission time, back in the queue or running again
    w = _workload(free)
    assert w.state in (Workload.State.PENDING, Workload.State.STARTING, Workload.State.RUNNING)
    assert w.submitted_at == first.workload.submitted_at


def test_a_protected_attempt_keeps_running_while_a_more_deserving_budget_waits(stack):
    # Given alpha, which used 2 GPU-hours this week, running allocated work inside its minimum runtime
    now = timezone.now()
    UsageEntry.objects.create(
        budget=stack.alpha, cluster=stack.cluster, start=now - timedelta(hours=2), end=now - timedelta(hours=1), gpus=2
    )
    busy = stack.submit("org/alpha", gpus=2, min_runtime=600, duration=120, name="protected")
    running = stack.wait_until(
        lambda: Attempt.objects.filter(workload_id=busy, started_at__isnull=False).first(), 20, "alpha's start"
    )

    # When beta (nothing used: more deserving) submits work that needs the same GPUs
    waiting = stack.submit("org/beta", gpus=2, min_runtime=60, duration=2, name="deserving")
    stack.wait_until(lambda: _workload(waiting).pending_reason == "protected_work", 15, "beta's pending reason")
    deadline = timezone.now() + timedelta(seconds=3)  # several ticks and heartbeats
    while timezone.now() < deadline:
        running.refresh_from_db()
        assert running.stop_requested_at is None and running.ended_at is None
        assert _workload(waiting).state == Workload.State.PENDING

    # Then the protected attempt is still running and was never asked to stop
    running.refresh_from_db()
    assert (running.stop_requested_at, running.ended_at) == (None, None)
    assert _workload(busy).state == Workload.State.RUNNING
    assert "standin: running" in stack.attempt_log(running.pk)
