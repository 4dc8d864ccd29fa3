"""Dramatiq middleware of Fairway's workers (``DRAMATIQ_BROKER["MIDDLEWARE"]``, config/settings.py)."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq

logger = logging.getLogger(__name__)


class ForgetEstimateMarkers(dramatiq.Middleware):
    """As a worker that consumes the estimates queue boots (the estimates process, ``serve
    --with-worker``), forget the "estimate pending" markers (``tasks.forget_estimate_markers``):
    estimates resume at the clock's next request, within one ``FAIRWAY_ESTIMATE_INTERVAL_S``
    (docs/deploy.md §4, "Restarting the estimates process")."""

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        from scheduler import tasks

        queues = getattr(worker, "consumer_whitelist", None)
        if queues and tasks.ESTIMATES_QUEUE not in queues:
            return
        try:
            forgotten = tasks.forget_estimate_markers()
        except Exception:  # Redis out at boot: the markers expire on their own (ESTIMATE_MARKER_TTL_S)
            logger.warning("estimates: could not forget the estimate markers at boot", exc_info=True)
            return
        if forgotten:
            logger.info("estimates: forgot %d estimate markers of the runs before this boot", forgotten)
