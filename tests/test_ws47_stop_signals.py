"""ws47: the gateway's SIGINT chain (``scheduler.gateway._chain_stop_signals``) kept a closed loop's handler.

``asyncio.run`` installs its own SIGINT handler for its run (one that cancels its main task) and puts
Python's default back after, but only when its own is still the one installed. A hub made on its
loop chained that handler, so it stayed installed after the loop closed: every later SIGINT of the
process called the closed run's handler, which raises ``KeyboardInterrupt`` wherever the main thread
is (in a finalizer or a callback Python prints ``Exception ignored ... KeyboardInterrupt``), and no
later ``asyncio.run`` installed its own (one saw the ``KeyboardInterrupt`` instead of its task
cancelled). Now the chain is undone when the run's main task ends (``asyncio.run`` then puts the
default back), and a handler of a closed loop is never called: Python's default is, in its place.
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import Iterator

import pytest

from scheduler import gateway


@pytest.fixture
def fresh_sigint() -> Iterator[None]:
    """SIGINT as at a process's start (Python's default: ``asyncio.run`` installs its own over it)."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_later_run_gets_its_own_sigint_not_the_closed_runs(fresh_sigint) -> None:
    async def serve() -> None:
        gateway.hub()  # made on this loop: chains SIGINT over asyncio.run's handler of this run
        await asyncio.sleep(0)

    asyncio.run(serve())
    seen: list[tuple[str, bool]] = []

    async def interrupted() -> None:
        found = gateway.hub()
        try:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C
            await asyncio.sleep(5)
        except asyncio.CancelledError:  # this run's handler: its task cancelled, then KeyboardInterrupt
            seen.append(("cancelled", found.stopping.is_set()))
            raise
        except KeyboardInterrupt:  # the closed run's handler (its task long done) raised it here
            seen.append(("raised in place", found.stopping.is_set()))
            raise

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(interrupted())
    assert seen == [("cancelled", True)]  # was [("raised in place", False)]: the closed loop's handler ran
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back, as without a hub


@pytest.mark.parametrize("closed", ["before", "after"], ids=["closed-before-chaining", "closed-after-chaining"])
def test_a_closed_loops_handler_is_never_called(fresh_sigint, closed) -> None:
    """A handler of a loop that closed, met at chain time or closed once chained (its run's task
    never ended): the hubs are stopped, then Python's default handler runs in its place, never the
    closed one (whose task is long done, or whose loop is gone: it raised where the main thread was)."""
    runner = asyncio.Runner()
    task = runner.get_loop().create_future()  # the run's main task, never ended
    stale = functools.partial(runner._on_sigint, main_task=task)  # asyncio.run's handler of that run
    if closed == "before":
        runner.close()
    signal.signal(signal.SIGINT, stale)
    gateway._chain_stop_signals()
    if closed == "after":
        runner.close()
    chained = signal.getsignal(signal.SIGINT)
    assert getattr(chained, "stops_agent_hubs", False)
    with pytest.raises(KeyboardInterrupt):
        chained(signal.SIGINT, None)  # type: ignore[operator]
    assert runner._interrupt_count == 0  # the closed run's handler was not called
