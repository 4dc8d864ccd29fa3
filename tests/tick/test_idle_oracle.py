"""The idle rule against its slow oracle (scheduler/idle_reference.py, docs/jobs.md "Idle GPUs").

Random attempts on random GPUs with random minute samples: gaps, minutes nobody read (``null``),
means exactly at the threshold, a ``now`` on the edge of the period, attempts started in the
last minutes, starting / asked to stop / ended ones, several GPUs, and another attempt's samples
on the GPU before this one started. ``scheduler.idle.idle_attempts`` (which attempts, since when,
how long, how many GPUs) and ``scheduler.efficiency``'s idle share (its measured and idle
GPU-seconds: the same minute rule, ``idle.quiet_minute``; and its utilized GPU-seconds, each
minute's busy seconds: 60 s × its mean, bounded by the seconds held, busy46) must say what the
oracle says.

A bounded number of examples in the suite; ``FAIRWAY_IDLE_ORACLE_EXAMPLES=2000`` for a longer run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.test import override_settings
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from scheduler.efficiency import efficiency_of_attempts
from scheduler.idle import idle_attempts
from scheduler.idle_reference import efficiency_idle_reference, idle_reference
from scheduler.models import GPU, Attempt, AttemptGPU, GpuMinuteSample

EXAMPLES = int(os.environ.get("FAIRWAY_IDLE_ORACLE_EXAMPLES", "100"))
WINDOW = 24  # minutes of samples before the current one
CURRENT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # the current minute (never the wall clock)

# A minute of one GPU: None no row; () a row nobody read (null); else the utilizations its
# heartbeats read (integers, as NVML gives them: 0 and 1 average to 0.5, 0 and 2 to 1, at a threshold).
minute_kinds = st.one_of(
    st.none(),
    st.just(()),
    st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 60]), min_size=1, max_size=3).map(tuple),
)
# One GPU's minutes: quiet all along (or silent), with a few stretches of other minutes laid over.
series = st.tuples(
    st.sampled_from([(0,), (0,), (0,), (0, 1), None]),
    st.lists(st.tuples(st.integers(0, WINDOW), st.integers(1, 8), minute_kinds), max_size=3),
)


@dataclass(frozen=True)
class Run:
    gpus: frozenset[int]
    state: str  # running, starting, stopping, ended
    started_ago_s: int
    placed_lead_s: int


runs = st.builds(
    Run,
    gpus=st.frozensets(st.integers(0, 3), min_size=1, max_size=2),
    state=st.sampled_from(["running", "running", "running", "starting", "stopping", "ended"]),
    started_ago_s=st.one_of(st.integers(0, WINDOW * 60 + 120), st.integers(0, WINDOW + 2).map(lambda m: m * 60)),
    placed_lead_s=st.sampled_from([0, 1, 30, 90]),
)


@st.composite
def worlds(draw):
    return {
        "pct": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "after": draw(st.sampled_from([0, 60, 120, 300, 600])),
        "offset_s": draw(st.one_of(st.sampled_from([0, 1, 59]), st.integers(0, 59))),
        "gpus": draw(st.integers(1, 4)),
        "samples": [draw(series) for _ in range(4)],
        "runs": draw(st.lists(runs, min_size=1, max_size=4)),
    }


def _build(tw, world) -> None:
    host = tw.host("h1", world["gpus"])
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    rows = []
    for gpu, (fill, laid) in zip(gpus, world["samples"], strict=False):
        minutes = [fill] * (WINDOW + 1)  # minutes[i]: the minute i minutes after the window's start
        for first, length, kind in laid:
            for i in range(first, min(first + length, WINDOW + 1)):
                minutes[i] = kind
        for i, kind in enumerate(minutes):
            if kind is not None:
                rows.append(
                    GpuMinuteSample(
                        gpu=gpu,
                        minute=CURRENT - timedelta(minutes=WINDOW - i),
                        samples=max(1, len(kind)),
                        utilization_samples=len(kind),
                        utilization_sum=float(sum(kind)),
                    )
                )
    GpuMinuteSample.objects.bulk_create(rows)
    now = CURRENT + timedelta(seconds=world["offset_s"])
    held: set[int] = set()  # the GPUs an open attempt holds (one each)
    for run in world["runs"]:
        mine = [g for g in gpus if g.index in run.gpus]
        ended = run.state == "ended"
        if not mine or (not ended and held & {g.pk for g in mine}):
            continue
        started = now - timedelta(seconds=run.started_ago_s)
        workload = tw.workload(gpus=len(mine))
        attempt = Attempt.objects.create(
            workload=workload,
            number=1,
            host=host,
            allocated=True,
            placed_at=started - timedelta(seconds=run.placed_lead_s),
            started_at=None if run.state == "starting" else started,
            stop_requested_at=now if run.state == "stopping" else None,
            ended_at=started + (now - started) / 2 if ended else None,
        )
        AttemptGPU.objects.bulk_create([AttemptGPU(attempt=attempt, gpu=g, open=not ended) for g in mine])
        if not ended:
            held |= {g.pk for g in mine}


def _check(tw, world) -> None:
    note(repr(world))
    now = CURRENT + timedelta(seconds=world["offset_s"])
    rule = {**django_settings.FAIRWAY, "IDLE_UTIL_PCT": world["pct"], "IDLE_AFTER_S": world["after"]}
    with override_settings(FAIRWAY=rule), transaction.atomic():
        _build(tw, world)
        expected = idle_reference(now)
        got = idle_attempts(now=now)
        event(f"idle attempts: {min(len(expected), 2)}")
        assert {pk: (i.since, i.seconds, i.gpus) for pk, i in got.items()} == {
            pk: (r.since, r.seconds, r.gpus) for pk, r in expected.items()
        }
        reference = efficiency_idle_reference(now)
        efficiency = efficiency_of_attempts(None, now)
        assert set(efficiency) == set(reference)
        for pk, r in reference.items():
            e = efficiency[pk]
            assert (e.measured, e.idle, e.utilized) == (
                pytest.approx(r.measured),
                pytest.approx(r.idle),
                pytest.approx(r.utilized),
            ), pk
        transaction.set_rollback(True)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds())
def test_idle_attempts_and_the_idle_share_agree_with_the_oracle(tw, ticks, world):
    _check(tw, world)
