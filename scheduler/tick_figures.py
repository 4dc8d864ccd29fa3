"""The budget figures each tick decided with, cached for the why-pending numbers (issue 15).

A pending ``fair_share`` or ``protected_work`` workload shows both sides of the comparison in
numbers, from the one standing (:func:`scheduler.policy.figures.budget_figures`, issue 13).
Computing that standing per request loads the cluster's snapshot: 30–40 ms of CPU at 64 hosts
and 1,000 pending, a fifth of the details a lab reads. The tick has just loaded that snapshot and
decided the reason on it, so it caches ``budget_figures`` of its snapshot with its instant, after
its commit (the numbers appear with the reasons they explain), in the default cache (Redis, shared
by every process, whenever ``REDIS_URL`` is set). A detail reads them in one cache read.

A detail that finds none — no tick yet, a cache that lost them or that the ticking process does
not share (``manage.py run_tick`` without Redis), a tick older than the readiness probe's limit
(``FAIRWAY_READYZ_TICK_INTERVALS`` × ``FAIRWAY_TICK_INTERVAL_S``: the clock has stopped) —
computes the standing at its own instant with the same function (:func:`figures_now`, the oracle
``tests/api/test_web_tier.py`` compares the cached figures with).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from scheduler.health import tick_intervals
from scheduler.policy.figures import BudgetFigures, budget_figures
from scheduler.policy.types import Decisions, Snapshot
from scheduler.snapshot import load_snapshot

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StandingFigures:
    """Every budget's figures on one cluster at instant ``at``, by budget key (its pk as text)."""

    cluster_id: int
    at: datetime
    figures: dict[str, BudgetFigures]


def _schema() -> str:
    """The cached value's shape: a deploy that changes a field reads none of the old pickles."""
    names = [f.name for cls in (StandingFigures, BudgetFigures) for f in dataclasses.fields(cls)]
    return hashlib.sha256(" ".join(names).encode()).hexdigest()[:8]


def cache_key(cluster_id: int) -> str:
    return f"fairway:tick-figures:{_SCHEMA}:{cluster_id}"


def shows_numbers(detail: Mapping[str, object]) -> bool:
    """Whether a pending reason's ``detail`` compares two budgets, so that its explanation shows
    the standing's numbers (``reports._numbers``) and reads these figures."""
    return detail.get("budget_key") is not None and detail.get("rival_key") is not None


def max_age_s() -> float:
    """Seconds a tick's figures are shown for: the readiness probe's "ticks are running" limit."""
    return tick_intervals() * float(settings.FAIRWAY["TICK_INTERVAL_S"])


_SCHEMA = _schema()


def remember_on_commit(cluster_id: int, snapshot: Snapshot, decisions: Decisions, now: datetime) -> None:
    """After the tick's commit, cache ``budget_figures(snapshot)`` as the cluster's figures at
    ``now``, when some pending workload's reason shows numbers (else no detail reads them: the
    tick does no work for nobody). A cache error is logged, never raised: the tick has committed,
    and a detail without cached figures computes them."""
    if not any(shows_numbers(info.detail) for info in decisions.pending.values()):
        return

    def remember() -> None:
        standing = StandingFigures(cluster_id, now, budget_figures(snapshot))
        cache.set(cache_key(cluster_id), standing, timeout=max(1, int(max_age_s()) + 1))

    transaction.on_commit(remember, robust=True)


def figures_now(cluster_id: int, now: datetime) -> StandingFigures:
    """The standing computed at ``now`` from a fresh snapshot (a fixed number of queries): the
    slow path, and the oracle of the cached one."""
    snap, _index = load_snapshot(cluster_id, now, with_cap_records=False)  # nothing simulated
    return StandingFigures(cluster_id, now, budget_figures(snap))


def standing_figures(cluster_id: int, now: datetime) -> StandingFigures:
    """The figures of the cluster's last tick when it ran within :func:`max_age_s` of ``now``
    (one cache read, no query), else :func:`figures_now`."""
    try:
        cached = cache.get(cache_key(cluster_id))
    except Exception:  # a cache outage costs the slow path, not the answer
        logger.warning("tick figures: cache read failed", exc_info=True)
        cached = None
    if (
        isinstance(cached, StandingFigures)
        and cached.cluster_id == cluster_id
        and abs((now - cached.at).total_seconds()) <= max_age_s()
    ):
        return cached
    return figures_now(cluster_id, now)
