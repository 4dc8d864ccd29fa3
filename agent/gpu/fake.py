"""Simulated GPUs for the demo and the tests, with faults injectable at run time.

Faults live in ``<state dir>/faults.json`` (written by ``python -m agent inject-fault``) and are
re-read on every :meth:`FakeGpuBackend.sample`, so a running agent picks them up at its next
heartbeat::

    {"3": {"xids": [79], "ecc_uncorrected": 0, "degraded": false, "idle": false, "no_utilization": false}}

A fatal XID (:data:`agent.protocol.FATAL_XIDS`) or an uncorrectable ECC error makes the GPU
``unhealthy`` (until cleared); ``degraded`` flags it ``degraded``; ``idle`` makes it read 0 %
utilization, busy or not (a stalled job); ``no_utilization`` makes its utilization unreadable
(sent as ``null``, as NVML's ``NOT_SUPPORTED`` on a MIG-mode GPU); other XIDs are only listed.
Each injected XID is sent at one heartbeat only, as NVML reports an XID event once.
"""

from __future__ import annotations

import json
import logging
import os
import random
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.gpu.base import GpuBackend
from agent.protocol import FATAL_XIDS, GpuInfo, GpuSample, Health

log = logging.getLogger(__name__)

MODEL_MEMORY_MB: dict[str, int] = {
    "H100": 81559,
    "H200": 143771,
    "A100": 81920,
    "A100-40GB": 40960,
    "L40S": 46068,
}
"""Memory in MiB of the simulated models (as NVML reports them); other models get 81559."""

FAULT_FILE = "faults.json"
_UUID_NAMESPACE = uuid.UUID("6f1b3c2e-4d0a-5b8e-9c7f-2a1d0e3b4c5d")
_TDP_W = 700.0


@dataclass(slots=True)
class Fault:
    """Injected faults of one GPU."""

    xids: list[int] = field(default_factory=list)
    ecc_uncorrected: int = 0
    degraded: bool = False
    idle: bool = False
    """Stalled: the GPU reads 0 % utilization even while its work runs (a job stuck on I/O; the
    idle GPU alerts of docs/jobs.md to try). Health is untouched."""
    no_utilization: bool = False

    @property
    def health(self) -> Health:
        if self.ecc_uncorrected > 0 or any(x in FATAL_XIDS for x in self.xids):
            return "unhealthy"
        return "degraded" if self.degraded else "healthy"


