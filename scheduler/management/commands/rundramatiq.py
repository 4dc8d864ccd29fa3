"""``manage.py rundramatiq``: django_dramatiq's command, refused in production without Redis or on SQLite.

``scheduler`` is listed before ``django_dramatiq`` in INSTALLED_APPS so that this command wins
(scheduler/management/production.py says why it refuses). Every line it and the dramatiq it
starts write is in Fairway's log format (left44): its own ("Discovered tasks module: …") are log
lines of ``scheduler.worker``, and it execs dramatiq through ``scheduler/management/dramatiq.sh``,
whose main process logs in that format too (:mod:`scheduler.dramatiq_main`).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import OutputWrapper
from django_dramatiq.management.commands.rundramatiq import Command as DramatiqCommand

from scheduler.management.production import embedded_warning, refuse_without_shared_services

logger = logging.getLogger("scheduler.worker")

DRAMATIQ = Path(__file__).resolve().parents[1] / "dramatiq.sh"


class _LogLines:
    """A text stream whose every non-empty line is an INFO line of :data:`logger`."""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                logger.info("%s", line.strip().removeprefix("* "))
        return len(text)

    def flush(self) -> None:
        pass


class Command(DramatiqCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        refuse_without_shared_services("rundramatiq (the worker)")
        if warning := embedded_warning("worker"):
            logger.warning("%s", warning)
        self.stdout = OutputWrapper(_LogLines())  # type: ignore[arg-type] -- a write/flush stream
        os.environ["_FAIRWAY_DRAMATIQ_PYTHON"] = sys.executable
        super().handle(*args, **options)

    def _resolve_executable(self, exec_name: str) -> str:
        """dramatiq's command line through :data:`DRAMATIQ` (the gevent one as django_dramatiq finds it)."""
        return str(DRAMATIQ) if exec_name == "dramatiq" else super()._resolve_executable(exec_name)
