"""Websocket routes (config/asgi.py mounts them)."""

from __future__ import annotations

from django.urls import path

from scheduler.consumers import AgentConsumer

websocket_urlpatterns = [
    path("ws/agent/", AgentConsumer.as_asgi()),
]
