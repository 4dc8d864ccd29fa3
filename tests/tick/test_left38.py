"""left38: a hello whose GPU inventory waits for approval changed the host's CPUs and memory at
once; they wait with the inventory and are applied on approval (docs/deploy.md)."""

from __future__ import annotations

from datetime import timedelta

from scheduler import lifecycle, services
from scheduler.models import GPU, Host
from scheduler.snapshot import load_snapshot


def _sizes(tw) -> list[tuple[int | None, int | None]]:
    """The host's CPUs and memory as the row, the tick's kept hardware and a submission read them."""
    host = Host.objects.get()
    snap, _index = load_snapshot(tw.cluster, tw.now)
    kept = sorted({(c, m) for _model, _n, c, m, *_rest in services._hardware(tw.cluster)})
    return [(host.cpus, host.memory_bytes), *((h.cpus, h.memory) for h in snap.hosts), *kept]


def test_a_held_inventorys_cpus_and_memory_wait_for_its_approval(tw, ticks, pushed):
    host = tw.host("h1", 2, cpus=64, memory_bytes=256 << 30)
    gpu0, gpu1 = GPU.objects.order_by("index")
    assert _sizes(tw) == [(64, 256 << 30)] * 3  # the kept hardware is read before the hello
    more = [lifecycle.GpuReport(g.index, g.uuid, "H100") for g in (gpu0, gpu1)]
    more.append(lifecycle.GpuReport(2, "GPU-new", "H100"))

    lifecycle.host_hello(host, agent_version="t", gpus=more, running=[], cpus=96, memory=384 << 30, now=tw.now)

    held = Host.objects.get()
    assert held.pending_inventory is not None and held.state == Host.State.CORDONED
    assert (held.pending_inventory["cpus"], held.pending_inventory["memory_bytes"]) == (96, 384 << 30)
    assert _sizes(tw) == [(64, 256 << 30)] * 3

    lifecycle.do_approve_host_inventory(None, held)

    assert _sizes(tw) == [(96, 384 << 30)] * 3
    again = lifecycle.host_hello(
        host, agent_version="t", gpus=more, running=[], cpus=96, memory=384 << 30, now=tw.now + timedelta(seconds=5)
    )
    assert again == set() and Host.objects.get().pending_inventory is None


def test_a_hello_that_matches_again_applies_its_own_cpus_and_memory(tw, ticks, pushed):
    """The hold is dropped by a matching hello (no approval): its CPUs and memory apply at once,
    as any matching hello's do; the held ones are dropped with the hold."""
    host = tw.host("h1", 1, cpus=64, memory_bytes=256 << 30)
    (gpu,) = GPU.objects.all()
    other = [lifecycle.GpuReport(0, "GPU-other", "H100")]
    lifecycle.host_hello(host, agent_version="t", gpus=other, running=[], cpus=8, memory=8 << 30, now=tw.now)
    same = [lifecycle.GpuReport(0, gpu.uuid, "H100")]
    lifecycle.host_hello(host, agent_version="t", gpus=same, running=[], cpus=32, memory=128 << 30, now=tw.now)
    assert Host.objects.get().pending_inventory is None
    assert _sizes(tw) == [(32, 128 << 30)] * 3