def fake_gpu_uuid(host: str, index: int) -> str:
    """Stable UUID of simulated GPU ``index`` on ``host``: ``GPU-`` + uuid5(host/index)."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{host}/{index}')}"


MAX_XID = 2**31 - 1
MAX_XIDS = 64
MAX_ECC = 2**63 - 1
MAX_GPU_INDEX = 1023
"""The bounds of a heartbeat's GPU sample (``agent.protocol.GpuSample``): a fault outside them
made every heartbeat invalid, so the agent sent none and its host went offline."""


def fault_problem(index: Any, xids: Any, ecc: Any) -> str | None:
    """Why a fault of GPU ``index`` cannot be reported in a heartbeat; None when it can."""
    if type(index) is not int or not 0 <= index <= MAX_GPU_INDEX:
        return f"GPU index {index!r} is not a whole number 0-{MAX_GPU_INDEX}"
    if (
        not isinstance(xids, list)
        or len(xids) > MAX_XIDS
        or not all(type(x) is int and 0 <= x <= MAX_XID for x in xids)
    ):
        return f"GPU {index}: XIDs are at most {MAX_XIDS} whole numbers 0-{MAX_XID}"
    if type(ecc) is not int or not 0 <= ecc <= MAX_ECC:
        return f"GPU {index}: the uncorrectable ECC count is a whole number 0-{MAX_ECC}"
    return None


def read_faults(state_dir: Path) -> dict[int, Fault]:
    """Faults injected into ``state_dir``, by GPU index ({} when none).

    Raises:
        OSError: the file exists but cannot be read.
        ValueError: the file is not a valid fault file.
    """
    try:
        raw = json.loads((state_dir / FAULT_FILE).read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("fault file is not an object")
    faults: dict[int, Fault] = {}
    for key, entry in raw.items():
        if not isinstance(entry, dict) or not key.isdigit():
            raise ValueError(f"bad fault entry for GPU {key}")
        xids = entry.get("xids", [])
        ecc = entry.get("ecc_uncorrected", 0)
        problem = fault_problem(int(key), xids, ecc)
        if problem is not None:
            raise ValueError(f"bad fault entry: {problem}")
        faults[int(key)] = Fault(
            xids=xids,
            ecc_uncorrected=ecc,
            degraded=bool(entry.get("degraded", False)),
            idle=bool(entry.get("idle", False)),
            no_utilization=bool(entry.get("no_utilization", False)),
        )
    return faults


def write_faults(state_dir: Path, faults: dict[int, Fault]) -> None:
    """Replace the fault file of ``state_dir`` atomically (creating the directory).

    Raises:
        OSError: the file cannot be written.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        str(i): {
            "xids": f.xids,
            "ecc_uncorrected": f.ecc_uncorrected,
            "degraded": f.degraded,
            "idle": f.idle,
            "no_utilization": f.no_utilization,
        }
        for i, f in sorted(faults.items())
    }
    tmp = state_dir / f".{FAULT_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, state_dir / FAULT_FILE)


@dataclass(slots=True)
class _Telemetry:
    utilization: float = 0.0
    temperature: float = 32.0
    power: float = 70.0
    memory_used: float = 0.0


