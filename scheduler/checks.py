"""System checks of the scheduler app (``manage.py check``; ``--deploy`` for the production ones)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=True)
def metrics_token_set(app_configs: Any, **_kwargs: Any) -> list[checks.CheckMessage]:
    """``/metrics`` answers anyone without ``FAIRWAY_METRICS_TOKEN`` (cluster names, queues, budgets)."""
    if not getattr(settings, "PRODUCTION", False) or getattr(settings, "FAIRWAY_METRICS_TOKEN", ""):
        return []
    return [
        checks.Warning(
            "FAIRWAY_METRICS_TOKEN is not set: /metrics (cluster names, queue lengths, budget figures) "
            "answers anyone who reaches a web process.",
            hint="Set FAIRWAY_METRICS_TOKEN to a random token; Prometheus then sends "
            "`Authorization: Bearer <token>` (docs/deploy.md, section 3).",
            id="scheduler.W001",
        )
    ]
