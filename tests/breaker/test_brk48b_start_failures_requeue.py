"""brk48b: a gang whose part failed to start is stopping with ``failed_to_start``; at its release
the tick requeues the workload only while it has start failures left (``MAX_START_FAILURES``,
DESIGN.md §4), and fails it after the last. The estimates (``stop_rules.runs_again``, read by the
snapshot) requeued it whatever its count: work of its budget behind it was estimated after a rerun
that never comes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from scheduler.estimates import store_estimates
from scheduler.models import Workload
from scheduler.stop_rules import MAX_START_FAILURES
from scheduler.tick import run_tick
from tests.tick.test_est48_requeue_estimates import _stopping


@pytest.mark.parametrize(("failures", "again"), [(MAX_START_FAILURES - 1, True), (MAX_START_FAILURES, False)])
def test_a_failed_start_is_requeued_in_the_estimates_only_with_start_failures_left(
    researcher, submit_kwargs, cluster, failures, again
):
    now, x, y = _stopping(researcher, submit_kwargs, cluster, "failed_to_start")
    Workload.objects.filter(pk=x.pk).update(start_failures=failures)
    run_tick(cluster.pk, now=now)
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])

    store_estimates(cluster.pk, now)

    y.refresh_from_db()
    if again:  # X runs again first: Y behind it
        assert y.estimated_start > now + timedelta(seconds=grace)
    else:  # X fails at its release (its last start failure): Y takes the host then
        assert y.estimated_start == now + timedelta(seconds=grace)
