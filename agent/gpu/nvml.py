"""The ``nvml`` GPU backend: real NVIDIA GPUs through NVML (``pynvml`` of nvidia-ml-py).

Inventory (index, UUID, name, memory), and per sample: utilization, memory used, temperature,
power, volatile uncorrected ECC errors, retired pages pending, row-remapping state, clock throttle
reasons, and the XID events an NVML event set delivered since the last sample (read by a daemon
thread). Health, as in DESIGN.md §4:

- ``unhealthy``: a fatal XID (:data:`agent.protocol.FATAL_XIDS`; sticky until the agent restarts,
  i.e. after the GPU was reset), volatile uncorrected ECC errors, a row-remapping failure, or a
  GPU NVML can no longer reach;
- ``degraded``: thermal or hardware slowdown (throttle reasons), or a page retirement / row
  remapping pending a reset;
- ``healthy`` otherwise.

Without a usable driver, :class:`NvmlGpuBackend` raises :class:`GpuUnavailable` with one line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from agent.gpu.base import GpuBackend, GpuUnavailable
from agent.protocol import FATAL_XIDS, MAX_GPU_MEMORY_MB, GpuInfo, GpuSample, Health

log = logging.getLogger(__name__)

T = TypeVar("T")

# nvmlClocksThrottleReason* bits (same values as the newer nvmlClocksEventReason* names)
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_SLOWDOWN = 0x08
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80
DEGRADING_THROTTLE = THROTTLE_SW_THERMAL | THROTTLE_HW_SLOWDOWN | THROTTLE_HW_THERMAL | THROTTLE_HW_POWER_BRAKE
XID_EVENT = 0x0000000000000008  # nvmlEventTypeXidCriticalError
EVENT_WAIT_MS = 1000
MAX_XIDS_PER_SAMPLE = 64


@dataclass(frozen=True, slots=True)
class Reading:
    """The health-relevant counters of one GPU at one sample."""

    ecc_uncorrected: int = 0
    retired_pages_pending: bool = False
    remap_pending: bool = False
    remap_failure: bool = False
    throttle_reasons: int = 0
    lost: bool = False


def classify(reading: Reading, fatal_xids: set[int] | frozenset[int]) -> Health:
    """Health of a GPU from its counters and the fatal XIDs seen on it (DESIGN.md §4)."""
    if reading.lost or fatal_xids or reading.ecc_uncorrected > 0 or reading.remap_failure:
        return "unhealthy"
    if reading.throttle_reasons & DEGRADING_THROTTLE or reading.retired_pages_pending or reading.remap_pending:
        return "degraded"
    return "healthy"


def _clamp(value: float | None, low: float, high: float) -> float | None:
    """``value`` within ``[low, high]``; None (not read) stays None."""
    return None if value is None else min(high, max(low, value))


def _used_mb(memory: Any) -> int:
    """NVML's memory info's ``used`` in MiB, clipped to the GPU's ``total`` and the protocol's bound
    (agent.protocol.GpuSample: one bad number never costs a heartbeat's health data)."""
    total = min(MAX_GPU_MEMORY_MB, max(0, int(memory.total) // (1024 * 1024)))
    return min(total, max(0, int(memory.used) // (1024 * 1024)))


def _load_nvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise GpuUnavailable("the nvml backend needs nvidia-ml-py (pip install nvidia-ml-py)") from None
    return pynvml


class NvmlGpuBackend(GpuBackend):
    """Every NVIDIA GPU of this host, through NVML. ``nvml`` replaces the ``pynvml`` module (tests).

    Raises:
        GpuUnavailable: NVML cannot be loaded or initialised (no driver, no GPU), in one line.
    """

    def __init__(self, nvml: ModuleType | None = None, *, watch_xids: bool = True) -> None:
        self.nvml = nvml or _load_nvml()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise GpuUnavailable(
                f"NVML is not usable here ({exc}): is the NVIDIA driver installed and loaded (nvidia-smi)?"
            ) from None
        count = self.nvml.nvmlDeviceGetCount()
        if count == 0:
            self.nvml.nvmlShutdown()
            raise GpuUnavailable("NVML found no NVIDIA GPU on this host")
        self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._uuids = [self._text(self.nvml.nvmlDeviceGetUUID(h)) for h in self._handles]
        self._nodes: dict[int, str] = {}
        for index, handle in enumerate(self._handles):
            try:
                self._nodes[index] = f"/dev/nvidia{int(self.nvml.nvmlDeviceGetMinorNumber(handle))}"
            except self.nvml.NVMLError as exc:
                log.warning("GPU %d: no device minor number (%s): its node stays open to every attempt", index, exc)
        self._lock = threading.Lock()
        self._recent_xids: dict[int, list[int]] = {i: [] for i in range(count)}
        self._fatal_xids: dict[int, set[int]] = {i: set() for i in range(count)}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if watch_xids:
            self._start_xid_watch()

    def device_nodes(self) -> dict[int, str]:
        """``/dev/nvidia<minor>`` of each GPU (``nvmlDeviceGetMinorNumber``), by index."""
        return dict(self._nodes)

    @staticmethod
    def _text(value: str | bytes) -> str:
        """NVML's text (bytes in older pynvml), without blanks or NULs at its ends: the server
        refuses a GPU model or UUID that begins or ends with a blank (``gpu_text_problem``), so a
        padded name must not lock the host out."""
        text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        return text.strip().strip("\x00").strip()

    def _try(self, call: Callable[[], T], default: T) -> T:
        """``call()``, or ``default`` when the GPU does not support it (or NVML fails on it)."""
        try:
            return call()
        except self.nvml.NVMLError:
            return default

    # --- XID events -----------------------------------------------------------------------------

    def _start_xid_watch(self) -> None:
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("XID events unavailable: %s", exc)
            return
        registered = 0
        for index, handle in enumerate(self._handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, XID_EVENT, event_set)
                registered += 1
            except nvml.NVMLError as exc:
                log.warning("GPU %d: XID events unavailable: %s", index, exc)
        if not registered:
            nvml.nvmlEventSetFree(event_set)
            return
        self._thread = threading.Thread(target=self._watch_xids, args=(event_set,), name="nvml-xid", daemon=True)
        self._thread.start()

    def _watch_xids(self, event_set: Any) -> None:
        nvml = self.nvml
        try:
            while not self._stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, EVENT_WAIT_MS)
                except nvml.NVMLError_Timeout:
                    continue
                except nvml.NVMLError as exc:
                    log.warning("XID event wait failed: %s", exc)
                    self._stop.wait(EVENT_WAIT_MS / 1000)
                    continue
                self.record_xid(self._text(nvml.nvmlDeviceGetUUID(data.device)), int(data.eventData))
        finally:
            self._try(lambda: nvml.nvmlEventSetFree(event_set), None)

    def record_xid(self, uuid: str, xid: int) -> None:
        """Note an XID event of the GPU ``uuid`` (called by the event thread)."""
        if uuid not in self._uuids:
            return
        index = self._uuids.index(uuid)
        log.warning("GPU %d (%s): XID %d%s", index, uuid, xid, " (fatal)" if xid in FATAL_XIDS else "")
        with self._lock:
            self._recent_xids[index].append(xid)
            del self._recent_xids[index][:-MAX_XIDS_PER_SAMPLE]
            if xid in FATAL_XIDS:
                self._fatal_xids[index].add(xid)

    # --- readings -------------------------------------------------------------------------------

    def _reading(self, handle: Any) -> Reading:
        nvml = self.nvml
        try:
            nvml.nvmlDeviceGetUUID(handle)
        except nvml.NVMLError:
            return Reading(lost=True)
        ecc = self._try(
            lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            ),
            0,
        )
        pages = self._try(
            lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED, False
        )
        remap = self._try(lambda: tuple(nvml.nvmlDeviceGetRemappedRows(handle)), (0, 0, 0, 0))
        throttle = self._try(lambda: int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)), 0)
        return Reading(
            ecc_uncorrected=ecc,
            retired_pages_pending=bool(pages),
            remap_pending=bool(remap[2]),
            remap_failure=bool(remap[3]),
            throttle_reasons=throttle,
        )

    def inventory(self) -> list[GpuInfo]:
        nvml = self.nvml
        gpus = []
        for index, handle in enumerate(self._handles):
            name = self._try(lambda h=handle: self._text(nvml.nvmlDeviceGetName(h)), "unknown")
            memory = self._try(lambda h=handle: int(nvml.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024), 0)
            with self._lock:
                fatal = set(self._fatal_xids[index])
            health = classify(self._reading(handle), fatal)
            gpus.append(
                GpuInfo(index=index, uuid=self._uuids[index], model=name[:256], memory_mb=memory, health=health)
            )
        return gpus

    def sample(self) -> list[GpuSample]:
        nvml = self.nvml
        samples = []
        for index, handle in enumerate(self._handles):
            reading = self._reading(handle)
            with self._lock:
                xids, self._recent_xids[index] = self._recent_xids[index], []
                fatal = set(self._fatal_xids[index])
            # A reading NVML refuses (NOT_SUPPORTED on a MIG-mode GPU, a transient error) is None:
            # not measured. 0 % would count the GPU unused and its work idle (nvml56).
            util = self._try(lambda h=handle: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu), None)
            used = self._try(lambda h=handle: _used_mb(nvml.nvmlDeviceGetMemoryInfo(h)), None)
            temp = self._try(lambda h=handle: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)), None)
            power = self._try(lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, None)
            samples.append(
                GpuSample(
                    index=index,
                    utilization_pct=_clamp(util, 0.0, 100.0),
                    memory_used_mb=used,
                    temperature_c=_clamp(temp, -100.0, 300.0),
                    power_w=_clamp(power, 0.0, 100_000.0),
                    ecc_uncorrected=max(0, reading.ecc_uncorrected),
                    health=classify(reading, fatal),
                    xids=xids[-MAX_XIDS_PER_SAMPLE:],
                )
            )
        return samples

    def close(self) -> None:
        """Stop the XID thread and shut NVML down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(EVENT_WAIT_MS / 1000 + 1)
        self._try(self.nvml.nvmlShutdown, None)
