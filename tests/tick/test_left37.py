"""left37: faults found last session (a hello's exit dating, a shrunk GPU inventory)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

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


def _hello(host: Host, gpus: list[lifecycle.GpuReport], now: datetime) -> Host:
    lifecycle.host_hello(host, agent_version="t", gpus=gpus, running=[], now=now)
    return Host.objects.get(pk=host.pk)


def test_an_approved_inventory_without_a_gpu_takes_it_out_of_the_host_and_keeps_its_history(tw, ticks, pushed):
    """The agent reports one GPU fewer (a card pulled); the admin approves. The missing GPU stayed
    registered as unhealthy: counted in the cluster's GPUs (every entitlement, the pyramid's
    registered time, the size check of submissions) and the agent's next hello, the approved
    inventory, no longer matched it. As Slurm drops a removed gres from the node and Kueue the
    capacity from the node, it leaves the host's inventory; the attempts that ran on it still
    name it (docs/resources.md, "A GPU the agent no longer reports")."""
    from django.utils import timezone

    from scheduler import pyramid, services
    from scheduler.snapshot import load_snapshot

    host = tw.host("h1", 2)
    gpu0, gpu1 = GPU.objects.order_by("index")
    old = tw.attempt(tw.workload(gpus=1, min_runtime=60), [gpu1], started_ago=600)
    lifecycle.attempt_exited(host, old.pk, 0, 300.0, now=tw.now)
    reported = [lifecycle.GpuReport(0, gpu0.uuid, "H100")]
    assert _hello(host, reported, tw.now).pending_inventory is not None

    lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))

    snap, _index = load_snapshot(tw.cluster, tw.now)
    assert [sorted(h.gpu_health) for h in snap.hosts] == [[0]]
    assert sum(n for _m, n, *_r in services.read_hardware(tw.cluster)) == 1
    assert list(Host.objects.get(pk=host.pk).gpus.registered().values_list("index", flat=True)) == [0]
    next_hour = pyramid.hour_of(timezone.now()) + timedelta(hours=1)
    assert pyramid.compute_hour(tw.cluster, next_hour, now=next_hour + timedelta(hours=2))["registered"] == 3600
    # the approved inventory is the registered one: the next hello matches, nothing is held
    again = _hello(host, reported, tw.now + timedelta(seconds=5))
    assert (again.pending_inventory, again.state) == (None, Host.State.ACTIVE)
    # history intact: the attempt that ran on GPU 1 still names it
    assert Attempt.objects.get(pk=old.pk).host_names() == ["h1"]
    assert list(Attempt.objects.get(pk=old.pk).gpu_links.values_list("gpu__index", flat=True)) == [1]
    # the card comes back at its index: the same row returns to the inventory
    both = [*reported, lifecycle.GpuReport(1, gpu1.uuid, "H100")]
    assert _hello(host, both, tw.now + timedelta(seconds=10)).pending_inventory is not None
    lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))
    assert list(Host.objects.get(pk=host.pk).gpus.registered().values_list("pk", flat=True)) == [gpu0.pk, gpu1.pk]


def test_an_inventory_without_a_gpu_that_an_attempt_holds_is_not_approved(tw, ticks, pushed):
    """As a host is removed only once no attempt holds it (``host_busy``): a GPU still held by an
    open attempt leaves the inventory once that attempt has left (drain the host first)."""
    from config.errors import ServiceError

    host = tw.host("h1", 2)
    gpu0, gpu1 = GPU.objects.order_by("index")
    attempt = tw.attempt(tw.workload(gpus=1, min_runtime=60), [gpu1], started_ago=60)
    reported = [lifecycle.GpuReport(0, gpu0.uuid, "H100")]
    lifecycle.host_hello(host, agent_version="t", gpus=reported, running=[attempt.pk], now=tw.now)

    with pytest.raises(ServiceError) as refused:
        lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))

    assert (refused.value.code, refused.value.status) == ("gpu_busy", 409)
    assert Host.objects.get(pk=host.pk).pending_inventory is not None
    assert list(Host.objects.get(pk=host.pk).gpus.registered().values_list("index", flat=True)) == [0, 1]
