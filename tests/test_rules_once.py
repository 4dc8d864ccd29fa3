"""Rules stated once (STYLE.md: the policy is the one statement of a rule): every surface that
needs one of these rules calls its single definition, and gives the same answer."""

from __future__ import annotations

import re
from pathlib import Path

from agent import protocol
from scheduler import lifecycle
from scheduler.sim import engine

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    p
    for top in ("accounts", "agent", "bench", "budgets", "config", "fairway_cli", "scheduler", "web")
    for p in (ROOT / top).rglob("*.py")
]


def _defining(pattern: str) -> list[str]:
    rx = re.compile(pattern, re.MULTILINE)
    return sorted(str(p.relative_to(ROOT)) for p in SOURCES if rx.search(p.read_text()))


# --- fatal XIDs (DESIGN.md §4): agent/protocol.py, which the server imports (agent/ never imports Django)


def test_fatal_xids_have_one_home_the_agent_protocol() -> None:
    assert _defining(r"^FATAL_XIDS\b.*=") == ["agent/protocol.py"]
    assert _defining(r"frozenset\(\{48, 63") == ["agent/protocol.py"]


def test_server_and_simulator_use_the_protocols_fatal_xids() -> None:
    assert lifecycle.FATAL_XIDS is protocol.FATAL_XIDS
    assert engine.FATAL_XIDS is protocol.FATAL_XIDS
