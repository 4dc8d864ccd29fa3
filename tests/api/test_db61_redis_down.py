"""db61: Redis going away in the middle of a request (a restart; simulated by a port where nothing
listens). A submission committed, then its tick request (``scheduler.tasks.request_tick``, sent
with the request's other Redis writes once the response is made: ``config.redis_trip``) failed,
and the 201 became a 500 with a traceback: a client read a refused submission and submitted it
again. The answer stays the one made, one warning line says the tick was not asked for (the
clock asks every cluster at its next beat)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler import histograms, tasks
from scheduler.models import Workload

DEAD_REDIS = "redis://127.0.0.1:9/0"  # port 9: nothing listens (as tests/api/test_brk59_exec_api.py)


@pytest.fixture
def redis_gone(transactional_db: None, settings: Any, cluster: Any) -> Iterator[None]:
    """The tick's Redis client on a port where nothing listens (the commit's callbacks run: the
    tick is asked for at the commit, as in production)."""
    before = settings.REDIS_URL
    tasks.reset_debounce([cluster.pk])
    histograms.reset()
    settings.REDIS_URL = DEAD_REDIS
    tasks._redis.cache_clear()
    try:
        yield
    finally:
        settings.REDIS_URL = before
        tasks._redis.cache_clear()
        tasks.reset_debounce([cluster.pk])


def test_a_submission_whose_tick_request_fails_is_still_answered_201(redis_gone, researcher_client, submission, caplog):
    with caplog.at_level(logging.INFO):
        answer = researcher_client.post("/api/v1/workloads/", submission(), format="json")
    assert answer.status_code == 201, answer.content
    assert Workload.objects.filter(pk=answer.json()["id"]).exists()
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.exc_info is None for r in warned), [r.getMessage() for r in warned]  # lines, no traceback
    tick = [r.getMessage() for r in warned if "tick" in r.getMessage()]
    assert len(tick) == 1, [r.getMessage() for r in warned]
    assert "POST /api/v1/workloads/" in tick[0] and "Redis" in tick[0] and "the clock asks again" in tick[0], tick
