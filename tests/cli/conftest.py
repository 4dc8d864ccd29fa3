"""The CLI tests' shared fixtures: the wait's fake clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fairway_cli import waiting


class FakeTime:
    """``fairway_cli.waiting``'s ``time``: ``sleep`` advances ``monotonic`` and runs the next scripted
    step, so no test sleeps; ``sleeps`` are the pauses taken, ``now`` the clock (from 1000.0)."""

    def __init__(self, *steps: Callable[[], None]) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.steps = list(steps)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.steps:
            self.steps.pop(0)()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeTime]:
    """``clock(*steps)``: the wait's clock is a :class:`FakeTime` running ``steps``, one per pause
    (a step may raise: ``KeyboardInterrupt`` is a Ctrl-C during that pause)."""

    def install(*steps: Callable[[], None]) -> FakeTime:
        fake = FakeTime(*steps)
        monkeypatch.setattr(waiting, "time", fake)
        return fake

    return install
