"""est48: a held workload has no estimate, and none of its parts: the hold (its own, or its
budget's written by the tick) clears the stored start and its ``estimate_unfunded`` together, so
the API never says ``estimated_start: null`` with ``estimate_unfunded: true`` (the model's rule:
"false with no estimated start"), and the words say it is held."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from budgets.services import do_set_hold
from scheduler.models import Workload
from scheduler.reports import estimate_words
from scheduler.services import do_hold_workload, do_submit_workload
from scheduler.tick import run_tick


def _estimated_unfunded(researcher, submit_kwargs, cluster) -> Workload:
    do_submit_workload(researcher, **submit_kwargs(gpu_model="H100"))  # takes the only H100 host
    run_tick(cluster.pk)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_model="H100"))  # behind its own budget's work
    run_tick(cluster.pk)
    assert Workload.objects.get(pk=w.pk).state == "pending"
    Workload.objects.filter(pk=w.pk).update(
        estimated_start=timezone.now() + timedelta(hours=1), estimate_unfunded=True, estimate_told=None
    )
    return Workload.objects.get(pk=w.pk)


def test_holding_a_workload_clears_its_whole_estimate(researcher, submit_kwargs, cluster):
    w = _estimated_unfunded(researcher, submit_kwargs, cluster)

    do_hold_workload(researcher, w)

    w.refresh_from_db()
    assert (w.estimated_start, w.estimate_unfunded) == (None, False)
    assert estimate_words(w).startswith("Not given while it is held")


def test_a_budgets_hold_written_by_the_tick_clears_the_whole_estimate(researcher, submit_kwargs, cluster, org_tree):
    w = _estimated_unfunded(researcher, submit_kwargs, cluster)

    do_set_hold(org_tree["nlp/olmo"], True)
    run_tick(cluster.pk)

    w.refresh_from_db()
    assert w.pending_reason == "held"
    assert (w.estimated_start, w.estimate_unfunded) == (None, False)
    assert estimate_words(w).startswith("Not given while its budget is on hold")
