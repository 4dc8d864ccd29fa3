"""left37: faults found last session (a hello's exit dating, a shrunk GPU inventory)."""

from __future__ import annotations

from datetime import timedelta

from scheduler import lifecycle
from scheduler.models import GPU, Attempt, Host, Workload


def test_an_exit_in_a_hello_is_never_dated_before_the_hosts_last_heartbeat_that_held_it_running(tw, ticks):
    """The agent reconnects and reports, in its hello, the exit of an attempt confirmed started
    300 s ago with an ``age_s`` of years. The old connection's last heartbeat came 5 s ago while
    the attempt was open: an exit before it would have arrived before it. The exit was stamped at
    the start (charged nothing); it is dated at that heartbeat, as the ``lost`` rule charges it."""
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=300)
    last = tw.now - timedelta(seconds=5)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=last)
    gpus = [lifecycle.GpuReport(g.index, g.uuid, g.model) for g in GPU.objects.all()]

    lifecycle.host_hello(
        host,
        agent_version="t",
        gpus=gpus,
        running=[],
        exited=[lifecycle.ExitReport(attempt.pk, 1, 1e9)],
        now=tw.now,
    )

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.ended_at, attempt.charged_gpu_seconds) == ("failed", last, 295)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.FAILED


def test_an_exit_in_a_hello_of_an_attempt_started_after_the_last_heartbeat_keeps_its_own_age(tw, ticks):
    """The floor is only for attempts the server held running at that heartbeat: one confirmed
    started after it (on the new connection's behalf) is dated by its age, never before its start."""
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=30)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=tw.now - timedelta(seconds=60))
    gpus = [lifecycle.GpuReport(g.index, g.uuid, g.model) for g in GPU.objects.all()]

    lifecycle.host_hello(
        host, agent_version="t", gpus=gpus, running=[], exited=[lifecycle.ExitReport(attempt.pk, 0, 10.0)], now=tw.now
    )

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.ended_at) == ("succeeded", tw.now - timedelta(seconds=10))
    assert Attempt.objects.get(pk=attempt.pk).charged_gpu_seconds == 20
