"""The web processes' ASGI application with ``bench/agents_load.py``'s heartbeat timers (its
``--layout`` mode): the Procfile's web line runs this instead of ``config.asgi:application``;
each web process writes its timings to ``$BENCH_TIMING_DIR/<pid>.json``. A bench instrument.

With ``BENCH_PROFILE=AFTER:SECONDS`` each web process also profiles its event-loop thread
(``cProfile``) from AFTER seconds after start for SECONDS, into ``$BENCH_TIMING_DIR/<pid>.prof``
(``agents_load.py --profile AFTER:SECONDS``). With ``BENCH_SAMPLE=AFTER:SECONDS`` it samples the
event-loop thread's Python stack every millisecond of CPU instead (SIGPROF: no per-call cost, so
call-heavy code is not inflated as under cProfile) and writes the counts of each function, on the
stack and at its top, to ``$BENCH_TIMING_DIR/<pid>.samples.json`` (``agents_load.py --sample``)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

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


def _start_sampling(after: float, seconds: float, out: str) -> None:
    """SIGPROF every millisecond of the process's CPU time; the handler, which runs on the main
    thread (the event loop's) between two bytecodes, counts the functions on its stack. A tick
    spent by another thread while the loop sleeps is counted where the loop wakes up."""
    import collections
    import json
    import signal

    top: collections.Counter[str] = collections.Counter()
    on_stack: collections.Counter[str] = collections.Counter()
    count = [0]

    def sample(_signum: int, frame: Any) -> None:
        names = []
        while frame is not None:
            code = frame.f_code
            names.append(f"{code.co_filename.rsplit('site-packages/', 1)[-1]}:{code.co_name}")
            frame = frame.f_back
        count[0] += 1
        if names:
            top[names[0]] += 1
            on_stack.update(set(names))

    def stop() -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        with open(out, "w") as f:
            json.dump({"samples": count[0], "top": top.most_common(80), "on_stack": on_stack.most_common(200)}, f)

    signal.signal(signal.SIGPROF, sample)
    threading.Timer(after, signal.setitimer, (signal.ITIMER_PROF, 0.001, 0.001)).start()
    threading.Timer(after + seconds, stop).start()


if os.environ.get("BENCH_SAMPLE"):
    _after, _seconds = (float(x) for x in os.environ["BENCH_SAMPLE"].split(":"))
    _start_sampling(_after, _seconds, os.path.join(os.environ["BENCH_TIMING_DIR"], f"{os.getpid()}.samples.json"))

if os.environ.get("BENCH_PROFILE"):
    _after, _seconds = (float(x) for x in os.environ["BENCH_PROFILE"].split(":"))
    threading.Thread(
        target=_profile_loop_thread,
        args=(_after, _seconds, os.path.join(os.environ["BENCH_TIMING_DIR"], f"{os.getpid()}.prof")),
        daemon=True,
    ).start()

__all__ = ["application"]
