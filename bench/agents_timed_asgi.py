"""The web processes' ASGI application with ``bench/agents_load.py``'s heartbeat timers (its
``--layout`` mode): the Procfile's web line runs this instead of ``config.asgi:application``;
each web process writes its timings to ``$BENCH_TIMING_DIR/<pid>.json``. A bench instrument."""

from __future__ import annotations

import os

from bench.agents_load import install_timers
from config.asgi import application  # sets Django up

install_timers(os.path.join(os.environ["BENCH_TIMING_DIR"], f"{os.getpid()}.json"))

__all__ = ["application"]
