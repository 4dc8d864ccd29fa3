"""try51: ``fairway exec`` on a host installed by the install script answered a traceback,
``ModuleNotFoundError: No module named 'warnings'`` from ``os.execvpe``, and exit 1: the exec
wrapper drops to the owner's identity, then ``os.execvpe`` imports ``warnings`` (its
``get_exec_path``), which the owner may not read where the agent's Python lives under a 0700
directory (pyenv under ``/root``). The tests' virtualenv hid it: its setuptools ``.pth`` imports
``warnings`` at startup, the agent's own virtualenv none. Here the wrapper runs as that one does,
without ``site`` (``-S``: no ``.pth``), and imports what it needs before it drops its identity."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from agent_testkit import MARKERS, needs_mount_ns, needs_root, owner_isolation, run_async, runtime, spec, wait_log

from agent.runtime import process

pytestmark = [pytest.mark.timeout(60), needs_root, needs_mount_ns]


def test_exec_runs_the_command_with_an_interpreter_that_preloads_nothing(
    open_state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = tmp_path / "python-bare"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    os.chmod(bare, 0o755)  # noqa: S103 -- the agent's user runs it
    monkeypatch.setattr(process.sys, "executable", str(bare))

    async def scenario() -> None:
        rt, _exits = runtime(open_state, owner_isolation())
        await rt.start(spec(1, ["sh", "-c", f"echo up; sleep {MARKERS[0]}"], owner="ex-carol"))
        await wait_log(rt, 1, "up")
        got = await rt.exec(1, ["sh", "-c", "echo hi; id -u"], 10, 4096)  # by PATH: os.execvpe looks it up
        assert got.exit_code == 0, got
        assert got.stdout.decode().splitlines()[0] == "hi" and b"Traceback" not in got.stderr
        await rt.stop(1, 1)

    run_async(scenario())
