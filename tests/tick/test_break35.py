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


def test_a_failed_starts_message_does_not_publish_its_mounts_host_paths(tw, ticks):
    """The process runtime fails a start with "mount data: /srv/nlp/secret-x is not a directory
    on this host" (a docker error names the bind source too): the message went whole into the
    workload's events and the host's cordon event, which everyone reads, though the API shows a
    mount's host path only to those who may read the workload's private parts (``get_mounts``).
    The server writes each of the workload's mount host paths as the mount's name."""
    from scheduler import lifecycle
    from scheduler.models import HostEvent, WorkloadEvent

    host = tw.host("h1", 1)
    secret = "/srv/nlp/secret-x"
    mounts = [{"name": "data", "host_path": secret, "container_path": "/data", "read_only": True}]
    w = tw.workload(gpus=1, mounts=mounts)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)

    said = f"mount data: {secret} is not a directory on this host; {secret}/x"
    assert lifecycle.attempt_failed_to_start(host, attempt.pk, said, now=tw.now)
    w2 = tw.workload(gpus=1, mounts=mounts)
    attempt2 = tw.attempt(w2, list(GPU.objects.all()), started_ago=10)
    assert lifecycle.attempt_exited(host, attempt2.pk, 1, message=f"bind {secret}: denied", now=tw.now)

    texts = [e.message for e in WorkloadEvent.objects.all()] + [e.message for e in HostEvent.objects.all()]
    assert not [t for t in texts if secret in t], texts
    assert any("mount data: <host path of mount data> is not a directory" in t for t in texts), texts


def test_a_batched_exits_message_does_not_publish_its_mounts_host_paths(tw, ticks):
    """The batched write of a burst of exits (``lifecycle.attempts_exited``, start35) hides a
    mount's host path as the one-event path does (brk35's fix, merged beside it)."""
    from scheduler import lifecycle
    from scheduler.models import WorkloadEvent

    host = tw.host("h1", 2)
    secret = "/srv/nlp/secret-y"
    mounts = [{"name": "data", "host_path": secret, "container_path": "/data", "read_only": True}]
    gpus = list(GPU.objects.order_by("pk"))
    attempts = [tw.attempt(tw.workload(gpus=1, mounts=mounts), [gpu], started_ago=10) for gpu in gpus]
    reports = [lifecycle.ExitEvent(host, a.pk, 1, 0.0, f"bind {secret}: denied", tw.now, None) for a in attempts]

    assert lifecycle.attempts_exited(reports) == [True, True]

    texts = [e.message for e in WorkloadEvent.objects.all()]
    assert not [t for t in texts if secret in t], texts
    assert sum("bind <host path of mount data>: denied" in t for t in texts) == 2, texts
