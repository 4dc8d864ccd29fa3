"""brk38: races of the tick's apply with a cancel committed after its snapshot."""

from __future__ import annotations

from scheduler import lifecycle, services, tick
from scheduler.models import GPU, Attempt, Workload, WorkloadEvent
from scheduler.policy import types as p
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.tick.test_tick_apply import use_policy


def test_a_preemptor_canceled_after_the_snapshot_preempts_nobody(tw, monkeypatch, pushed):
    """The tick stopped the victims of a preemption whose preemptor was canceled while the policy
    ran (the cancel committed between the snapshot and the apply): an unallocated attempt lost its
    GPUs for nobody, and the GPUs were nominated for the canceled workload until the next tick."""
    tw.host("h1", 2)
    u = tw.workload(gpus=2, min_runtime=0)
    victim = tw.attempt(u, list(GPU.objects.all()))
    preemptor = tw.workload(budget=tw.beta, gpus=2)

    def cancel_meanwhile(s: p.Snapshot) -> p.Decisions:
        services.do_cancel_workload(preemptor.owner, Workload.objects.get(pk=preemptor.pk))
        return p.Decisions(
            stops=[p.Stop(str(victim.pk), p.StopReason.PREEMPTED, str(preemptor.pk))],
            nominations={str(preemptor.pk): (("h1", 0), ("h1", 1))},
        )

    use_policy(monkeypatch, cancel_meanwhile)

    result = run_tick(tw.cluster.pk, now=tw.now)

    victim.refresh_from_db()
    assert (victim.stop_requested_at, victim.stop_reason) == (None, "")
    assert Workload.objects.get(pk=u.pk).state == Workload.State.RUNNING
    assert not WorkloadEvent.objects.filter(workload=u, kind="preempted").exists()
    assert set(GPU.objects.values_list("nominated_for_id", flat=True)) == {None}
    assert result.stops == [] and result.dropped == 1
    assert Attempt.objects.filter(workload=preemptor).count() == 0


def test_a_drain_stop_does_not_depend_on_a_preemptor(tw, monkeypatch, pushed):
    """A stop that names no preemptor (a drain) is issued as before."""
    tw.host("h1", 2)
    u = tw.workload(gpus=2, min_runtime=0)
    victim = tw.attempt(u, list(GPU.objects.all()))
    use_policy(monkeypatch, lambda s: p.Decisions(stops=[p.Stop(str(victim.pk), p.StopReason.DRAINED)]))

    result = run_tick(tw.cluster.pk, now=tw.now)

    victim.refresh_from_db()
    assert victim.stop_reason == "drained" and result.stops == [victim.pk]


def test_an_estimate_run_does_not_stamp_a_workload_canceled_meanwhile(
    hosts, researcher, outsider, org_tree, submit_kwargs, monkeypatch
):
    """The estimates read the pending workloads, then wrote every changed estimate by primary key
    (``bulk_update``): a workload canceled (or started) in between kept an ``estimated_start``
    that the API showed on a canceled workload for good (the cancel and the start clear it, and
    nothing clears it later). Only workloads still pending get an estimate."""
    from django.utils import timezone

    import scheduler.sim.estimate as sim_estimate
    from scheduler.estimates import store_estimates

    for _ in range(2):
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8))
    tick.run_tick(hosts["a100-1"].cluster_id)
    for a in Attempt.objects.select_related("host"):
        assert lifecycle.attempt_started(a.host, a.pk)
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    tick.run_tick(waiting.cluster_id)  # its reservation: the estimate's cap
    real = sim_estimate.cap_by_reservations

    calls: list[int] = []

    def cap_then_cancel(found, stored, grace):
        """The second call is the estimates' own, after they read the pending rows (the first is
        the forward simulation's)."""
        calls.append(1)
        if len(calls) == 2:
            services.do_cancel_workload(researcher, Workload.objects.get(pk=waiting.pk))
        return real(found, stored, grace)

    monkeypatch.setattr(sim_estimate, "cap_by_reservations", cap_then_cancel)
    Workload.objects.filter(pk=waiting.pk).update(estimated_start=None)  # as a fresh submission has
    store_estimates(waiting.cluster_id, timezone.now())

    assert len(calls) == 2
    waiting.refresh_from_db()
    assert (waiting.state, waiting.estimated_start) == (Workload.State.CANCELED, None)
