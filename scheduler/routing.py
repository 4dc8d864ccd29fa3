"""Websocket routes (config/asgi.py mounts them)."""

from __future__ import annotations

from django.urls import path

from scheduler.consumers import AgentConsumer
from scheduler.exec_session import ExecSessionConsumer
from scheduler.port_forward import PortForwardConsumer

websocket_urlpatterns = [
    path("ws/agent/", AgentConsumer.as_asgi()),
    # interactive sessions in one's running attempts (fairway exec -it): API token auth
    path("ws/exec/", ExecSessionConsumer.as_asgi()),
    # one forwarded TCP connection to a port in one's running attempt (fairway port-forward)
    path("ws/port-forward/", PortForwardConsumer.as_asgi()),
]
