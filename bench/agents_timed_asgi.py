"""The web processes' ASGI application with ``bench/agents_load.py``'s heartbeat timers (its
``--layout`` mode): the Procfile's web line runs this instead of ``config.asgi:application``;
each web process writes its timings to ``$BENCH_TIMING_DIR/<pid>.json``. A bench instrument.

With ``BENCH_PROFILE=AFTER:SECONDS`` each web process also profiles its event-loop thread
(``cProfile``) from AFTER seconds after start for SECONDS, into ``$BENCH_TIMING_DIR/<pid>.prof``
(``agents_load.py --profile AFTER:SECONDS``)."""

from __future__ import annotations

import os
import threading
import time

from bench.agents_load import install_timers
from config.asgi import application  # sets Django up

install_timers(os.path.join(os.environ["BENCH_TIMING_DIR"], f"{os.getpid()}.json"))


def _profile_loop_thread(after: float, seconds: float, out: str) -> None:
    import cProfile

    from scheduler import gateway

    profile = cProfile.Profile()
    time.sleep(after)
    loop = gateway._server_loop  # noqa: SLF001 -- a bench instrument
    if loop is None:
        return
    loop.call_soon_threadsafe(profile.enable)
    time.sleep(seconds)
    done = threading.Event()

    def stop() -> None:
        profile.disable()
        profile.dump_stats(out)
        done.set()

    loop.call_soon_threadsafe(stop)
    done.wait(30)


if os.environ.get("BENCH_PROFILE"):
    _after, _seconds = (float(x) for x in os.environ["BENCH_PROFILE"].split(":"))
    threading.Thread(
        target=_profile_loop_thread,
        args=(_after, _seconds, os.path.join(os.environ["BENCH_TIMING_DIR"], f"{os.getpid()}.prof")),
        daemon=True,
    ).start()

__all__ = ["application"]
