"""nvml56 end to end: a simulated GPU whose utilization cannot be read (``inject-fault
--no-utilization``, as NVML on a MIG-mode GPU) → its heartbeat over the agent websocket → stored
as not read → efficiency and idle say not measured; its neighbour's readings stay."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from agent import protocol
from agent.__main__ import main as agent_main
from agent.gpu.fake import FakeGpuBackend
from config.asgi import application
from scheduler import idle
from scheduler.efficiency import efficiency_of_attempts
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, GpuMinuteSample, Host, Workload

pytestmark = [pytest.mark.timeout(30), pytest.mark.django_db(transaction=True)]


def _place(host: Host) -> Attempt:
    from accounts.models import User
    from budgets.models import Budget

    w = Workload.objects.create(
        name="w",
        owner=User.objects.create_user("mig-user"),
        budget=Budget.objects.create(name="mig-budget"),
        cluster=host.cluster,
        gpu_model="H100",
        gpu_count=1,
        command=["sleep", "1"],
        min_runtime_s=60,
        submitted_at=timezone.now(),
        seq=1,
        state=Workload.State.RUNNING,
    )
    at = timezone.now() - timedelta(minutes=30)
    a = Attempt.objects.create(workload=w, number=1, host=host, allocated=True, placed_at=at, started_at=at)
    AttemptGPU.objects.create(attempt=a, gpu=host.gpus.get(index=0))
    return a


async def _link(token: str, backend: FakeGpuBackend) -> None:
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])
    assert (await comm.connect())[0]
    hello = protocol.Hello(host="h1", agent_version="test", gpus=backend.inventory(), attempts=[], id=1)
    await comm.send_to(text_data=protocol.encode(hello))
    welcome = protocol.decode(await comm.receive_from(timeout=5), allowed=protocol.SERVER_MESSAGE_TYPES)
    assert isinstance(welcome, protocol.Welcome)
    beat = protocol.encode(protocol.Heartbeat(gpus=backend.sample(), running=[], id=2))
    assert json.loads(beat)["gpus"][0]["utilization_pct"] is None  # null on the wire
    await comm.send_to(text_data=beat)
    await asyncio.sleep(0.2)
    await comm.disconnect(code=1012)  # a graceful shutdown writes the buffered heartbeat


def test_an_unreadable_utilization_travels_as_not_measured(tmp_path: Path, settings) -> None:
    from scheduler.services import do_register_host

    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 600, "IDLE_UTIL_PCT": 100.0, "IDLE_AFTER_S": 1}
    backend = FakeGpuBackend("h1", 2, state_dir=tmp_path)
    cluster = Cluster.objects.create(name="mig")
    host, token = do_register_host(
        cluster, "h1", [(g.index, g.uuid, g.model, g.memory_mb) for g in backend.inventory()]
    )
    attempt = _place(host)
    assert agent_main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "0", "--no-utilization"]) == 0

    asyncio.run(_link(token, backend))

    mig, plain = GPU.objects.filter(host=host).order_by("index")
    assert mig.last_sample["utilization_pct"] is None and mig.last_sample["memory_used_mb"] is not None
    assert plain.last_sample["utilization_pct"] is not None
    row = GpuMinuteSample.objects.get(gpu=mig)
    assert (row.samples, row.utilization_samples, row.utilization_mean) == (1, 0, None)
    assert GpuMinuteSample.objects.get(gpu=plain).utilization_samples == 1
    later = timezone.now() + timedelta(minutes=2)
    # every minute is under a 100 % threshold: a read 0 % would be idle; unknown is not
    assert idle.idle_attempts(now=later) == {}
    data = efficiency_of_attempts([attempt.pk], now=later)[attempt.pk].as_data()
    assert data["utilization"] is None and data["not_measured"] == 1.0 and data["idle"] is None
