"""Prometheus histograms shared by every Fairway process, kept in Redis (docs/deploy.md §10).

The observations happen in several processes: tick durations in the dramatiq workers, submission
latency in the web processes that take the request, start latency and wait time in the web process
whose agent confirms the start. ``/metrics`` is scraped on any one web process. prometheus_client's
multiprocess mode only shares a directory on one machine (and needs cleaning at every restart),
so the bucket counts live in Redis instead: one hash per histogram, fields
``<labels>\\x1f<upper bound>`` (non-cumulative counts), ``<labels>\\x1fsum`` and
``<labels>\\x1fcount``, incremented atomically (``HINCRBY``/``HINCRBYFLOAT`` in one pipeline; in a
request, the one of its other Redis writes, ``config.redis_trip``). The collector
(:func:`families`) reads them back as cumulative ``HistogramMetricFamily``. Without
``REDIS_URL`` (the embedded single-process mode) they live in this process.

A flushed Redis resets the histograms, which Prometheus handles like a process restart (a counter
reset). Recording never raises: a metric is not worth failing a tick or a start for.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from config import redis_trip

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
SEP = "\x1f"
KEY_PREFIX = "fairway:hist:"


@dataclass(frozen=True, slots=True)
class Histogram:
    name: str
    documentation: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...]

    @property
    def key(self) -> str:
        return KEY_PREFIX + self.name


_MINUTE, _HOUR = 60.0, 3600.0

TICK_DURATION = Histogram(
    "fairway_tick_duration_seconds",
    "Duration of the scheduling ticks that ran (seconds)",
    ("cluster",),
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
SUBMISSION_DURATION = Histogram(
    "fairway_submission_duration_seconds",
    "Server-side time to accept a workload submission, validation and commit (seconds)",
    ("cluster",),
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
START_LATENCY = Histogram(
    "fairway_start_latency_seconds",
    "From the scheduler's placement of an attempt to the agent's confirmation that it started (seconds)",
    ("cluster",),
    (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, _MINUTE, 2 * _MINUTE, 5 * _MINUTE, 10 * _MINUTE),
)
WAIT_TIME = Histogram(
    "fairway_wait_duration_seconds",
    "Queue wait of a started attempt, per budget: from submission (or the end of the previous attempt, "
    "for a requeued workload) to the agent-confirmed start (seconds)",
    ("cluster", "budget"),
    (
        1.0,
        10.0,
        30.0,
        _MINUTE,
        5 * _MINUTE,
        15 * _MINUTE,
        30 * _MINUTE,
        _HOUR,
        2 * _HOUR,
        4 * _HOUR,
        8 * _HOUR,
        24 * _HOUR,
        3 * 24 * _HOUR,
    ),
)
ALL: tuple[Histogram, ...] = (TICK_DURATION, SUBMISSION_DURATION, START_LATENCY, WAIT_TIME)

_local: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_local_guard = threading.Lock()


def _client():  # noqa: ANN202 -- redis.Redis | None, imported lazily with the tasks module
    from scheduler.tasks import _redis

    return _redis()


def _bound(value: float, buckets: Sequence[float]) -> str:
    for upper in buckets:
        if value <= upper:
            return repr(float(upper))
    return "+Inf"


def _label_key(hist: Histogram, labels: Sequence[str]) -> str:
    if len(labels) != len(hist.labels):
        raise ValueError(f"{hist.name} takes labels {hist.labels}, got {tuple(labels)}")
    return SEP.join(str(v).replace(SEP, " ") for v in labels)


def observe(hist: Histogram, value: float, *labels: str) -> None:
    """Add one observation of ``value`` (seconds) to ``hist`` under ``labels``. Never raises."""
    observe_many([(hist, value, labels)])


def observe_many(observations: Sequence[tuple[Histogram, float, Sequence[str]]]) -> None:
    """:func:`observe` of each ``(hist, value, labels)``, in one Redis round trip. Never raises."""
    try:
        fields = []
        for hist, value, labels in observations:
            if not math.isfinite(value):
                continue
            value = max(0.0, float(value))
            lk = _label_key(hist, labels)
            fields.append((hist, f"{lk}{SEP}{_bound(value, hist.buckets)}", lk, value))
        if not fields:
            return
        client = _client()
        if client is not None:

            def add(pipe: Any) -> None:
                for hist, bucket, lk, value in fields:
                    pipe.hincrby(hist.key, bucket, 1)
                    pipe.hincrby(hist.key, f"{lk}{SEP}count", 1)
                    pipe.hincrbyfloat(hist.key, f"{lk}{SEP}sum", value)

            def then(results: list[Any]) -> None:
                failed = next((r for r in results if isinstance(r, Exception)), None)
                if failed is not None:
                    names = ", ".join(h.name for h, _v, _l in observations)
                    # one line: Redis unreachable (a restart) is said by the request's trip too (db61)
                    logger.warning("could not record %s: %s: %s", names, type(failed).__name__, failed)

            # In a request: with its other Redis writes, once its response is made (config.redis_trip).
            redis_trip.defer(client, add, then)
            return
        with _local_guard:
            for hist, bucket, lk, value in fields:
                series = _local[hist.name]
                series[bucket] += 1
                series[f"{lk}{SEP}count"] += 1
                series[f"{lk}{SEP}sum"] += value
    except Exception:  # a metric never fails the caller (Redis down, bad label)
        logger.warning("could not record %s", ", ".join(h.name for h, _v, _l in observations), exc_info=True)


def observe_on_commit(hist: Histogram, value: float, *labels: str) -> None:
    """:func:`observe` once the current transaction commits (nothing if it rolls back)."""
    from django.db import transaction

    transaction.on_commit(lambda: observe(hist, value, *labels))


def _raw(hist: Histogram) -> dict[str, float]:
    client = _client()
    if client is not None:
        return {k.decode(): float(v) for k, v in client.hgetall(hist.key).items()}
    with _local_guard:
        return dict(_local.get(hist.name, {}))


def reset() -> None:
    """Forget every observation (tests)."""
    client = _client()
    if client is not None:
        client.delete(*(h.key for h in ALL))
    with _local_guard:
        _local.clear()


def families(relabel: dict[str, dict[str, str]] | None = None) -> Iterator[HistogramMetricFamily]:
    """Every histogram as a cumulative ``HistogramMetricFamily`` (all series, every bucket).

    ``relabel`` maps a label name to {stored value → exported value} (cluster ids → names).
    """
    relabel = relabel or {}
    for hist in ALL:
        family = HistogramMetricFamily(hist.name, hist.documentation, labels=list(hist.labels))
        try:
            raw = _raw(hist)
        except Exception:
            logger.warning("could not read %s", hist.name, exc_info=True)
            raw = {}
        series: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
        for field, value in raw.items():
            *labels, suffix = field.split(SEP)
            if len(labels) != len(hist.labels):
                continue
            series[tuple(labels)][suffix] = value
        for labels, values in sorted(series.items()):
            shown = [relabel.get(name, {}).get(v, v) for name, v in zip(hist.labels, labels, strict=True)]
            cumulative, buckets = 0.0, []
            for upper in hist.buckets:
                cumulative += values.get(repr(float(upper)), 0.0)
                buckets.append((_le(upper), cumulative))
            cumulative += values.get("+Inf", 0.0)
            buckets.append(("+Inf", cumulative))
            family.add_metric(shown, buckets, values.get("sum", 0.0))
        yield family


def _le(upper: float) -> str:
    return floatToGoString(upper)


def timed(hist: Histogram, labels_of: Callable[[Any], Sequence[str] | None]) -> Callable[[F], F]:
    """Decorator: observe the wall time of each call that returns (labels from its result; None:
    the call is not observed, e.g. a submission's ``dry_run``, brk42: every quote was counted as a
    submission)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            result = fn(*args, **kwargs)
            try:
                labels = labels_of(result)
                if labels is not None:
                    observe(hist, time.perf_counter() - began, *labels)
            except Exception:
                logger.warning("could not record %s", hist.name, exc_info=True)
            return result

        return inner  # type: ignore[return-value]

    return wrap


