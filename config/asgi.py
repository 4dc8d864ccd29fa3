"""ASGI entry point: Django over HTTP, the agent gateway over websockets (DESIGN.md §2, §7).

HTTP goes through ``config.overload``: at most ``FAIRWAY_WEB_MAX_IN_FLIGHT`` requests per
process (beyond: 503 + ``Retry-After``), each run in one thread hop (a synchronous middleware
chain; ``async def`` views through Django's stock handler). The agent route has no
``AllowedHostsOriginValidator``: agents are not browsers and authenticate with their host token
(``Authorization: Bearer``). Once built, the process's objects are frozen out of the cyclic garbage
collector's full collections (``config.heap``). In production without Redis or on SQLite the
process exits (status 1) with one line naming the variable (``scheduler/management/production.py``:
its tick requests and notifications would go to its own memory, where nothing reads them); the
launchers ask ``manage.py web_preflight`` first, as uvicorn's supervisor restarts refused workers.
"""

from __future__ import annotations

import os
import sys

import django
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Django must be set up before the routing (and with it the models) is imported. A malformed or
# missing setting stops the process with one line naming it, as manage.py does (ops48: uvicorn
# printed the import's traceback first, 40 lines through its own and Django's internals).
try:
    django.setup(set_prefix=False)
except ImproperlyConfigured as exc:
    sys.stderr.write(f"config.asgi: configuration: {exc}\n")
    raise SystemExit(2) from None

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from scheduler.management.commands.web_preflight import WEB_PROCESS  # noqa: E402
from scheduler.management.production import refusal  # noqa: E402

if why := refusal(WEB_PROCESS):
    sys.stderr.write(f"config.asgi: {why}\n")
    raise SystemExit(1)

from config.heap import freeze_startup_objects  # noqa: E402
from config.overload import HttpDispatch, InFlightLimit  # noqa: E402
from scheduler.routing import websocket_urlpatterns  # noqa: E402

django_asgi_app = HttpDispatch()

application = ProtocolTypeRouter(
    {
        "http": InFlightLimit(django_asgi_app, settings.FAIRWAY_WEB_MAX_IN_FLIGHT),
        "websocket": URLRouter(websocket_urlpatterns),
    }
)

# Last: what the process has built so far lives as long as it does (config/heap.py).
freeze_startup_objects()
