"""Applying decisions: the tick writes exactly what the policy decided, and nothing a concurrent change undid.

The policy is replaced by a stub returning fixed decisions, so these tests pin
down the apply step alone (the policy has its own tests in tests/policy/).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import IntegrityError

from scheduler import tick
from scheduler.models import GPU, Attempt, AttemptGPU, Host, HostEvent, Workload, WorkloadEvent
from scheduler.policy import types as p
from scheduler.tick import run_tick


def use_policy(monkeypatch: pytest.MonkeyPatch, fn: Callable[[p.Snapshot], p.Decisions]) -> list[p.Snapshot]:
    seen: list[p.Snapshot] = []

    def stub(snapshot: p.Snapshot) -> p.Decisions:
        seen.append(snapshot)
        return fn(snapshot)

    monkeypatch.setattr(tick, "schedule", stub)
    return seen


def test_start_creates_attempt_gpu_rows_and_pushes_the_host(
    tw, monkeypatch, pushed, ticks, django_capture_on_commit_callbacks
):
    # Given a host with 2 GPUs and a pending allocated workload of 2 GPUs
    host = tw.host("h1", 2)
    w = tw.workload(gpus=2, pending_reason="insufficient_gpus")
    use_policy(monkeypatch, lambda s: p.Decisions(starts=[p.Start(str(w.pk), (("h1", 0), ("h1", 1)), True)]))

    # When the tick runs
    with django_capture_on_commit_callbacks(execute=True):
        result = run_tick(tw.cluster.pk, now=tw.now)

    # Then one attempt holds both GPUs, the workload is starting, the host is pushed
    assert result.status == "ran"
    attempt = Attempt.objects.get(workload=w)
    assert result.starts == [attempt.pk]
    assert (attempt.number, attempt.host_id, attempt.allocated, attempt.unfunded) == (1, host.pk, True, False)
    assert attempt.placed_at == tw.now and attempt.started_at is None and attempt.ended_at is None
    links = AttemptGPU.objects.filter(attempt=attempt).order_by("gpu__index")
    assert [(link.gpu.index, link.open, link.rank) for link in links] == [(0, True, 0), (1, True, 0)]
    w.refresh_from_db()
    assert (w.state, w.pending_reason) == (Workload.State.STARTING, "")
    assert WorkloadEvent.objects.filter(workload=w, kind="placed").count() == 1
    assert pushed == [[host.pk]]


def test_second_attempt_is_numbered_after_the_first(tw, monkeypatch, pushed):
    tw.host("h1", 1)
    w = tw.workload(gpus=1)
    first = tw.attempt(w, list(GPU.objects.all()))
    Attempt.objects.filter(pk=first.pk).update(ended_at=tw.now, end_reason="preempted")
    AttemptGPU.objects.update(open=False)
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.PENDING)
    use_policy(monkeypatch, lambda s: p.Decisions(starts=[p.Start(str(w.pk), (("h1", 0),), True)]))

    run_tick(tw.cluster.pk, now=tw.now)

    assert list(Attempt.objects.filter(workload=w).order_by("number").values_list("number", flat=True)) == [1, 2]


def test_start_of_a_workload_canceled_after_the_snapshot_is_dropped(tw, monkeypatch, pushed):
    # Given a pending workload that is canceled while the policy runs
    tw.host("h1", 1)
    w = tw.workload(gpus=1)

    def cancel_meanwhile(s: p.Snapshot) -> p.Decisions:
        Workload.objects.filter(pk=w.pk).update(state=Workload.State.CANCELED)
        return p.Decisions(starts=[p.Start(str(w.pk), (("h1", 0),), True)])

    use_policy(monkeypatch, cancel_meanwhile)

    result = run_tick(tw.cluster.pk, now=tw.now)

    # Then nothing starts and the cancel stands
    assert result.starts == [] and result.dropped == 1
    assert not Attempt.objects.exists()
    assert Workload.objects.get(pk=w.pk).state == Workload.State.CANCELED


def test_stop_requests_the_stop_and_nominates_the_gpus(tw, monkeypatch, pushed, django_capture_on_commit_callbacks):
    # Given an unallocated attempt on both GPUs of h1 and an allocated workload waiting
    host = tw.host("h1", 2)
    u = tw.workload(gpus=2, min_runtime=0)
    victim = tw.attempt(u, list(GPU.objects.all()))
    preemptor = tw.workload(budget=tw.beta, gpus=2)
    refs = (("h1", 0), ("h1", 1))
    use_policy(
        monkeypatch,
        lambda s: p.Decisions(
            stops=[p.Stop(str(victim.pk), p.StopReason.PREEMPTED, str(preemptor.pk))],
            nominations={str(preemptor.pk): refs},
        ),
    )

    with django_capture_on_commit_callbacks(execute=True):
        result = run_tick(tw.cluster.pk, now=tw.now)

    victim.refresh_from_db()
    assert result.stops == [victim.pk]
    assert (victim.stop_requested_at, victim.stop_reason, victim.ended_at) == (tw.now, "preempted", None)
    assert Workload.objects.get(pk=u.pk).state == Workload.State.PREEMPTING
    assert set(GPU.objects.values_list("nominated_for_id", flat=True)) == {preemptor.pk}
    assert WorkloadEvent.objects.filter(workload=u, kind="preempted").count() == 1
    assert pushed == [[host.pk]]


def test_stop_never_overrides_a_cancel_already_issued(tw, monkeypatch, pushed):
    tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=0)
    attempt = tw.attempt(w, list(GPU.objects.all()), stop_requested_at=tw.now, stop_reason="canceled")
    use_policy(monkeypatch, lambda s: p.Decisions(stops=[p.Stop(str(attempt.pk), p.StopReason.PREEMPTED)]))

    result = run_tick(tw.cluster.pk, now=tw.now + timedelta(seconds=5))

    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("canceled", tw.now)
    assert result.stops == [] and result.dropped == 1


def test_nominations_not_in_the_decisions_are_cleared(tw, monkeypatch, pushed):
    tw.host("h1", 2)
    w = tw.workload(gpus=2)
    GPU.objects.update(nominated_for=w)
    seen = use_policy(monkeypatch, lambda s: p.Decisions())

    run_tick(tw.cluster.pk, now=tw.now)

    assert seen[0].nominations == {str(w.pk): (("h1", 0), ("h1", 1))}
    assert list(GPU.objects.values_list("nominated_for_id", flat=True)) == [None, None]


def test_started_workload_loses_its_nominations(tw, monkeypatch, pushed):
    tw.host("h1", 2)
    w = tw.workload(gpus=1)
    GPU.objects.update(nominated_for=w)
    use_policy(
        monkeypatch,
        lambda s: p.Decisions(starts=[p.Start(str(w.pk), (("h1", 0),), True)], nominations=dict(s.nominations)),
    )

    run_tick(tw.cluster.pk, now=tw.now)

    assert list(GPU.objects.values_list("nominated_for_id", flat=True)) == [None, None]


def test_drained_host_state_is_written_with_an_event(tw, monkeypatch, pushed):
    host = tw.host("h1", 1, state=Host.State.DRAINING)
    use_policy(monkeypatch, lambda s: p.Decisions(host_states={"h1": p.HostState.DRAINED}))

    result = run_tick(tw.cluster.pk, now=tw.now)

    host.refresh_from_db()
    assert host.state == Host.State.DRAINED and result.host_states == {"h1": "drained"}
    assert HostEvent.objects.filter(host=host, kind="drained").count() == 1


def test_pending_reasons_are_stored(tw, monkeypatch, pushed):
    tw.host("h1", 1)
    w = tw.workload(gpus=1)
    info = p.PendingInfo(p.PendingReason.FAIR_SHARE, {"ratio": 1.5, "other_budget": "beta"})
    use_policy(monkeypatch, lambda s: p.Decisions(pending={str(w.pk): info}))

    run_tick(tw.cluster.pk, now=tw.now)

    w.refresh_from_db()
    assert (w.pending_reason, w.pending_detail) == ("fair_share", {"ratio": 1.5, "other_budget": "beta"})


def test_double_booking_is_refused_by_the_database_and_nothing_is_written(tw, monkeypatch, pushed):
    # Given GPU h1:0 held by a running attempt and a (buggy) decision to start another workload on it
    tw.host("h1", 1)
    holder = tw.workload(gpus=1)
    tw.attempt(holder, list(GPU.objects.all()))
    w = tw.workload(gpus=1)
    use_policy(monkeypatch, lambda s: p.Decisions(starts=[p.Start(str(w.pk), (("h1", 0),), True)]))

    with pytest.raises(IntegrityError):
        run_tick(tw.cluster.pk, now=tw.now)

    assert Attempt.objects.count() == 1
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING


def test_missing_cluster_is_reported_not_raised(db):
    assert run_tick(987654).status == "no_cluster"
