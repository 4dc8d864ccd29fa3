"""Fixtures of the agent tests (pure agent: no Django needed, fine with the django plugin on)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers live in a uniquely named module next to this file; putting the directory on the
# path keeps them importable under any pytest import mode.
sys.path.insert(0, str(Path(__file__).parent))

from agent_testkit import kill_leftovers  # noqa: E402 -- needs the path above


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh agent state directory; attempts left running in it are killed afterwards."""
    path = tmp_path / "state"
    path.mkdir()
    yield path
    kill_leftovers(path)
