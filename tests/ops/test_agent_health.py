"""The agent's own health: its state directory's health.json, ``fairway-agent health``, and the
HEALTH column of ``fairway hosts``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent import AGENT_VERSION
from agent import health as agent_health
from agent.__main__ import main as agent_main
from fairway_cli.cli import host_health

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

from agent_testkit import FakeServer, make_agent, run_async, running  # noqa: E402 -- needs the path above


def test_the_running_agent_keeps_its_health_file(tmp_path, capsys):
    state = tmp_path / "state"
    state.mkdir()

    async def scenario() -> None:
        async with FakeServer(heartbeat_s=0.2) as server, running(make_agent(server.url, state)):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                data = agent_health.read(state)
                if data and data.get("last_heartbeat_at"):
                    break
                await asyncio.sleep(0.05)
            data = agent_health.read(state)
            assert data is not None
            assert (data["version"], data["connected"], data["running"], data["gpus"]) == (AGENT_VERSION, True, True, 8)
            assert data["heartbeat_s"] == 0.2 and data["welcomed_at"] is not None
            assert agent_health.problems(data) == []
            assert agent_main(["health", "--state-dir", str(state)]) == 0
            assert capsys.readouterr().out.startswith("healthy\n")

    run_async(scenario())
    data = agent_health.read(state)
    assert data is not None and data["running"] is False and data["connected"] is False
    assert agent_main(["health", "--state-dir", str(state), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["healthy"] is False and out["problems"] == ["the agent is not running"]


def test_health_problems():
    now = time.time()
    base = {"running": True, "pid": os.getpid(), "connected": True, "heartbeat_s": 5.0, "server": "ws://s/ws/agent/"}
    assert agent_health.problems(None) == ["no health file: the agent never ran with this state directory"]
    assert agent_health.problems({**base, "last_heartbeat_at": now - 1}, now) == []
    assert agent_health.problems({**base, "last_heartbeat_at": now - 16}, now) == ["no heartbeat sent within 15 s"]
    assert agent_health.problems({**base, "connected_since": now - 1, "last_heartbeat_at": None}, now) == []
    lost = {**base, "connected": False, "last_disconnect": "close code 1006"}
    assert agent_health.problems(lost, now) == ["not connected to ws://s/ws/agent/ (last disconnect: close code 1006)"]
    assert agent_health.problems({**base, "pid": 2**22 + 12345}, now) == ["the agent is not running"]
    sick = {**base, "last_heartbeat_at": now, "gpu_sampling_ok": False, "unhealthy_gpus": 2}
    assert agent_health.problems(sick, now) == ["GPU sampling fails"]


def test_fairway_hosts_health_column():
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    fresh = (now - timedelta(seconds=4)).isoformat()
    gpus = [{"health": "healthy"}, {"health": "unhealthy"}]
    assert host_health({"state": "active", "last_heartbeat": fresh, "gpus": gpus[:1]}, now) == "ok"
    assert host_health({"state": "active", "last_heartbeat": fresh, "gpus": gpus}, now) == "1 GPU unhealthy"
    old = (now - timedelta(minutes=3)).isoformat()
    assert host_health({"state": "drained", "last_heartbeat": old, "gpus": []}, now) == "stale 180s"
    assert host_health({"state": "offline", "last_heartbeat": old, "gpus": []}, now) == "offline"
    assert host_health({"state": "active", "last_heartbeat": None, "gpus": []}, now) == "never connected"
