"""A GPU reading NVML cannot give (NOT_SUPPORTED on a MIG-mode GPU, a transient error) travels as
``null``, never as 0 (nvml56): the protocol, the nvml backend, the simulated GPUs and ``gpus``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_nvml_backend import FakeNvml, NVMLError, NVMLError_NotSupported

from agent.__main__ import main
from agent.gpu.fake import FakeGpuBackend, read_faults
from agent.gpu.nvml import NvmlGpuBackend
from agent.protocol import GpuSample, Heartbeat, ProtocolError, decode, encode

UNREAD = GpuSample(0, None, None, None, None, 0, "healthy", [])


def _heartbeat_frame(**gpu: Any) -> str:
    payload = json.loads(encode(Heartbeat(gpus=[UNREAD], running=[], id=3)))
    payload["gpus"][0].update(gpu)
    return json.dumps(payload)


def test_a_heartbeat_carries_unread_readings_as_null() -> None:
    text = encode(Heartbeat(gpus=[UNREAD], running=[], id=3))

    assert json.loads(text)["gpus"][0]["utilization_pct"] is None
    msg = decode(text)
    assert isinstance(msg, Heartbeat) and msg.gpus == [UNREAD]


@pytest.mark.parametrize(
    "gpu",
    [
        {"utilization_pct": 100.5},
        {"utilization_pct": -1},
        {"utilization_pct": "n/a"},
        {"memory_used_mb": -1},
        {"memory_used_mb": 1.5},
        {"temperature_c": 301},
        {"power_w": -0.5},
        {"power_w": True},
    ],
)
def test_a_reading_out_of_range_is_still_refused(gpu: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(_heartbeat_frame(**gpu))
    assert info.value.code == "invalid" and next(iter(gpu)) in info.value.message


def test_a_reading_is_still_required_on_the_wire() -> None:
    payload = json.loads(_heartbeat_frame())
    del payload["gpus"][0]["utilization_pct"]

    with pytest.raises(ProtocolError):
        decode(json.dumps(payload))


class MigNvml(FakeNvml):
    """GPU 0 in MIG mode: NVML answers NOT_SUPPORTED for its utilization only; ``fail`` makes
    every reading of GPU 1 fail with another NVML error (a transient one)."""

    fail = False

    def _read(self, h: int) -> None:
        if h == 1 and self.fail:
            raise NVMLError("Unknown Error")

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:  # noqa: N802 -- pynvml's names below
        if h == 0:
            raise NVMLError_NotSupported("Not Supported")
        self._read(h)
        return super().nvmlDeviceGetUtilizationRates(h)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        self._read(h)
        return super().nvmlDeviceGetMemoryInfo(h)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        self._read(h)
        return super().nvmlDeviceGetTemperature(h, sensor)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        self._read(h)
        return super().nvmlDeviceGetPowerUsage(h)


def test_nvml_sends_a_reading_it_cannot_read_as_none_not_zero() -> None:
    fake = MigNvml()
    backend = NvmlGpuBackend(fake, watch_xids=False)  # type: ignore[arg-type]
    try:
        mig, plain = backend.sample()
        assert (mig.utilization_pct, mig.memory_used_mb, mig.temperature_c, mig.power_w) == (None, 1024, 41.0, 123.456)
        assert plain.utilization_pct == 37.0
        fake.fail = True
        failing = backend.sample()[1]
        assert (failing.utilization_pct, failing.memory_used_mb, failing.temperature_c, failing.power_w) == (
            None, None, None, None,
        )  # fmt: skip
        assert failing.health == "healthy"  # a reading it cannot give is no fault of the GPU
        decode(encode(Heartbeat(gpus=[mig, failing], running=[], id=1)))  # a valid heartbeat
    finally:
        backend.close()


def test_a_simulated_gpu_can_lose_its_utilization_and_gpus_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = FakeGpuBackend("h1", 2, state_dir=tmp_path)

    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--no-utilization"]) == 0
    assert read_faults(tmp_path)[1].no_utilization
    samples = backend.sample()
    assert [s.utilization_pct is None for s in samples] == [False, True]
    assert samples[1].memory_used_mb is not None and samples[1].health == "healthy"
    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--xid", "13"]) == 0
    assert read_faults(tmp_path)[1].no_utilization  # another fault keeps it

    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--clear"]) == 0
    assert backend.sample()[1].utilization_pct is not None
    capsys.readouterr()


def test_gpus_prints_a_dash_for_an_unread_reading(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.__main__ import _reading

    assert (_reading(None, "%"), _reading(37.4, "%"), _reading(0.0, " W")) == ("-", "37%", "0 W")
