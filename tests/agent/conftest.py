"""Fixtures of the agent tests (pure agent: no Django needed, fine with the django plugin on)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.runtime.process import ProcessRuntime

# The helpers live in a uniquely named module next to this file; putting the directory on the
# path keeps them importable under any pytest import mode.
sys.path.insert(0, str(Path(__file__).parent))

from agent_testkit import kill_leftovers, kill_markers  # noqa: E402 -- needs the path above


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh agent state directory; attempts left running in it are killed afterwards."""
    path = tmp_path / "state"
    path.mkdir()
    yield path
    kill_leftovers(path)


@pytest.fixture
def open_state() -> Iterator[Path]:
    """A state directory whose parents other users may traverse (as /var/lib/fairway-agent)."""
    base = Path(tempfile.mkdtemp(prefix="fw-iso-", dir="/tmp"))
    os.chmod(base, 0o755)  # noqa: S103 -- as /var/lib: others may traverse
    state = base / "state"
    state.mkdir()
    try:
        yield state
    finally:
        kill_markers()
        kill_leftovers(state)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def reap_attempt_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every attempt process a test's :class:`ProcessRuntime` started is waited for at the test's
    end (killed first when still running; autouse: torn down after ``state_dir``'s kill).

    An attempt outlives its agent by design (a test stops the agent with it running, or a second
    agent stops it by its pid), so the first runtime's ``Popen`` was never waited: collected later,
    in whatever test the garbage collector ran in, it warned ``ResourceWarning: subprocess N is
    still running``, in CI as an unraisable exception of tests/ops/test_static_asgi.py (whose
    warnings are errors) on the worker that had run tests/agent/test_agent_client.py (db61)."""
    made: list[ProcessRuntime] = []
    init = ProcessRuntime.__init__

    def tracked(self: ProcessRuntime, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(ProcessRuntime, "__init__", tracked)
    yield
    for runtime in made:
        for proc in list(runtime._procs.values()):  # noqa: SLF001 -- the runtime's own handles
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
