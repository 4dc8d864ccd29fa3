"""Break session 36: a gang's part that exits first releases its own GPUs, not the other parts'.

The first part's exit ended the whole attempt: every host's GPUs were released while the other
parts still ran (the stop's grace: 30 s by default), and the tick placed new work on GPUs a process
of the gang still held. Now the attempt ends when its last part reports; it ends as its first part
to exit on its own did, with that part's exit code, charged as one attempt to the last release."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import lifecycle
from scheduler.api.serializers import STOP_ENDS_AS
from scheduler.models import GPU, Attempt, AttemptGPU, Workload, WorkloadEvent


@pytest.fixture
def gang(tw, pushed, ticks):
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=100)
    return tw, h1, h2, w, attempt


def _open_hosts(attempt: Attempt) -> set[str]:
    return set(AttemptGPU.objects.filter(attempt=attempt, open=True).values_list("gpu__host__name", flat=True))


def test_the_first_part_to_exit_releases_only_its_own_gpus(gang):
    tw, h1, h2, w, attempt = gang
    # When the part on h1 exits 0 while the part on h2 still runs
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, now=tw.now)
    # Then the attempt stays open and h2's GPUs stay held until that part releases them
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h2"}
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("succeeded", tw.now)  # the others are stopped
    assert Workload.objects.get(pk=w.pk).state == Workload.State.RUNNING
    assert STOP_ENDS_AS[attempt.stop_reason] == Workload.State.SUCCEEDED  # what the API's ``stop.ends_as`` says
    event = WorkloadEvent.objects.get(workload=w, kind="part_exited")
    assert "part on h1 exited (exit 0)" in event.message

    # When the part on h2 then ends on the stop's SIGTERM
    later = tw.now + timedelta(seconds=5)
    assert lifecycle.attempt_exited(h2, attempt.pk, 143, now=later)
    # Then the gang ends as its first part did, charged as one attempt to the last release
    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code, attempt.ended_at) == ("succeeded", 0, later)
    assert attempt.charged_gpu_seconds == 4 * 105
    assert _open_hosts(attempt) == set()
    assert Workload.objects.get(pk=w.pk).state == Workload.State.SUCCEEDED


def test_a_part_that_fails_first_fails_the_gang_with_its_code(gang):
    tw, h1, h2, w, attempt = gang
    assert lifecycle.attempt_exited(h2, attempt.pk, 3, now=tw.now)
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, now=tw.now + timedelta(seconds=1))
    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code) == ("failed", 3)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.FAILED


def test_a_stop_issued_before_the_parts_exit_keeps_its_reason(gang):
    tw, h1, h2, w, attempt = gang
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=tw.now, stop_reason="preempted")
    assert lifecycle.attempt_exited(h1, attempt.pk, 143, now=tw.now + timedelta(seconds=1))
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h2"} and attempt.stop_reason == "preempted"
    assert not WorkloadEvent.objects.filter(workload=w, kind="part_exited").exists()
    assert lifecycle.attempt_exited(h2, attempt.pk, 143, now=tw.now + timedelta(seconds=2))
    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code) == ("preempted", 143)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING  # requeued


def test_the_batched_exits_release_a_part_as_one_report_does(gang):
    tw, h1, h2, w, attempt = gang
    other = tw.workload(gpus=1, min_runtime=0)
    tw.host("h3", 1)
    single = tw.attempt(other, [GPU.objects.get(host__name="h3")], started_ago=10)
    reports = [
        lifecycle.ExitEvent(h1, attempt.pk, 0, 0.0, "", tw.now, None),
        lifecycle.ExitEvent(GPU.objects.get(host__name="h3").host, single.pk, 0, 0.0, "", tw.now, None),
    ]
    assert lifecycle.attempts_exited(reports) == [False, True]
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h2"} and attempt.stop_reason == "succeeded"
    assert Attempt.objects.get(pk=single.pk).end_reason == "succeeded"


def test_a_part_that_fails_to_start_releases_only_its_own_gpus(tw, pushed, ticks):
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=None)  # starting
    # When h2's part cannot start (its image pull failed) while h1's starts
    assert lifecycle.attempt_failed_to_start(h2, attempt.pk, "pull failed", now=tw.now)
    # Then only h2's GPUs are released and h1's part is stopped
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h1"} and attempt.stop_reason == "failed_to_start"
    assert (
        "part on h2 failed to start (pull failed)" in WorkloadEvent.objects.get(workload=w, kind="part_exited").message
    )
    # When h1's part, stopped, reports its exit, the gang ends as a failed start: requeued
    assert lifecycle.attempt_exited(h1, attempt.pk, 143, now=tw.now + timedelta(seconds=2))
    attempt.refresh_from_db()
    assert attempt.end_reason == "failed_to_start" and _open_hosts(attempt) == set()
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING


def test_a_part_its_host_does_not_run_releases_only_its_own_gpus(gang):
    tw, h1, h2, w, attempt = gang
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=tw.now, stop_reason="preempted")
    # When h2's agent answers the stop with "stopped" (it does not run the attempt) while h1's part ends
    assert lifecycle.attempt_stopped_unknown(h2, attempt.pk, now=tw.now + timedelta(seconds=1))
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h1"}
    assert lifecycle.attempt_exited(h1, attempt.pk, 143, now=tw.now + timedelta(seconds=3))
    attempt.refresh_from_db()
    assert attempt.end_reason == "preempted" and Workload.objects.get(pk=w.pk).state == Workload.State.PENDING


def test_a_part_gone_when_its_agent_reconnects_releases_only_its_own_gpus(gang):
    tw, h1, h2, w, attempt = gang
    gpus = [lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb, "healthy") for g in h2.gpus.order_by("index")]
    # When h2's agent reconnects without its part (while h1's still runs)
    lifecycle.host_hello(h2, agent_version="t", gpus=gpus, running=[], now=tw.now)
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h1"} and attempt.stop_reason == "lost"
    # When h1's part, stopped, reports its exit, the gang ends lost: requeued
    assert lifecycle.attempt_exited(h1, attempt.pk, 143, now=tw.now + timedelta(seconds=2))
    attempt.refresh_from_db()
    assert attempt.end_reason == "lost" and Workload.objects.get(pk=w.pk).state == Workload.State.PENDING
