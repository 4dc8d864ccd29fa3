"""upd44: an update of a pending workload committed between the tick's snapshot and its apply
(``services.do_update_workload``) never starts it with its old request, nor preempts, nominates or
stores a reason for the old one; the next tick decides on the new request. On SQLite the update
runs inside the tick's policy call (one connection: the tick's ``BEGIN IMMEDIATE`` holds the write
lock from snapshot to commit); ``test_update_race_pg.py`` races it from another connection."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import services, tick
from scheduler.models import GPU, Attempt, AttemptGPU, Workload, WorkloadEvent
from scheduler.policy import types as p
from scheduler.services import do_submit_workload, do_update_workload
from scheduler.tick import run_tick
from tests.tick.test_tick_apply import use_policy


def _tick_updating(monkeypatch: pytest.MonkeyPatch, workload: Workload, changes: dict[str, Any]) -> tick.TickResult:
    """One tick whose policy decides on the snapshot, then lets ``changes`` of ``workload`` commit
    before the apply (as another request would while the policy runs)."""
    real = tick.schedule

    def schedule_then_update(snapshot: p.Snapshot) -> p.Decisions:
        decisions = real(snapshot)
        assert [s.workload for s in decisions.starts] == [str(workload.pk)]
        do_update_workload(workload.owner, Workload.objects.get(pk=workload.pk), changes)
        return decisions

    monkeypatch.setattr(tick, "schedule", schedule_then_update)
    result = run_tick(workload.cluster_id)
    monkeypatch.setattr(tick, "schedule", real)
    return result


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"gpu_count": 8}, "gpu_count", 8),
        ({"min_runtime_s": 0}, "min_runtime_s", 0),
        ({"gpu_model": "H100"}, "gpu_model", "H100"),
        ({"cpus": 64}, "cpus", 64),
    ],
)
def test_an_update_after_the_snapshot_starts_nothing_with_the_old_request(
    monkeypatch, hosts, researcher, submit_kwargs, changes, field, value
) -> None:
    """The policy placed the 4-GPU, 1-hour request; the update (8 GPUs, unallocated, another model,
    more CPUs) committed before the apply. The start is dropped (it would have run 4 GPUs for a
    workload asking 8, or protected it for an hour it no longer declares); the next tick starts the
    new request."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=3600))

    result = _tick_updating(monkeypatch, workload, changes)

    assert result.starts == [] and result.dropped == 1
    assert not Attempt.objects.filter(workload=workload).exists()
    row = Workload.objects.get(pk=workload.pk)
    assert row.state == Workload.State.PENDING and getattr(row, field) == value
    assert (row.pending_reason, row.estimated_start) == ("", None)

    again = run_tick(workload.cluster_id)

    assert len(again.starts) == 1
    attempt = Attempt.objects.get(workload=workload)
    row.refresh_from_db()
    assert AttemptGPU.objects.filter(attempt=attempt).count() == row.gpu_count
    assert set(AttemptGPU.objects.filter(attempt=attempt).values_list("gpu__model", flat=True)) == {row.gpu_model}
    assert attempt.allocated == (row.min_runtime_s > 0)


def test_an_update_without_a_change_does_not_drop_the_start(monkeypatch, hosts, researcher, submit_kwargs) -> None:
    """An update that changes nothing (the same values) raises no version: the start stands."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))

    result = _tick_updating(monkeypatch, workload, {"gpu_count": 4, "name": "pretrain"})

    assert len(result.starts) == 1 and result.dropped == 0
    assert not WorkloadEvent.objects.filter(workload=workload, kind="updated").exists()


def test_a_preemptor_updated_after_the_snapshot_preempts_nobody(tw, monkeypatch, pushed) -> None:
    """Victims chosen for the old request are not stopped, nor GPUs nominated for it."""
    tw.host("h1", 2)
    u = tw.workload(gpus=2, min_runtime=0)
    victim = tw.attempt(u, list(GPU.objects.all()))
    preemptor = tw.workload(budget=tw.beta, gpus=2)
    from accounts.models import Membership

    Membership.objects.create(user=tw.user, budget=tw.beta)

    def update_meanwhile(s: p.Snapshot) -> p.Decisions:
        do_update_workload(tw.user, Workload.objects.get(pk=preemptor.pk), {"gpu_count": 1})
        return p.Decisions(
            stops=[p.Stop(str(victim.pk), p.StopReason.PREEMPTED, str(preemptor.pk))],
            nominations={str(preemptor.pk): (("h1", 0), ("h1", 1))},
        )

    use_policy(monkeypatch, update_meanwhile)

    result = run_tick(tw.cluster.pk, now=tw.now)

    victim.refresh_from_db()
    assert (victim.stop_requested_at, victim.stop_reason) == (None, "")
    assert set(GPU.objects.values_list("nominated_for_id", flat=True)) == {None}
    assert result.stops == [] and result.dropped == 1


def test_a_reason_judged_on_the_old_request_is_not_stored(tw, monkeypatch, pushed) -> None:
    """The pass's reason for the old request is not written over the update's cleared one."""
    tw.host("h1", 2)
    w = tw.workload(gpus=2)

    def update_meanwhile(s: p.Snapshot) -> p.Decisions:
        do_update_workload(tw.user, Workload.objects.get(pk=w.pk), {"gpu_count": 1})
        return p.Decisions(pending={str(w.pk): p.PendingInfo(reason=p.PendingReason.INSUFFICIENT_GPUS)})

    from accounts.models import Membership

    Membership.objects.create(user=tw.user, budget=tw.alpha)
    use_policy(monkeypatch, update_meanwhile)

    run_tick(tw.cluster.pk, now=tw.now)

    assert Workload.objects.get(pk=w.pk).pending_reason == ""


def test_an_update_and_a_cancel_of_a_started_workload_are_refused(monkeypatch, hosts, researcher, submit_kwargs):
    """Once a tick started it, the update is ``not_pending`` (409) and nothing changes."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    run_tick(workload.cluster_id)

    with pytest.raises(services.UpdateError) as refused:
        do_update_workload(researcher, Workload.objects.get(pk=workload.pk), {"gpu_count": 8})

    assert (refused.value.code, refused.value.status) == ("not_pending", 409)
    assert Workload.objects.get(pk=workload.pk).gpu_count == 4


def test_an_estimate_of_the_old_request_is_not_stored(
    monkeypatch, researcher, outsider, cluster, org_tree, submit_kwargs
) -> None:
    """An estimates run simulated the old request; an update committed before its write: the
    workload keeps the update's "no estimate yet" until the next run judges the new request."""
    from django.utils import timezone

    import scheduler.sim.estimate as sim_estimate
    from scheduler.estimates import store_estimates
    from tests.api.fair_share_setup import olmo_waits_for_visions_protection

    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    real = sim_estimate.forward_found

    def forward_then_update(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        do_update_workload(researcher, Workload.objects.get(pk=waiting.pk), {"gpu_count": 4})
        return found

    monkeypatch.setattr(sim_estimate, "forward_found", forward_then_update)
    Workload.objects.filter(pk=waiting.pk).update(estimated_start=None)  # as a fresh submission has
    store_estimates(cluster.pk, timezone.now())

    row = Workload.objects.get(pk=waiting.pk)
    assert (row.gpu_count, row.estimated_start) == (4, None)
    monkeypatch.setattr(sim_estimate, "forward_found", real)
    store_estimates(cluster.pk, timezone.now())
    assert Workload.objects.get(pk=waiting.pk).estimated_start is not None
