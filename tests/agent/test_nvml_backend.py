"""The nvml backend against a scripted stand-in of pynvml (no GPU here), and the real pynvml
without a driver: a one-line explanation at start."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agent_testkit import REPO_ROOT

from agent.gpu.base import GpuUnavailable
from agent.gpu.nvml import NvmlGpuBackend, Reading, classify


class NVMLError(Exception):
    pass


class NVMLError_Timeout(NVMLError):  # noqa: N801 -- pynvml's name
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 -- pynvml's name
    pass


class FakeNvml:
    """Two GPUs; ``state[i]`` holds what NVML reports for GPU i; ``xids`` feeds the event set."""

    NVMLError = NVMLError
    NVMLError_Timeout = NVMLError_Timeout
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_FEATURE_ENABLED = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, count: int = 2, fail_init: bool = False) -> None:
        self.count = count
        self.fail_init = fail_init
        self.state = [
            {"ecc": 0, "pages": 0, "remap": (0, 0, 0, 0), "throttle": 0, "util": 37, "used": 1024, "temp": 41,
             "power": 123456, "unsupported": False}
            for _ in range(count)
        ]  # fmt: skip
        self.xids: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.shutdown = False

    def _s(self, h: int) -> dict[str, Any]:
        if self.state[h]["unsupported"]:
            raise NVMLError_NotSupported("Not Supported")
        return self.state[h]

    def nvmlInit(self) -> None:  # noqa: N802 -- pynvml's names below
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown = True

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:  # noqa: N802
        if "minor" not in self.state[h]:
            raise NVMLError_NotSupported("Not Supported")
        return int(self.state[h]["minor"])

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-real-{h}"

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(total=81559 * 1024 * 1024, used=self.state[h]["used"] * 1024 * 1024)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=self.state[h]["util"], memory=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        return self.state[h]["temp"]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        return self.state[h]["power"]

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:  # noqa: N802
        return self._s(h)["ecc"]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:  # noqa: N802
        return self._s(h)["pages"]

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:  # noqa: N802
        return self._s(h)["remap"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:  # noqa: N802
        return self._s(h)["throttle"]

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "set"

    def nvmlEventSetFree(self, s: str) -> None:  # noqa: N802
        pass

    def nvmlDeviceRegisterEvents(self, h: int, mask: int, s: str) -> None:  # noqa: N802
        assert mask == 8  # XID critical errors

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> SimpleNamespace:  # noqa: N802
        with self.lock:
            if self.xids:
                device, xid = self.xids.pop(0)
                return SimpleNamespace(device=device, eventData=xid)
        time.sleep(0.01)
        raise NVMLError_Timeout("Timeout")


def _wait_xids_consumed(fake: FakeNvml) -> None:
    for _ in range(200):
        with fake.lock:
            if not fake.xids:
                time.sleep(0.05)
                return
        time.sleep(0.01)
    raise AssertionError("XID events not consumed")


def test_inventory_and_a_sample_of_healthy_gpus() -> None:
    fake = FakeNvml()
    backend = NvmlGpuBackend(fake)  # type: ignore[arg-type]
    try:
        inventory = backend.inventory()
        assert [(g.index, g.uuid, g.model, g.memory_mb, g.health) for g in inventory] == [
            (i, f"GPU-real-{i}", "NVIDIA H100 80GB HBM3", 81559, "healthy") for i in range(2)
        ]
        sample = backend.sample()[0]
        assert (sample.utilization_pct, sample.memory_used_mb, sample.temperature_c, sample.power_w) == (
            37.0, 1024, 41.0, 123.456,
        )  # fmt: skip
        assert (sample.ecc_uncorrected, sample.health, sample.xids) == (0, "healthy", [])
    finally:
        backend.close()
    assert fake.shutdown


@pytest.mark.parametrize(
    ("state", "health"),
    [
        ({"ecc": 2}, "unhealthy"),
        ({"remap": (0, 1, 0, 1)}, "unhealthy"),
        ({"remap": (0, 1, 1, 0)}, "degraded"),
        ({"pages": 1}, "degraded"),
        ({"throttle": 0x40}, "degraded"),  # HW thermal slowdown
        ({"throttle": 0x20}, "degraded"),  # SW thermal slowdown
        ({"throttle": 0x04}, "healthy"),  # applications clocks setting: not a fault
        ({"unsupported": True}, "healthy"),  # consumer GPUs: no ECC, no row remapping
    ],
)
def test_health_from_ecc_remapping_retirement_and_throttling(state: dict[str, Any], health: str) -> None:
    fake = FakeNvml()
    fake.state[1].update(state)
    backend = NvmlGpuBackend(fake, watch_xids=False)  # type: ignore[arg-type]
    samples = backend.sample()
    assert (samples[0].health, samples[1].health) == ("healthy", health)
    assert backend.inventory()[1].health == health
    backend.close()


def test_xid_events_are_listed_once_and_fatal_ones_make_the_gpu_unhealthy_for_good() -> None:
    fake = FakeNvml()
    backend = NvmlGpuBackend(fake)  # type: ignore[arg-type]
    try:
        with fake.lock:
            fake.xids += [(0, 13), (1, 79)]
        _wait_xids_consumed(fake)
        first = backend.sample()
        assert [(s.xids, s.health) for s in first] == [([13], "healthy"), ([79], "unhealthy")]
        second = backend.sample()
        assert [(s.xids, s.health) for s in second] == [([], "healthy"), ([], "unhealthy")]
    finally:
        backend.close()


def test_without_a_driver_the_backend_fails_at_start_in_one_line() -> None:
    with pytest.raises(GpuUnavailable) as info:
        NvmlGpuBackend(FakeNvml(fail_init=True))  # type: ignore[arg-type]
    assert "Driver Not Loaded" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(GpuUnavailable, match="no NVIDIA GPU"):
        NvmlGpuBackend(FakeNvml(count=0))  # type: ignore[arg-type]
    assert classify(Reading(lost=True), set()) == "unhealthy"


def test_the_agent_with_nvml_and_no_driver_exits_with_one_line(tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    done = subprocess.run(  # noqa: S603 -- our own agent
        [sys.executable, "-m", "agent", "run", "--server", "ws://127.0.0.1:9/",
         "--gpu-backend", "nvml", "--state-dir", str(tmp_path)],
        cwd=REPO_ROOT, env={**os.environ, "FAIRWAY_TOKEN": "t"}, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("agent:")]
    assert done.returncode == 1 and len(errors) == 1 and "NVIDIA driver" in errors[0], done.stderr


def test_each_gpu_reports_its_device_node_from_its_minor_number() -> None:
    """The process runtime hides the host's other GPUs' nodes (docs/isolation.md): NVML's minor
    number names each; a GPU without one is left out (its node is not hidden: logged)."""
    fake = FakeNvml(count=3)
    fake.state[0]["minor"] = 4
    fake.state[2]["minor"] = 0
    backend = NvmlGpuBackend(fake, watch_xids=False)  # type: ignore[arg-type]
    try:
        assert backend.device_nodes() == {0: "/dev/nvidia4", 2: "/dev/nvidia0"}
    finally:
        backend.close()


def test_a_padded_name_or_uuid_is_reported_trimmed() -> None:
    """The server refuses a GPU model or UUID with a blank at either end (ops35's
    ``gpu_text_problem``): NVML text padded with blanks or NULs is trimmed, not sent as is."""

    class Padded(FakeNvml):
        def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
            return f" GPU-real-{h}\x00"

        def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
            return b"NVIDIA H100 80GB HBM3  \x00"

    backend = NvmlGpuBackend(Padded())  # type: ignore[arg-type]
    try:
        assert [(g.uuid, g.model) for g in backend.inventory()] == [
            (f"GPU-real-{i}", "NVIDIA H100 80GB HBM3") for i in range(2)
        ]
    finally:
        backend.close()
