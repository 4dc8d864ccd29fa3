"""``manage.py web_preflight``: run by every launcher of the web process before uvicorn (the
Procfile, the systemd unit's ``ExecStartPre``, the image's entry point).

It exits 1 with the one line the web process would refuse with (production without Redis or on
SQLite: ``scheduler/management/production.py``), silently 0 otherwise; a malformed setting stops it
in ``manage.py`` already (status 2, one line). ops48: uvicorn with ``--workers N`` imports
``config.asgi`` in its worker processes only, and its supervisor starts each refused worker again,
for ever: the refusal came once per second per worker, the parent never exited.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from scheduler.management.production import refuse_without_shared_services

WEB_PROCESS = "the web process (config.asgi)"
"""The process the refusal names, the same in ``config.asgi``."""


class Command(BaseCommand):
    help = "Refuse (exit 1, one line) where the web process would: production without Redis or on SQLite."
    requires_system_checks: list[str] = []  # one line or none: the launcher's next step is uvicorn

    def handle(self, *args: Any, **opts: Any) -> None:
        refuse_without_shared_services(WEB_PROCESS)
