"""The agent's own health, kept in its state directory (``<state_dir>/health.json``).

The running agent rewrites the file (atomically) when it connects, is welcomed, sends a heartbeat,
disconnects and stops; ``fairway-agent health --state-dir DIR`` reads it and exits 0 when the agent
is healthy: running (its pid alive), connected, and a heartbeat sent within three periods. Local
monitoring (a systemd timer, node exporter's textfile collector, a person on the host) can use
it without the server; the server's own view of the host is ``fairway hosts`` (state, agent
version, last heartbeat, health). Stdlib only, like the rest of the agent.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from agent import AGENT_VERSION
from agent.protocol import PROTOCOL_VERSION

FILE_NAME = "health.json"
STALE_PERIODS = 3.0
"""A heartbeat older than this many periods makes the agent unhealthy."""


class HealthFile:
    """Writes the running agent's health; every write replaces the whole file."""

    def __init__(self, state_dir: Path, *, server: str, host: str) -> None:
        self.path = Path(state_dir) / FILE_NAME
        self.data: dict[str, Any] = {
            "version": AGENT_VERSION,
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "host": host,
            "server": server,
            "started_at": time.time(),
            "running": True,
            "connected": False,
            "connected_since": None,
            "welcomed_at": None,
            "last_heartbeat_at": None,
            "heartbeat_s": None,
            "gpus": 0,
            "unhealthy_gpus": 0,
            "gpu_sampling_ok": True,
            "running_attempts": 0,
            "last_disconnect": None,
        }

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` and write the file; never raises (health must not stop the agent)."""
        self.data.update(fields)
        self.data["updated_at"] = time.time()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".health-", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.path)
        except OSError:
            pass


def read(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(state_dir) / FILE_NAME).read_text())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def problems(data: dict[str, Any] | None, now: float | None = None) -> list[str]:
    """Why the agent described by ``data`` is unhealthy (empty: healthy)."""
    if data is None:
        return ["no health file: the agent never ran with this state directory"]
    now = time.time() if now is None else now
    out = []
    if not data.get("running") or not _pid_alive(data.get("pid")):
        out.append("the agent is not running")
        return out
    if not data.get("connected"):
        out.append(f"not connected to {data.get('server')} (last disconnect: {data.get('last_disconnect') or '-'})")
    period = data.get("heartbeat_s") or 5.0
    last = data.get("last_heartbeat_at")
    if data.get("connected") and (last is None or now - last > STALE_PERIODS * period):
        since = data.get("connected_since") or now
        if last is not None or now - since > STALE_PERIODS * period:
            out.append("no heartbeat sent within " + f"{STALE_PERIODS * period:g} s")
    if not data.get("gpu_sampling_ok", True):
        out.append("GPU sampling fails")
    return out  # unhealthy GPUs are the server's to handle (it stops placing on them), not the agent's


def describe(data: dict[str, Any] | None, now: float | None = None) -> str:
    """A few lines for people: the verdict, then the facts."""
    found = problems(data, now)
    lines = ["healthy" if not found else "unhealthy: " + "; ".join(found)]
    if data:
        now = time.time() if now is None else now

        def ago(t: object) -> str:
            return f"{now - t:.0f} s ago" if isinstance(t, int | float) else "never"

        lines += [
            f"agent {data.get('version')} (protocol {data.get('protocol')}), pid {data.get('pid')},"
            f" host {data.get('host')}",
            f"server {data.get('server')}: {'connected' if data.get('connected') else 'not connected'},"
            f" welcomed {ago(data.get('welcomed_at'))}, last heartbeat {ago(data.get('last_heartbeat_at'))}",
            f"GPUs {data.get('gpus')} ({data.get('unhealthy_gpus')} unhealthy), attempts running"
            f" {data.get('running_attempts')}",
        ]
    return "\n".join(lines)
