"""brk46: a tick's reason judged on a workload's old request (an update committed between its
snapshot and its apply) changes nothing of the new request's, its estimate included (docs/jobs.md,
"Changing a pending workload"). The update runs inside the policy call, as in
``test_update_race.py``: on PostgreSQL, the reasons' conditional statement."""

from __future__ import annotations

from scheduler.models import Workload
from scheduler.tick import run_tick


def test_an_estimate_of_the_new_request_is_not_cleared_by_a_reason_of_the_old(tw, monkeypatch, pushed) -> None:
    """An update, then an estimates run on the new request, both between the tick's snapshot and
    its apply: the tick's reason for the old request (``unschedulable``: no estimate expected) is not
    written, and on PostgreSQL (its reasons are written in one conditional statement, the rows not
    filtered first) it still cleared the new request's estimate (one judged on an older spec)."""
    from datetime import timedelta

    from accounts.models import Membership
    from scheduler.policy import types as p
    from scheduler.services import do_update_workload
    from tests.tick.test_tick_apply import use_policy

    tw.host("h1", 2)
    w = tw.workload(gpus=2)
    Membership.objects.create(user=tw.user, budget=tw.alpha)
    estimate = tw.now + timedelta(hours=3)

    def update_meanwhile(s: p.Snapshot) -> p.Decisions:
        do_update_workload(tw.user, Workload.objects.get(pk=w.pk), {"gpu_count": 1})
        Workload.objects.filter(pk=w.pk).update(estimated_start=estimate)  # the run on the new request
        return p.Decisions(pending={str(w.pk): p.PendingInfo(reason=p.PendingReason.UNSCHEDULABLE)})

    use_policy(monkeypatch, update_meanwhile)

    run_tick(tw.cluster.pk, now=tw.now)

    row = Workload.objects.get(pk=w.pk)
    assert (row.pending_reason, row.estimated_start) == ("", estimate)
