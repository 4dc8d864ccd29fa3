"""break35: faults found by brk35 (hostile agent frames)."""

from __future__ import annotations

from datetime import timedelta

from agent import protocol
from scheduler import consumers
from scheduler.models import GPU, Workload


def test_a_failed_to_start_report_is_never_dated_before_the_agent_last_said_it_ran(tw, ticks):
    """An agent's ``failed_to_start`` report of an attempt it had confirmed started and listed
    running 5 s ago, with an ``age_s`` of years: the end was stamped ``now − age_s`` (then raised
    to the start), so an allocated attempt that held its GPUs for 295 s was charged nothing, where
    an ``exited`` report of the same age is charged up to the last time it was heard running. A
    failed start is dated as an exit is (``lifecycle.exit_time``: never before the start nor
    before the agent last said it ran)."""
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=300)
    alive = tw.now - timedelta(seconds=5)
    msg = protocol.AttemptEvent(attempt_id=attempt.wire_id, state="failed_to_start", message="x", age_s=1e9)

    assert consumers._attempt_event.func(host, host.link_generation, msg, tw.now, alive)

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.ended_at, attempt.charged_gpu_seconds) == ("failed", alive, 295)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.FAILED
