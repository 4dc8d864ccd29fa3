"""brk39: heartbeats of a host whose agent reconnected with another GPU inventory (held for an
admin's approval) were written by index onto the registered GPUs, which the agent numbers
otherwise: a fault of one card marked another, whose attempt the tick then stopped."""

from __future__ import annotations

from django.utils import timezone

from scheduler import lifecycle
from scheduler.gpu_report import stamped
from scheduler.models import GPU, Host


def _held_without_gpu_1(host: Host) -> dict[int, GPU]:
    """The agent reconnects without registered GPU 1 (fallen off the bus): it numbers the others
    0, 1, 2, so its GPU 1 is registered GPU 2 and its GPU 2 registered GPU 3."""
    registered = {g.index: g for g in GPU.objects.filter(host=host)}
    reports = [
        lifecycle.GpuReport(i, registered[r].uuid, registered[r].model, registered[r].memory_mb)
        for i, r in enumerate((0, 2, 3))
    ]
    lifecycle.host_hello(host, agent_version="t", gpus=reports, running=[])
    assert host.pending_inventory is not None  # held, and said so to the connection
    return registered


def _health(host: Host) -> dict[int, str]:
    return dict(GPU.objects.filter(host=host).values_list("index", "health"))


def test_a_fault_reported_while_the_inventory_is_held_marks_the_card_that_has_it(hosts) -> None:
    host = hosts["h100-1"]
    _held_without_gpu_1(host)
    fault = lifecycle.GpuSample(index=2, health="unhealthy", sample={"utilization_pct": 0.0})

    now = timezone.now()
    lifecycle.record_heartbeat(Host.objects.get(pk=host.pk), [fault], now=now)

    assert _health(host) == {0: "healthy", 1: "healthy", 2: "healthy", 3: "unhealthy"}
    assert GPU.objects.get(host=host, index=3).last_sample == stamped({"utilization_pct": 0.0}, now)


def test_the_batched_heartbeats_of_a_held_host_are_mapped_too(hosts) -> None:
    """The bulk path reads GPUs by index: a held host's heartbeat goes the per-host way, even one
    whose samples match the registered GPUs of the same indices (registered GPU 2 healthy, the
    agent's GPU 2, registered GPU 3, healthy again)."""
    host = hosts["h100-1"]
    GPU.objects.filter(host=host, index=3).update(health="unhealthy")
    _held_without_gpu_1(host)
    healed = lifecycle.GpuSample(index=2, health="healthy", sample={"utilization_pct": 50.0})

    lifecycle.record_heartbeats([lifecycle.HeartbeatReport(host.pk, timezone.now(), [healed], inventory_held=True)])

    assert _health(host) == {0: "healthy", 1: "healthy", 2: "healthy", 3: "healthy"}
    assert GPU.objects.get(host=host, index=2).last_sample != {"utilization_pct": 50.0}


def test_once_approved_the_agents_indices_are_the_registered_ones(hosts) -> None:
    host = hosts["h100-1"]
    registered = _held_without_gpu_1(host)
    lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))
    fault = lifecycle.GpuSample(index=2, health="unhealthy")

    lifecycle.record_heartbeats([lifecycle.HeartbeatReport(host.pk, timezone.now(), [fault], inventory_held=True)])

    assert GPU.objects.get(uuid=registered[3].uuid).health == "unhealthy"
    assert GPU.objects.get(uuid=registered[2].uuid).health == "healthy"


def test_an_approved_inventory_shifted_by_a_lost_gpu_is_registered_as_reported(hosts) -> None:
    """A GPU fell off the bus and the agent numbered the ones after it one lower. Approving that
    inventory left registered GPU 2 with a placeholder UUID (``~moving-…``, out of placement) and
    removed the row of the last GPU, still in the host: the next hello was held again, for good."""
    host = hosts["h100-1"]
    registered = _held_without_gpu_1(host)
    lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))

    live = GPU.objects.registered().filter(host=host).order_by("index")
    assert [(g.index, g.uuid) for g in live] == [(i, registered[r].uuid) for i, r in enumerate((0, 2, 3))]
    again = Host.objects.get(pk=host.pk)
    reports = [lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb) for g in live]
    lifecycle.host_hello(again, agent_version="t", gpus=reports, running=[])
    assert again.pending_inventory is None and Host.objects.get(pk=host.pk).state == Host.State.ACTIVE
