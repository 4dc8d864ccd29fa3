"""Websocket routes (config/asgi.py mounts them)."""

from __future__ import annotations

from django.urls import path

from scheduler.consumers import AgentConsumer
from scheduler.exec_session import ExecSessionConsumer

websocket_urlpatterns = [
    path("ws/agent/", AgentConsumer.as_asgi()),
    # interactive sessions in one's running attempts (fairway exec -it): API token auth
    path("ws/exec/", ExecSessionConsumer.as_asgi()),
]
