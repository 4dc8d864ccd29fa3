"""agentin46: a heartbeat or hello naming one GPU twice, and a GPU sample's memory past what a GPU holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.gpu.nvml import NvmlGpuBackend
from agent.protocol import (
    MAX_GPU_MEMORY_MB,
    GpuInfo,
    GpuSample,
    Heartbeat,
    Hello,
    ProtocolError,
    decode,
    encode,
)

SAMPLE = GpuSample(0, 50.0, 1000, 60.0, 300.0, 0, "healthy", [])
GPU = GpuInfo(index=0, uuid="GPU-a", model="H100", memory_mb=81559, health="healthy")
HEARTBEAT = Heartbeat(gpus=[SAMPLE], running=[], id=3)
HELLO = Hello(host="h1", agent_version="0.1.0", gpus=[GPU], attempts=[], id=1)


def _with_gpus(msg: Heartbeat | Hello, gpus: list[dict[str, Any]]) -> str:
    payload = json.loads(encode(msg))
    payload["gpus"] = gpus
    return json.dumps(payload)


def _refused(frame: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode(frame)
    return info.value


def test_heartbeat_naming_one_gpu_index_twice_is_invalid() -> None:
    sample = json.loads(encode(HEARTBEAT))["gpus"][0]
    error = _refused(_with_gpus(HEARTBEAT, [sample, {**sample, "health": "unhealthy"}]))

    assert error.code == "invalid"
    assert error.ref == 3
    assert "heartbeat.gpus" in error.message and "index" in error.message and "twice" in error.message


@pytest.mark.parametrize("same", ["index", "uuid"])
def test_hello_naming_one_gpu_twice_is_invalid(same: str) -> None:
    gpu = json.loads(encode(HELLO))["gpus"][0]
    other = {**gpu, "index": 1, "uuid": "GPU-b", same: gpu[same]}
    error = _refused(_with_gpus(HELLO, [gpu, other]))

    assert error.code == "invalid"
    assert "hello.gpus" in error.message and same in error.message


def test_distinct_gpus_are_still_valid() -> None:
    sample = json.loads(encode(HEARTBEAT))["gpus"][0]
    msg = decode(_with_gpus(HEARTBEAT, [sample, {**sample, "index": 1}]))
    assert isinstance(msg, Heartbeat) and [s.index for s in msg.gpus] == [0, 1]
    gpu = json.loads(encode(HELLO))["gpus"][0]
    hello = decode(_with_gpus(HELLO, [gpu, {**gpu, "index": 1, "uuid": "GPU-b"}]))
    assert isinstance(hello, Hello) and len(hello.gpus) == 2


def test_encode_refuses_a_heartbeat_naming_one_gpu_twice() -> None:
    with pytest.raises(ProtocolError):
        encode(Heartbeat(gpus=[SAMPLE, SAMPLE], running=[]))


def test_a_sample_using_more_memory_than_any_gpu_holds_is_invalid() -> None:
    sample = json.loads(encode(HEARTBEAT))["gpus"][0]
    error = _refused(_with_gpus(HEARTBEAT, [{**sample, "memory_used_mb": MAX_GPU_MEMORY_MB + 1}]))
    assert error.code == "invalid" and "memory_used_mb" in error.message
    assert _refused(_with_gpus(HEARTBEAT, [{**sample, "memory_used_mb": 2**40}])).code == "invalid"
    msg = decode(_with_gpus(HEARTBEAT, [{**sample, "memory_used_mb": MAX_GPU_MEMORY_MB}]))
    assert isinstance(msg, Heartbeat) and msg.gpus[0].memory_used_mb == MAX_GPU_MEMORY_MB


def test_nvml_reporting_more_used_than_total_is_clipped_to_the_gpus_memory() -> None:
    """A driver's one bad number clipped at the agent, its heartbeat (health, XIDs) still sent."""
    from tests.agent.test_nvml_backend import FakeNvml

    fake = FakeNvml()
    fake.state[0]["used"] = 2**41
    fake.state[1]["used"] = 90_000
    backend = NvmlGpuBackend(fake)  # type: ignore[arg-type]
    try:
        samples = backend.sample()
        assert [s.memory_used_mb for s in samples] == [81559, 81559]
        encode(Heartbeat(gpus=samples, running=[]))
    finally:
        backend.close()
