"""The interface every GPU backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection

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

    def note_busy(self, indices: Collection[int]) -> None:  # noqa: B027 -- optional hook, no-op by default
        """Tell the backend which GPU indices attempts hold now (simulated backends use it)."""

    def close(self) -> None:  # noqa: B027 -- optional hook, no-op by default
        """Release the backend's resources (threads, driver handles)."""
