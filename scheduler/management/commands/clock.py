"""``manage.py clock``: the clock in the foreground (production: exactly one per deployment, see docs/deploy.md)."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fairway_cli.args import positive_number
from scheduler.management.production import embedded_warning, refuse_without_shared_services

logger = logging.getLogger("scheduler.clock")  # the clock's own logger: its lines in Fairway's log format


class Command(BaseCommand):
    help = "Run the Fairway clock (tick requests, sweeps, hourly pyramid roll-up) until SIGINT/SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval", type=positive_number(), default=None, help="seconds between ticks (default setting)"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        refuse_without_shared_services("clock")
        if warning := embedded_warning("clock"):
            logger.warning("%s", warning)
        import scheduler.tasks  # noqa: F401 -- declares the actors on the broker
        from scheduler.clock import Clock

        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        clock = Clock(interval=opts["interval"]).start()
        logger.info("a tick of every cluster every %gs", clock.interval)
        done.wait()
        clock.stop()
        logger.info("stopped")
