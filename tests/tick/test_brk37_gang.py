"""Break session 37: a lost host (silent past HOST_LOST_AFTER_S) ends its own part of a gang only.

The sweep ended the whole gang at once: the live hosts' GPUs were released while their parts still
ran (the stop's grace, or until the agent heard the server no longer wants them), and the tick could
place new work on GPUs a process of the gang still held: the fault brk36 fixed for a part's exit."""

from __future__ import annotations

from datetime import timedelta

from scheduler import lifecycle
from scheduler.models import GPU, Attempt, AttemptGPU, Host, Workload, WorkloadEvent
from scheduler.services import do_cancel_workload


def _open_hosts(attempt: Attempt) -> set[str]:
    return set(AttemptGPU.objects.filter(attempt=attempt, open=True).values_list("gpu__host__name", flat=True))


def test_a_lost_host_ends_only_its_own_part_of_a_gang(tw, pushed, ticks):
    # Given a gang on h1 and h2, and h2's agent silent past HOST_LOST_AFTER_S (h1's still reports)
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=1000)
    silent_since = tw.now - timedelta(seconds=400)
    Host.objects.filter(pk=h2.pk).update(state=Host.State.OFFLINE, last_heartbeat=silent_since)
    # When the sweep runs
    assert lifecycle.sweep_hosts(now=tw.now)["lost"] == 1
    # Then h2's GPUs are released, h1's stay held by its running part, which is stopped "lost"
    attempt.refresh_from_db()
    assert attempt.ended_at is None and _open_hosts(attempt) == {"h1"}
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("lost", silent_since)
    assert "part on h2 is lost" in WorkloadEvent.objects.get(workload=w, kind="part_exited").message
    assert lifecycle.sweep_hosts(now=tw.now)["lost"] == 0  # safe to run twice
    # When h1's part reports its exit on the stop, the gang ends lost and is requeued
    later = tw.now + timedelta(seconds=2)
    assert lifecycle.attempt_exited(h1, attempt.pk, 143, now=later)
    attempt.refresh_from_db()
    assert attempt.end_reason == "lost" and _open_hosts(attempt) == set()
    # charged, as any lost attempt, to the lost host's last heartbeat (DESIGN.md §4)
    assert (attempt.ended_at, attempt.charged_gpu_seconds) == (silent_since, 4 * 600)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING


def test_a_lost_host_holding_the_last_part_ends_the_gang_at_its_last_heartbeat(tw, pushed, ticks):
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=1000)
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, now=tw.now - timedelta(seconds=500))
    silent_since = tw.now - timedelta(seconds=400)
    Host.objects.filter(pk=h2.pk).update(state=Host.State.OFFLINE, last_heartbeat=silent_since)
    assert lifecycle.sweep_hosts(now=tw.now)["lost"] == 1
    attempt.refresh_from_db()
    # the stop issued by h1's own exit stands (DESIGN.md §4); the gang ends at h2's last heartbeat
    assert (attempt.end_reason, attempt.ended_at) == ("succeeded", silent_since)
    assert _open_hosts(attempt) == set()


def test_a_cancel_after_a_parts_own_exit_keeps_the_gangs_outcome(tw, pushed, ticks):
    # Given a gang whose part on h1 exited 0 (the others stopped: the gang ends succeeded)
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=100)
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, now=tw.now)
    # When its owner cancels it while h2's part runs its grace period
    do_cancel_workload(tw.user, Workload.objects.get(pk=w.pk))
    assert lifecycle.attempt_exited(h2, attempt.pk, 143, now=tw.now + timedelta(seconds=2))
    # Then it ends as its part did (the cancel relabelled it canceled)
    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code) == ("succeeded", 0)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.SUCCEEDED


def test_a_cancel_after_a_parts_failure_with_retries_left_ends_the_gang(tw, pushed, ticks):
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600, retries=2)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=100)
    assert lifecycle.attempt_exited(h1, attempt.pk, 3, now=tw.now)  # would be retried
    do_cancel_workload(tw.user, Workload.objects.get(pk=w.pk))
    assert lifecycle.attempt_exited(h2, attempt.pk, 143, now=tw.now + timedelta(seconds=2))
    assert Attempt.objects.get(pk=attempt.pk).end_reason == "canceled"
    assert Workload.objects.get(pk=w.pk).state == Workload.State.CANCELED


def test_a_part_that_exited_before_a_preemption_stop_decides_the_gang(tw, pushed, ticks):
    # Given a gang whose part on h1 exited 0 ten seconds ago, its report still on the way
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=100)
    # When the tick preempts the gang first (five seconds ago), then the exit arrives dated before it
    stop_at = tw.now - timedelta(seconds=5)
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=stop_at, stop_reason="preempted")
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, age_s=10, now=tw.now)
    attempt.refresh_from_db()
    # Then the part's own exit, before any stop, decides (as a single attempt's does: DESIGN.md §4)
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("succeeded", tw.now - timedelta(seconds=10))
    assert lifecycle.attempt_exited(h2, attempt.pk, 143, now=tw.now + timedelta(seconds=1))
    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code) == ("succeeded", 0)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.SUCCEEDED  # not requeued


def test_the_earliest_part_exit_decides_whatever_order_the_reports_arrive(tw, pushed, ticks):
    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=100)
    assert lifecycle.attempt_exited(h2, attempt.pk, 3, now=tw.now)  # h2 failed just now
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, age_s=20, now=tw.now + timedelta(seconds=1))  # h1 before
    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code) == ("succeeded", 0)
