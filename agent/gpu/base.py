"""The interface every GPU backend implements."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Collection
from pathlib import Path

from agent.protocol import GpuInfo, GpuSample


class GpuUnavailable(Exception):
    """The backend cannot run on this host (e.g. no NVIDIA driver); the message says why in one line."""


class GpuBackend(ABC):
    """Inventory and telemetry of one host's GPUs.

    Calls may block (NVML does): the agent runs them through ``asyncio.to_thread``.
    """

    @abstractmethod
    def inventory(self) -> list[GpuInfo]:
        """Every GPU of the host, ordered by index, with its current health."""

    @abstractmethod
    def sample(self) -> list[GpuSample]:
        """One telemetry sample per GPU, ordered by index; ``xids`` lists recent XID events."""

    def host_resources(self) -> tuple[int | None, int | None]:
        """``(CPUs, memory bytes)`` this host offers to attempts (DESIGN.md §3.3): by default the
        real machine's (:func:`machine_resources`); None where it cannot be read."""
        return machine_resources()

    def device_nodes(self) -> dict[int, str]:
        """Each GPU's own device node (``/dev/nvidia<minor>``) by index: the process runtime hides
        the host's other GPUs' nodes from an attempt (docs/isolation.md). ``{}`` (the default):
        none known, nothing hidden."""
        return {}

    def note_busy(self, indices: Collection[int]) -> None:  # noqa: B027 -- optional hook, no-op by default
        """Tell the backend which GPU indices attempts hold now (simulated backends use it)."""

    def close(self) -> None:  # noqa: B027 -- optional hook, no-op by default
        """Release the backend's resources (threads, driver handles)."""


def machine_resources(meminfo: Path = Path("/proc/meminfo")) -> tuple[int | None, int | None]:
    """The CPUs this process may run on (its affinity, else ``os.cpu_count()``) and the machine's
    memory (``MemTotal`` of ``/proc/meminfo``, else ``sysconf``); None for what cannot be read."""
    try:
        cpus: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    memory: int | None = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        memory = None
    if memory is None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, OSError, ValueError):
            memory = None
    return cpus or None, memory or None
