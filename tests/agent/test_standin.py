"""The stand-in trainer (``agent.standin``) the demo and the agent tests run."""

from __future__ import annotations

import io
import os
import signal
import sys

import pytest

from agent import standin


def test_a_sigterm_arriving_during_a_print_still_exits_143(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler printed its line itself: a SIGTERM arriving while the program was inside a
    print re-entered stdout's buffer (``RuntimeError: reentrant call``) and the stand-in exited 1,
    not 143 (a fresh clone's suite, once, after the command's output became a pipe: iso31). The
    signal now ends the loop and the line is printed there."""

    class Raw(io.RawIOBase):
        fired = False

        def writable(self) -> bool:
            return True

        def write(self, b: bytes) -> int:  # type: ignore[override]
            if not Raw.fired:  # the first line: the signal arrives with stdout's buffer held
                Raw.fired = True
                os.kill(os.getpid(), signal.SIGTERM)
                sum(range(10))  # bytecodes: the handler runs here
            return len(b)

    out = io.TextIOWrapper(io.BufferedWriter(Raw()), line_buffering=True)
    monkeypatch.setattr(sys, "stdout", out)
    before = signal.getsignal(signal.SIGTERM)
    try:
        code = standin.main(["--duration", "5"])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert Raw.fired and code == standin.EXIT_SIGTERM
