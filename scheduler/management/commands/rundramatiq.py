"""``manage.py rundramatiq``: django_dramatiq's command, refused in production without Redis or on SQLite.

``scheduler`` is listed before ``django_dramatiq`` in INSTALLED_APPS so that this command wins
(scheduler/management/production.py says why it refuses).
"""

from __future__ import annotations

from typing import Any

from django_dramatiq.management.commands.rundramatiq import Command as DramatiqCommand

from scheduler.management.production import refuse_without_shared_services


class Command(DramatiqCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        refuse_without_shared_services("rundramatiq (the worker)")
        super().handle(*args, **options)
