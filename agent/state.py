"""The agent's on-disk state: one JSON record per attempt, so a restarted agent re-adopts its
running attempts and still reports exits that happened while it or the server was away.

Layout of ``<state dir>/attempts/``: ``<id>.json`` (the record), ``<id>.log`` (stdout+stderr),
``<id>.exit`` (exit code and exit time, written by the attempt's wrapper shell).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

RecordState = Literal["running", "exited", "failed_to_start"]


def monotonic_s() -> float:
    """Seconds since boot on ``CLOCK_BOOTTIME``: monotonic, shared by every process of one boot
    (so it survives agent restarts) and equal to the first field of ``/proc/uptime``."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def current_boot_id() -> str:
    """The kernel's boot id ("" when unknown): monotonic times only compare within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(slots=True)
class AttemptRecord:
    """What the agent knows of one attempt. Times are :func:`monotonic_s` seconds of ``boot_id``,
    except ``finished_wall`` (local housekeeping only, never sent to the server)."""

    attempt_id: int
    workload_id: int
    state: RecordState
    gpu_indices: list[int] = field(default_factory=list)
    grace_s: int = 30
    pid: int | None = None
    proc_start: int | None = None  # field 22 of /proc/<pid>/stat: clock ticks after boot
    boot_id: str = ""
    started_mono: float | None = None
    exit_code: int | None = None
    exited_mono: float | None = None
    finished_wall: float | None = None
    reported: bool = False  # the server acknowledged the end state
    killed: bool = False  # the agent sent SIGKILL
    message: str = ""

    def age_s(self, now_mono: float, boot_id: str) -> float | None:
        """Seconds since the exit, or None while running or when the exit time is unknown."""
        if self.exited_mono is None or not boot_id or self.boot_id != boot_id:
            return None
        return max(0.0, now_mono - self.exited_mono)


class AttemptStore:
    """Attempt records as files under ``<state_dir>/attempts`` (created on first use)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "attempts"

    def _path(self, attempt_id: int, suffix: str) -> Path:
        return self.dir / f"{attempt_id}.{suffix}"

    def log_path(self, attempt_id: int) -> Path:
        """The attempt's stdout+stderr log file."""
        return self._path(attempt_id, "log")

    def exit_path(self, attempt_id: int) -> Path:
        """The file the attempt's wrapper writes ``"<exit code> <uptime s>"`` to on exit."""
        return self._path(attempt_id, "exit")

    def save(self, record: AttemptRecord) -> None:
        """Write ``record`` atomically.

        Raises:
            OSError: the state directory is not writable.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self._path(record.attempt_id, "json.tmp")
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, self._path(record.attempt_id, "json"))

    def load_all(self) -> list[AttemptRecord]:
        """Every readable record; unreadable ones are logged and skipped."""
        if not self.dir.is_dir():
            return []
        names = {f.name for f in fields(AttemptRecord)}
        records = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                records.append(AttemptRecord(**{k: v for k, v in data.items() if k in names}))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("skipping unreadable attempt record %s: %s", path, exc)
        return records

    def read_exit(self, attempt_id: int) -> tuple[int, float | None] | None:
        """``(exit code, exit time in monotonic_s seconds or None)`` from the exit file, if any."""
        try:
            parts = self.exit_path(attempt_id).read_text().split()
            return int(parts[0]), float(parts[1]) if len(parts) > 1 else None
        except (OSError, ValueError, IndexError):
            return None

    def delete(self, attempt_id: int) -> None:
        """Remove the record, log and exit file of an attempt (missing files are fine)."""
        for suffix in ("json", "log", "exit"):
            self._path(attempt_id, suffix).unlink(missing_ok=True)