def attempts_started(started: Sequence[tuple[Any, datetime, Any]]) -> None:
    """:func:`attempt_started` of many ``(attempt, confirmed start, its workload's locked fields)``
    (``scheduler.lifecycle.LockedWorkload``): the previous attempts' ends of the requeued ones in
    one query, every observation in one Redis round trip on commit. Never raises."""
    from django.db import transaction

    from scheduler.models import Attempt

    try:
        later = {a.workload_id for a, _at, _w in started if a.number > 1}
        ends: dict[tuple[int, int], Any] = {}
        if later:
            rows = Attempt.objects.filter(workload_id__in=later).values_list("workload_id", "number", "ended_at")
            ends = {(wid, number): ended for wid, number, ended in rows}
        observations = []
        for attempt, at, workload in started:
            pending_since = workload.submitted_at
            if attempt.number > 1:
                before = [n for (wid, n) in ends if wid == attempt.workload_id and n < attempt.number]
                pending_since = (ends[(attempt.workload_id, max(before))] if before else None) or pending_since
            cluster = str(workload.cluster_id)
            observations.append((START_LATENCY, (at - attempt.placed_at).total_seconds(), (cluster,)))
            observations.append((WAIT_TIME, (at - pending_since).total_seconds(), (cluster, str(workload.budget_id))))
        transaction.on_commit(lambda: observe_many(observations))
    except Exception:
        logger.warning("could not record the start of %d attempts", len(started), exc_info=True)


def attempt_started(
    attempt: Any,
    now: datetime,
    *,
    submitted_at: datetime | None = None,
    budget_id: int | None = None,
    cluster_id: int | None = None,
) -> None:
    """Start latency and wait time of ``attempt`` confirmed started at ``now`` (on commit, one
    Redis round trip for both).

    Called by ``scheduler.lifecycle.attempt_started`` inside its transaction, with its workload's
    ``submitted_at``, ``budget_id`` and ``cluster_id`` as it read them (else they are read here).
    Wait: from the workload's submission (first attempt) or the end of its previous attempt (a requeue).
    """
    from django.db import transaction

    from scheduler.models import Attempt, Workload

    try:
        if submitted_at is None or budget_id is None or cluster_id is None:
            submitted_at, budget_id, cluster_id = Workload.objects.values_list(
                "submitted_at", "budget_id", "cluster_id"
            ).get(pk=attempt.workload_id)
        pending_since = submitted_at
        if attempt.number > 1:
            previous = (
                Attempt.objects.filter(workload_id=attempt.workload_id, number__lt=attempt.number)
                .order_by("-number")
                .values_list("ended_at", flat=True)
                .first()
            )
            pending_since = previous or submitted_at
        observations = [
            (START_LATENCY, (now - attempt.placed_at).total_seconds(), (str(cluster_id),)),
            (WAIT_TIME, (now - pending_since).total_seconds(), (str(cluster_id), str(budget_id))),
        ]
        transaction.on_commit(lambda: observe_many(observations))
    except Exception:
        logger.warning("could not record the start of attempt %s", getattr(attempt, "pk", None), exc_info=True)
