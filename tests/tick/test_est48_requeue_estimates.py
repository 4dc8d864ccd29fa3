"""est48: an attempt stopping at the snapshot whose workload runs again on release (preempted,
drained, a GPU fault, lost; DESIGN.md §4) is requeued in the forward simulation as the live
system requeues it, with its original submission time and a fresh attempt (its wall-time limit
and protection counted from the new start). Before, the simulation dropped it at its release, so
work of its budget submitted after it was estimated to start in its place (an "upper bound" the
real start broke). A stop that ends the workload (timeout, cancel) is not requeued."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scheduler import lifecycle
from scheduler import policy as p
from scheduler.estimates import do_quote, store_estimates
from scheduler.models import GPU, Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.sim.estimate import estimate_starts
from scheduler.stop_rules import runs_again
from scheduler.tick import run_tick

HOUR = 3600


def _stopping(researcher, submit_kwargs, cluster, reason: str, *, later: bool = True):
    """X (the whole H100 host, M 60 s, a 2 h wall-time limit) running for an hour, then a stop of
    ``reason`` issued now; ``later``: Y, submitted after X in X's budget, pending for the same host."""
    now = timezone.now().replace(microsecond=0)
    x = do_submit_workload(
        researcher, **submit_kwargs(gpu_model="H100", gpu_count=4, min_runtime_s=60, max_runtime_s=2 * HOUR)
    )
    run_tick(cluster.pk, now=now - timedelta(hours=1))
    attempt = Attempt.objects.select_related("host").get(workload=x)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=now - timedelta(hours=1))
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=now, stop_reason=reason)
    Workload.objects.filter(pk=x.pk).update(state=Workload.State.PREEMPTING)
    y = (
        do_submit_workload(researcher, **submit_kwargs(gpu_model="H100", gpu_count=4, min_runtime_s=60))
        if later
        else None
    )
    return now, x, y


def _preempted_for(outsider, submit_kwargs, org_tree, x) -> Workload:
    """P of another budget (vision/sam), for whom X's GPUs are being freed (nominated, §3.4): it
    runs its whole wall-time limit of 1 h protected (M = its limit)."""
    p = do_submit_workload(
        outsider,
        **submit_kwargs(
            budget=org_tree["vision/sam"], gpu_model="H100", gpu_count=4, min_runtime_s=HOUR, max_runtime_s=HOUR
        ),
    )
    GPU.objects.filter(host__name="h100-1").update(nominated_for=p)
    return p


def test_a_preempted_workload_is_requeued_in_the_simulation_ahead_of_later_work_of_its_budget(
    researcher, outsider, submit_kwargs, org_tree, cluster
):
    now, x, y = _stopping(researcher, submit_kwargs, cluster, "preempted")
    p = _preempted_for(outsider, submit_kwargs, org_tree, x)
    run_tick(cluster.pk, now=now)
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])

    store_estimates(cluster.pk, now)

    p.refresh_from_db()
    y.refresh_from_db()
    assert p.estimated_start == now + timedelta(seconds=grace)
    # X, requeued at its release with its original submission (before Y's), starts again once P's
    # limit frees the host, and runs its full limit afresh (per attempt, §4): Y starts a grace after.
    assert y.estimated_start == now + timedelta(seconds=grace + HOUR + grace + 2 * HOUR + grace)


def test_a_quote_counts_the_requeued_workload_as_the_estimate_does(
    researcher, outsider, submit_kwargs, org_tree, cluster
):
    now, x, _y = _stopping(researcher, submit_kwargs, cluster, "preempted", later=False)
    _preempted_for(outsider, submit_kwargs, org_tree, x)
    run_tick(cluster.pk, now=now)
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])

    _w, lines, _terms = do_quote(researcher, now=now, **submit_kwargs(gpu_model="H100", gpu_count=4, min_runtime_s=60))

    (own,) = [line for line in lines if line.yours]
    assert own.estimated_start == now + timedelta(seconds=grace + HOUR + grace + 2 * HOUR + grace)


@pytest.mark.parametrize("reason", ["preempted", "drained", "gpu_fault", "lost"])
def test_the_forward_simulation_requeues_a_stopping_attempt_named_requeued(reason):
    """The pure simulation: a stopping attempt of the snapshot named ``requeued`` comes back to
    pending at its release with its original submission (the snapshot's rule for which: the stop's
    reason, ``stop_rules.runs_again``)."""
    assert runs_again(reason)
    host = p.Host("h1", "m", dict.fromkeys(range(4), p.GpuHealth.HEALTHY))
    budgets = [p.Budget("root", "root", None), p.Budget("b", "b", "root"), p.Budget("c", "c", "root")]
    x = p.Workload("x", "b", 4, "m", 60, submitted_at=-3600, seq=1)
    y = p.Workload("y", "b", 4, "m", 60, submitted_at=-10, seq=3)
    # P, of another budget, for whom X's GPUs are being freed: protected for its whole 1 h limit
    nominee = p.Workload("p", "c", 4, "m", 3600, submitted_at=-20, seq=2)
    gpus = tuple(("h1", i) for i in range(4))
    stopping = p.Attempt("a", "x", "b", gpus, True, 60, -3600, stopping=True, release_at=30)
    snap = p.Snapshot(
        now=0,
        hosts=[host],
        budgets=budgets,
        attempts=[stopping],
        pending=[nominee, y],
        nominations={"p": gpus},
    )
    limits = {"x": 7200, "p": 3600}

    requeued = estimate_starts(snap, grace=30, running={"x": x}, limits=limits, requeued={"a"})
    dropped = estimate_starts(snap, grace=30, running={"x": x}, limits=limits)

    assert requeued == {"p": 30, "y": 30 + 3600 + 30 + 7200 + 30}
    assert dropped == {"p": 30, "y": 30 + 3600 + 30}


@pytest.mark.parametrize("reason", ["timeout", "canceled", "succeeded"])
def test_a_stop_that_ends_the_workload_does_not_run_it_again(reason):
    assert not runs_again(reason)
    assert not runs_again("failed")
    assert runs_again("failed", retries_left=True)


@pytest.mark.parametrize("reason", ["timeout", "canceled"])
def test_work_stopped_for_good_is_not_requeued(researcher, submit_kwargs, cluster, reason):
    now, _x, y = _stopping(researcher, submit_kwargs, cluster, reason)
    run_tick(cluster.pk, now=now)
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])

    store_estimates(cluster.pk, now)

    y.refresh_from_db()
    assert y.estimated_start == now + timedelta(seconds=grace)
