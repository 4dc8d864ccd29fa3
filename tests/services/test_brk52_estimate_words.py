"""brk52: the estimates run stored "no start found" on a workload that may carry no estimate (held,
its budget held, no host, an ``after`` list: nothing starts it in the simulation). try50 made the
workload's own release forget that answer, but a budget's release (and a host registered, the
dependencies ended) did not: once the tick judged it again, its page said "No start within the next
7 days" until the next estimates run, though the run never judged it able to start."""

from __future__ import annotations

from django.utils import timezone

from budgets.services import do_set_hold
from scheduler.estimates import store_estimates
from scheduler.models import Host, Workload
from scheduler.reports import estimate_words
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def test_a_budget_release_leaves_no_start_found_of_while_it_was_held(researcher, submit_kwargs, org_tree):
    # Given a workload of a held budget on a cluster whose A100 hosts take no new work
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    do_set_hold(org_tree["nlp/olmo"], True)
    now = timezone.now()
    run_tick(w.cluster_id, now=now)
    store_estimates(w.cluster_id, now)
    Host.objects.filter(name__startswith="a100").update(state=Host.State.CORDONED)
    # When its budget is released and the tick judges it again
    do_set_hold(org_tree["nlp/olmo"], False)
    run_tick(w.cluster_id)
    row = Workload.objects.get(pk=w.pk)
    # Then it waits with a reason an estimate follows, and says none is known yet
    assert row.state == Workload.State.PENDING and row.pending_reason not in ("", "held")
    assert not row.no_start_found
    assert estimate_words(row).startswith("Not known yet")
