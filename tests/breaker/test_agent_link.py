"""Adversarial agents: a host speaking of another host's GPUs, malformed inventories, text the
database cannot store; and a cancel racing a tick."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator

from agent import protocol
from config.asgi import application
from scheduler import lifecycle, tick
from scheduler.models import GPU, Attempt, Cluster, Host, Workload, WorkloadEvent
from scheduler.services import do_cancel_workload, do_register_host, do_submit_workload


def _reports(host: str, n: int = 8, model: str = "A100") -> list[lifecycle.GpuReport]:
    return [lifecycle.GpuReport(i, f"GPU-{host}-{i}", model, 81920) for i in range(n)]


def test_a_host_cannot_take_over_a_gpu_of_another_live_host(hosts):
    """DESIGN.md §7: a host may only speak of its own GPUs. a100-2's hello naming a100-1's GPU 0
    as its own index 8 moved the device to a100-2 (a100-1 silently lost a GPU)."""
    a1, a2 = hosts["a100-1"], hosts["a100-2"]
    reports = [*_reports("a100-2"), lifecycle.GpuReport(8, "GPU-a100-1-0", "A100", 81920)]

    lifecycle.host_hello(a2, agent_version="evil", gpus=reports, running=[])

    gpu = GPU.objects.get(uuid="GPU-a100-1-0")
    assert (gpu.host_id, gpu.index) == (a1.pk, 0)
    assert GPU.objects.filter(host=a1).count() == 8
    assert GPU.objects.filter(host=a2).count() == 8


def test_a_gpu_of_a_removed_host_may_still_move(hosts):
    a1, a2 = hosts["a100-1"], hosts["a100-2"]
    Host.objects.filter(pk=a1.pk).update(removed_at="2026-01-01T00:00:00Z")
    reports = [*_reports("a100-2"), lifecycle.GpuReport(8, "GPU-a100-1-0", "A100", 81920)]

    lifecycle.host_hello(a2, agent_version="x", gpus=reports, running=[])
    # a hello never changes the registered inventory (issue 14, finding 6): an admin approves it
    assert GPU.objects.get(uuid="GPU-a100-1-0").host_id == a1.pk
    lifecycle.do_approve_host_inventory(None, a2)

    assert GPU.objects.get(uuid="GPU-a100-1-0").host_id == a2.pk


def _place_and_start(researcher, submit_kwargs) -> Attempt:
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    tick.run_tick(workload.cluster_id)
    attempt = Attempt.objects.get(workload=workload)
    assert lifecycle.attempt_started(attempt.host, attempt.pk)
    return attempt


def test_an_exit_message_with_nul_is_recorded(hosts, researcher, submit_kwargs):
    """PostgreSQL text holds no NUL: the exit's transaction failed, the attempt stayed open, and
    the agent's re-sent exit in every later hello failed the hello too (the host never got a
    welcome again)."""
    attempt = _place_and_start(researcher, submit_kwargs)

    assert lifecycle.attempt_exited(attempt.host, attempt.pk, 3, message="boom\x00tail")

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code) == ("failed", 3)
    event = WorkloadEvent.objects.filter(workload_id=attempt.workload_id).latest("id")
    assert "\x00" not in event.message and "boom" in event.message


def test_a_hello_with_nul_in_the_agent_version_is_welcomed(hosts):
    host = hosts["a100-1"]
    lifecycle.host_hello(host, agent_version="1.0\x00evil", gpus=_reports("a100-1"), running=[])
    host.refresh_from_db()
    assert "\x00" not in host.agent_version and host.last_heartbeat is not None


def test_a_cancel_committed_during_a_tick_keeps_no_pending_reason(hosts, researcher, submit_kwargs, monkeypatch):
    """The tick wrote pending reasons with an unconditional bulk update: a workload canceled
    between the snapshot and the apply ended ``canceled`` with reason ``insufficient_gpus``."""
    for _ in range(2):
        do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    victim = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    real_schedule = tick.schedule

    def schedule_then_cancel(snapshot):
        decisions = real_schedule(snapshot)
        do_cancel_workload(researcher, Workload.objects.get(pk=victim.pk))
        return decisions

    monkeypatch.setattr(tick, "schedule", schedule_then_cancel)
    tick.run_tick(victim.cluster_id)

    victim.refresh_from_db()
    assert victim.state == Workload.State.CANCELED
    assert (victim.pending_reason, victim.pending_detail) == ("", {})


# --- over the websocket -------------------------------------------------------------------


def _hello(gpus: list[dict]) -> str:
    return json.dumps(
        {"v": 1, "type": "hello", "id": 1, "host": "h1", "agent_version": "t", "gpus": gpus, "attempts": []}
    )


def _gpu(index: int, uuid: str, model: str = "H100") -> dict:
    return {"index": index, "uuid": uuid, "model": model, "memory_mb": 80000, "health": "healthy"}


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("gpus", "words"),
    [
        ([_gpu(0, "GPU-a"), _gpu(1, "GPU-b"), _gpu(2, "GPU-x"), _gpu(2, "GPU-y")], "index 2"),
        ([_gpu(0, "GPU-a"), _gpu(1, "GPU-b"), _gpu(2, "GPU-b")], "GPU-b"),
        ([_gpu(0, "GPU-a"), _gpu(1, "GPU-b"), _gpu(2, "U" * 200)], "uuid"),
    ],
)
def test_a_malformed_gpu_inventory_gets_a_clear_error_and_the_connection_survives(gpus, words):
    """A hello listing one index twice hit the (host, index) constraint: the agent got
    ``internal`` and no hint; a 200-character UUID did the same on PostgreSQL."""
    cluster = Cluster.objects.create(name="gw")
    host, token = do_register_host(cluster, "h1", [(0, "GPU-a", "H100", 80000), (1, "GPU-b", "H100", 80000)])
    asyncio.run(_malformed_inventory(token, gpus, words))
    assert sorted(GPU.objects.filter(host=host).values_list("index", "uuid")) == [(0, "GPU-a"), (1, "GPU-b")]


async def _malformed_inventory(token: str, gpus: list[dict], words: str) -> None:
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])
    assert (await comm.connect())[0]
    await comm.send_to(text_data=_hello(gpus))
    err = protocol.decode(await comm.receive_from(timeout=5), allowed=protocol.SERVER_MESSAGE_TYPES)
    assert isinstance(err, protocol.Error) and err.code == protocol.ERR_INVALID, err
    assert words in err.message and err.ref == 1

    await comm.send_to(text_data=_hello([_gpu(0, "GPU-a"), _gpu(1, "GPU-b")]))
    welcome = protocol.decode(await comm.receive_from(timeout=5), allowed=protocol.SERVER_MESSAGE_TYPES)
    assert isinstance(welcome, protocol.Welcome)
    await comm.disconnect()


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_brk61_each_connection_of_a_host_numbers_its_messages_apart() -> None:
    """brk61: every connection numbered its messages from 1, so an agent older than brk61 that
    answered a command of its previous connection on the next one (a one-shot exec runs up to
    600 s) named, by its old id, the request there that had the same id: another person's exec
    or session got its output and exit. A connection's ids now start past every id of the
    host's connections before it (its link generation)."""
    cluster = Cluster.objects.create(name="gw")
    _host, token = do_register_host(cluster, "h1", [(0, "GPU-a", "H100", 80000)])

    async def welcome_ids() -> tuple[int, int]:
        return await welcome_id(), await welcome_id()

    async def welcome_id() -> int:
        headers = [(b"authorization", f"Bearer {token}".encode())]
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=_hello([_gpu(0, "GPU-a")]))
        welcome = protocol.decode(await comm.receive_from(timeout=5), allowed=protocol.SERVER_MESSAGE_TYPES)
        assert isinstance(welcome, protocol.Welcome)
        await comm.disconnect()
        return welcome.id

    first, second = asyncio.run(welcome_ids())
    assert second - first >= 1 << 32
