"""A hold racing the tick that starts the workload (docs/jobs.md "Hold and release"): one clear
outcome, as with a cancel. The tick and ``do_hold_workload`` both lock the workload's row first:
a hold committed since the snapshot makes the tick drop the start (and any preemption for it); a
tick that started it first makes the hold refuse ``not_pending``. Reasons the policy judged on a
hold the workload no longer has (or not yet) are not written."""

from __future__ import annotations

import pytest

from scheduler.models import GPU, Attempt, Workload
from scheduler.policy import types as p
from scheduler.services import HoldError, do_hold_workload, do_release_workload
from scheduler.tick import run_tick
from tests.tick.test_tick_apply import use_policy


def test_start_of_a_workload_held_after_the_snapshot_is_dropped(tw, monkeypatch, pushed):
    # Given a pending workload the policy starts, held by its owner while the policy ran
    tw.host("h1", 1)
    w = tw.workload(gpus=1)

    def hold_meanwhile(s: p.Snapshot) -> p.Decisions:
        assert [x.hold for x in s.pending] == [""]
        do_hold_workload(tw.user, w)
        return p.Decisions(
            starts=[p.Start(str(w.pk), (("h1", 0),), True)],
            pending={},
        )

    use_policy(monkeypatch, hold_meanwhile)
    result = run_tick(tw.cluster.pk, now=tw.now)

    # Then nothing starts and the hold stands, with its reason
    assert result.starts == [] and result.dropped == 1
    assert not Attempt.objects.exists()
    w.refresh_from_db()
    assert (w.state, w.hold, w.pending_reason, w.pending_detail) == ("pending", "user", "held", {"hold": "user"})


def test_a_hold_after_the_tick_started_the_workload_is_refused(tw, monkeypatch, pushed):
    tw.host("h1", 1)
    w = tw.workload(gpus=1)
    use_policy(monkeypatch, lambda s: p.Decisions(starts=[p.Start(str(w.pk), (("h1", 0),), True)]))
    run_tick(tw.cluster.pk, now=tw.now)

    with pytest.raises(HoldError) as refused:
        do_hold_workload(tw.user, w)

    assert refused.value.code == "not_pending"
    w.refresh_from_db()
    assert (w.state, w.hold) == (Workload.State.STARTING, "")


def test_no_preemption_for_a_workload_held_after_the_snapshot(tw, monkeypatch, pushed):
    tw.host("h1", 2)
    u = tw.workload(gpus=2, min_runtime=0)
    victim = tw.attempt(u, list(GPU.objects.all()))
    preemptor = tw.workload(budget=tw.beta, gpus=2)

    def hold_meanwhile(s: p.Snapshot) -> p.Decisions:
        do_hold_workload(tw.user, preemptor)
        return p.Decisions(
            stops=[p.Stop(str(victim.pk), p.StopReason.PREEMPTED, str(preemptor.pk))],
            nominations={str(preemptor.pk): (("h1", 0), ("h1", 1))},
        )

    use_policy(monkeypatch, hold_meanwhile)
    result = run_tick(tw.cluster.pk, now=tw.now)

    victim.refresh_from_db()
    assert result.stops == [] and result.dropped == 1
    assert victim.stop_requested_at is None
    assert not GPU.objects.filter(nominated_for__isnull=False).exists()


def test_a_reason_judged_before_a_hold_or_release_is_not_written(tw, monkeypatch, pushed):
    tw.host("h1", 1)
    w = tw.workload(gpus=1, pending_reason="fair_share")
    held = tw.workload(gpus=1, pending_reason="held", pending_detail={"hold": "user"}, hold="user")

    def change_meanwhile(s: p.Snapshot) -> p.Decisions:
        assert {x.id: x.hold for x in s.pending} == {str(w.pk): "", str(held.pk): "user"}
        do_hold_workload(tw.user, w)
        do_release_workload(tw.user, held)
        return p.Decisions(
            pending={
                str(w.pk): p.PendingInfo(p.PendingReason.INSUFFICIENT_GPUS, {}),
                str(held.pk): p.PendingInfo(p.PendingReason.HELD, {"hold": "user"}),
            }
        )

    use_policy(monkeypatch, change_meanwhile)
    run_tick(tw.cluster.pk, now=tw.now)

    w.refresh_from_db()
    held.refresh_from_db()
    assert (w.hold, w.pending_reason) == ("user", "held")
    assert (held.hold, held.pending_reason, held.pending_detail) == ("", "", {})


def test_a_held_workload_never_starts_and_keeps_its_place_when_released(tw, pushed):
    """The real policy: the held first workload waits with reason ``held``; the later one takes
    the GPU. Released, the first goes ahead of a third submitted after it."""
    tw.host("h1", 1)
    first = tw.workload(gpus=1)
    second = tw.workload(gpus=1)
    do_hold_workload(tw.user, first)

    run_tick(tw.cluster.pk, now=tw.now)

    first.refresh_from_db()
    assert Attempt.objects.get().workload_id == second.pk
    assert (first.state, first.pending_reason, first.pending_detail) == ("pending", "held", {"hold": "user"})
    assert first.estimated_start is None
    third = tw.workload(gpus=1)
    do_release_workload(tw.user, first)
    Attempt.objects.all().delete()
    Workload.objects.filter(pk=second.pk).update(state=Workload.State.SUCCEEDED)

    run_tick(tw.cluster.pk, now=tw.now)

    assert Attempt.objects.get().workload_id == first.pk
    assert Workload.objects.get(pk=third.pk).state == Workload.State.PENDING


def test_the_estimates_run_gives_a_held_workload_no_estimated_start(tw, pushed):
    """The forward simulation of ``scheduler.estimates`` (the one the lists, the API and the CLI
    read): the held workload gets none, the one behind it gets the GPU's release."""
    from django.utils import timezone

    from scheduler.estimates import store_estimates

    tw.host("h1", 1)
    other = tw.workload(budget=tw.beta, gpus=1)
    tw.attempt(other, list(GPU.objects.all()), started_ago=60)  # protected for an hour, then preemptible
    first = tw.workload(gpus=1)
    second = tw.workload(gpus=1)
    do_hold_workload(tw.user, first)
    Workload.objects.filter(pk=first.pk).update(estimated_start=timezone.now())  # a stale one

    store_estimates(tw.cluster.pk, timezone.now())

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.estimated_start is None
    assert second.estimated_start is not None