class FakeGpuBackend(GpuBackend):
    """``count`` simulated GPUs of ``model`` on host ``host``.

    Busy GPUs (see :meth:`note_busy`) drift towards high utilization, memory used, power and
    temperature, with noise. As NVML's, an idle GPU's utilization (the share of the last sample
    period a kernel ran) and memory used (its processes' allocations) are 0 from its first sample
    without an attempt; its power and temperature drift down (fake46: a drained host's GPUs read
    38 % and 19,571 MiB after their attempt ended). ``state_dir`` holds the fault file (None: no faults).
    ``dev_dir`` (None: none) gets one stand-in device node per GPU, ``nvidia<index>``: an empty
    file of mode 0666 (as the NVIDIA driver makes its nodes), so that the process runtime's hiding
    of other GPUs' nodes works on simulated hosts too (:meth:`device_nodes`).
    """

    def __init__(
        self,
        host: str,
        count: int,
        model: str = "H100",
        memory_mb: int | None = None,
        state_dir: Path | None = None,
        seed: int | None = None,
        cpus: int | None = None,
        memory: int | None = None,
        dev_dir: Path | None = None,
    ) -> None:
        if count < 0:
            raise ValueError("count must be >= 0")
        self.host = host
        # A simulated host offers 8 CPUs and 64G per GPU unless told otherwise (as scenarios do).
        self.cpus = cpus if cpus is not None else max(1, 8 * count)
        self.memory = memory if memory is not None else max(1, 64 * count) << 30
        self.model = model
        self.memory_mb = memory_mb if memory_mb is not None else MODEL_MEMORY_MB.get(model, 81559)
        self.state_dir = state_dir
        self._uuids = [fake_gpu_uuid(host, i) for i in range(count)]
        self._rng = random.Random(seed if seed is not None else host)  # noqa: S311 -- simulation, not crypto
        self._telemetry = [_Telemetry() for _ in range(count)]
        self._busy: frozenset[int] = frozenset()
        self._faults: dict[int, Fault] = {}
        # XIDs of each GPU's fault already sent: like NVML's events, an injected XID is reported
        # at one heartbeat only (the GPU stays unhealthy); a cleared fault forgets them.
        self._xids_sent: dict[int, set[int]] = {}
        self._nodes: dict[int, str] = {}
        if dev_dir is not None:
            self._nodes = make_fake_nodes(dev_dir, count)

    def device_nodes(self) -> dict[int, str]:
        return dict(self._nodes)

    def note_busy(self, indices: Collection[int]) -> None:
        self._busy = frozenset(indices)

    def host_resources(self) -> tuple[int | None, int | None]:
        """The simulated host's CPUs and memory (8 and 64G per GPU by default)."""
        return self.cpus, self.memory

    def _load_faults(self) -> dict[int, Fault]:
        if self.state_dir is not None:
            try:
                self._faults = read_faults(self.state_dir)
            except (OSError, ValueError) as exc:
                # A half-edited fault file must not flap GPU health: keep the last good one.
                log.warning("ignoring unreadable fault file in %s: %s", self.state_dir, exc)
        return self._faults

    def inventory(self) -> list[GpuInfo]:
        faults = self._load_faults()
        return [
            GpuInfo(
                index=i,
                uuid=u,
                model=self.model,
                memory_mb=self.memory_mb,
                health=faults[i].health if i in faults else "healthy",
            )
            for i, u in enumerate(self._uuids)
        ]

    def sample(self) -> list[GpuSample]:
        faults = self._load_faults()
        samples = []
        for i, t in enumerate(self._telemetry):
            busy = i in self._busy
            self._drift(t, busy)
            fault = faults.get(i, Fault())
            sent = self._xids_sent.setdefault(i, set())
            sent &= set(fault.xids)  # a cleared XID is an event again when injected anew
            xids = [x for x in fault.xids if x not in sent]
            sent.update(xids)
            samples.append(
                GpuSample(
                    index=i,
                    utilization_pct=None if fault.no_utilization else 0.0 if fault.idle else round(t.utilization, 1),
                    memory_used_mb=int(t.memory_used),
                    temperature_c=round(t.temperature, 1),
                    power_w=round(t.power, 1),
                    ecc_uncorrected=fault.ecc_uncorrected,
                    health=fault.health,
                    xids=xids,
                )
            )
        return samples

    def _drift(self, t: _Telemetry, busy: bool) -> None:
        rng = self._rng
        if busy:
            targets = (rng.uniform(75, 100), rng.uniform(60, 82), rng.uniform(0.6, 0.95) * _TDP_W, 0.8)
        else:
            targets = (0.0, rng.uniform(30, 38), rng.uniform(60, 80), 0.0)
        util, temp, power, mem_frac = targets
        t.utilization = _clamp(t.utilization + 0.6 * (util - t.utilization) + rng.gauss(0, 2), 0, 100)
        t.temperature = _clamp(t.temperature + 0.3 * (temp - t.temperature) + rng.gauss(0, 0.5), 20, 95)
        t.power = _clamp(t.power + 0.5 * (power - t.power) + rng.gauss(0, 5), 40, _TDP_W)
        t.memory_used = _clamp(t.memory_used + 0.7 * (mem_frac * self.memory_mb - t.memory_used), 0, self.memory_mb)
        if not busy:  # no process on it: nothing ran, nothing is allocated (the draws above kept)
            t.utilization = t.memory_used = 0.0


def make_fake_nodes(dev_dir: Path, count: int) -> dict[int, str]:
    """Make ``dev_dir`` (0755) and in it ``nvidia0``… (empty files, mode 0666, as the driver's
    nodes): the simulated GPUs' device nodes, by index."""
    dev_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(dev_dir, 0o755)  # noqa: S103 -- as /dev: every attempt reaches it
    nodes = {}
    for index in range(count):
        node = dev_dir / f"nvidia{index}"
        node.touch()
        os.chmod(node, 0o666)  # noqa: S103 -- as the NVIDIA driver's nodes: hiding them is the runtime's job
        nodes[index] = str(node)
    return nodes


def _clamp(value: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, value))
