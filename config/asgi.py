"""ASGI entry point: Django over HTTP, the agent gateway over websockets (DESIGN.md §2, §7).

The agent route has no ``AllowedHostsOriginValidator``: agents are not browsers
and authenticate with their host token (``Authorization: Bearer``).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Django must be set up before the routing (and with it the models) is imported.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from scheduler.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
