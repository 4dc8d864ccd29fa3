"""brk46: a tick's reason judged on a workload's old request (an update committed between its
snapshot and its apply) changes nothing of the new request's, its estimate included (docs/jobs.md,
"Changing a pending workload"). The update runs inside the policy call, as in
``test_update_race.py``: on PostgreSQL, the reasons' conditional statement."""

from __future__ import annotations

import pytest

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


def _awaiting_preemption(tw):
    """Two hosts of 2 GPUs, each running unallocated work of alpha; ``w`` (beta, 2 GPUs, allocated)
    arrives: the first tick stops one of them for it and nominates that host's GPUs."""
    from accounts.models import Membership
    from scheduler.models import GPU

    h1, h2 = tw.host("h1", 2), tw.host("h2", 2)
    tw.attempt(tw.workload(gpus=2, min_runtime=0), list(GPU.objects.filter(host=h1)))
    tw.attempt(tw.workload(gpus=2, min_runtime=0), list(GPU.objects.filter(host=h2)), started_ago=30)
    w = tw.workload(budget=tw.beta, gpus=2)
    Membership.objects.create(user=tw.user, budget=tw.beta)
    first = run_tick(tw.cluster.pk, now=tw.now)
    assert len(first.stops) == 1
    return w, set(GPU.objects.filter(nominated_for=w).values_list("pk", flat=True))


def _stopping() -> int:
    from scheduler.models import Attempt

    return Attempt.objects.filter(stop_requested_at__isnull=False).count()


@pytest.mark.parametrize(
    "change", [{"name": "renamed"}, {"retries": 2}, {"max_runtime_s": 7200}, {"shared_memory_bytes": 1 << 30}]
)
def test_a_change_the_scheduler_does_not_read_keeps_the_nomination(tw, pushed, change) -> None:
    """A rename (or retries, wall-time limit, shared memory) of a workload awaiting its preemption
    cleared its nominated GPUs: the next tick stopped a second victim for the same 2 GPUs while
    the first one's were still being released for it."""
    from scheduler.models import GPU
    from scheduler.services import do_update_workload

    w, nominated = _awaiting_preemption(tw)

    do_update_workload(tw.user, Workload.objects.get(pk=w.pk), change)
    assert set(GPU.objects.filter(nominated_for=w).values_list("pk", flat=True)) == nominated
    second = run_tick(tw.cluster.pk, now=tw.now)

    assert (second.stops, _stopping()) == ([], 1)
    assert set(GPU.objects.filter(nominated_for=w).values_list("pk", flat=True)) == nominated
    assert Workload.objects.get(pk=w.pk).pending_reason == "awaiting_preemption"


def test_a_rename_while_a_tick_decides_keeps_the_nomination(tw, monkeypatch, pushed) -> None:
    """The same rename committed between a tick's snapshot and its apply: the tick dropped the
    nomination it kept for the renamed workload (a changed preemptor's) and cleared its GPUs, and
    the tick after it stopped a second victim."""
    from scheduler import tick
    from scheduler.models import GPU
    from scheduler.services import do_update_workload

    w, nominated = _awaiting_preemption(tw)
    real = tick.schedule

    def rename_meanwhile(snapshot):
        decisions = real(snapshot)
        do_update_workload(tw.user, Workload.objects.get(pk=w.pk), {"name": "renamed"})
        return decisions

    monkeypatch.setattr(tick, "schedule", rename_meanwhile)
    run_tick(tw.cluster.pk, now=tw.now)
    monkeypatch.setattr(tick, "schedule", real)
    assert set(GPU.objects.filter(nominated_for=w).values_list("pk", flat=True)) == nominated

    third = run_tick(tw.cluster.pk, now=tw.now)

    assert (third.stops, _stopping()) == ([], 1)


def test_the_fields_the_scheduler_judges_are_those_the_snapshot_reads(tw) -> None:
    """``services.SCHEDULED_FIELDS`` (what clears a reason, an estimate and nominations on update)
    is exactly the updatable fields whose change changes the workload the policy is given."""
    from scheduler.services import SCHEDULED_FIELDS, UPDATABLE_FIELDS
    from scheduler.snapshot import load_snapshot

    w = tw.workload(gpus=2)
    other = {
        "name": "x",
        "budget": tw.beta,
        "gpu_model": "A100",
        "gpu_count": 3,
        "min_runtime_s": 10,
        "max_runtime_s": 99_999,
        "retries": 3,
        "cpus": 7,
        "memory_bytes": 1 << 33,
        "shared_memory_bytes": 1 << 30,
    }
    assert set(other) == set(UPDATABLE_FIELDS)

    def seen():
        return load_snapshot(tw.cluster.pk, tw.now)[0].pending

    before = seen()
    read = set()
    for field, value in other.items():
        saved = Workload.objects.filter(pk=w.pk).values_list("budget_id" if field == "budget" else field, flat=True)[0]
        Workload.objects.filter(pk=w.pk).update(**{field: value})
        if seen() != before:
            read.add(field)
        Workload.objects.filter(pk=w.pk).update(**{"budget_id" if field == "budget" else field: saved})
    assert read == SCHEDULED_FIELDS
