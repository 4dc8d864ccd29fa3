"""do_cancel_workload: pending ends at once, running gets a stop, final is refused."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.models import GPU, Attempt, AttemptGPU, Workload, WorkloadEvent
from scheduler.services import CancelError, do_cancel_workload, do_submit_workload


@pytest.fixture
def pending(researcher, submit_kwargs) -> Workload:
    return do_submit_workload(researcher, **submit_kwargs())


def _start(workload: Workload, host, n: int, *, stop_reason: str = "") -> Attempt:
    """Put ``workload`` on the first ``n`` GPUs of ``host`` as the tick would."""
    now = timezone.now()
    attempt = Attempt.objects.create(
        workload=workload,
        number=1,
        host=host,
        allocated=True,
        placed_at=now,
        started_at=now,
        stop_reason=stop_reason,
        stop_requested_at=now if stop_reason else None,
    )
    for gpu in host.gpus.order_by("index")[:n]:
        AttemptGPU.objects.create(attempt=attempt, gpu=gpu)
    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.RUNNING)
    workload.refresh_from_db()
    return attempt


def test_cancel_of_pending_workload_ends_it_and_clears_nominations(researcher, pending, hosts):
    GPU.objects.filter(host=hosts["a100-1"], index__lt=4).update(nominated_for=pending)

    do_cancel_workload(researcher, pending)

    pending.refresh_from_db()
    assert pending.state == Workload.State.CANCELED
    assert pending.finished_at is not None
    assert not GPU.objects.filter(nominated_for=pending).exists()
    assert WorkloadEvent.objects.filter(workload=pending, kind="canceled", actor=researcher).exists()


def test_cancel_of_running_workload_requests_a_stop_and_pushes_the_host(
    researcher, pending, hosts, django_capture_on_commit_callbacks
):
    attempt = _start(pending, hosts["a100-1"], 4)

    with django_capture_on_commit_callbacks() as callbacks:
        do_cancel_workload(researcher, pending)

    attempt.refresh_from_db()
    pending.refresh_from_db()
    assert pending.state == Workload.State.RUNNING  # ends when the agent reports the exit
    assert attempt.stop_reason == Attempt.EndReason.CANCELED
    assert attempt.stop_requested_at is not None
    assert attempt.ended_at is None
    assert len(callbacks) == 1  # the push to the host's agent
    assert WorkloadEvent.objects.filter(workload=pending, kind="cancel_requested").exists()


def test_cancel_replaces_a_preemption_under_way(researcher, pending, hosts):
    attempt = _start(pending, hosts["a100-1"], 4, stop_reason=Attempt.EndReason.PREEMPTED)
    first_request = attempt.stop_requested_at

    do_cancel_workload(researcher, pending)

    attempt.refresh_from_db()
    assert attempt.stop_reason == Attempt.EndReason.CANCELED
    assert attempt.stop_requested_at == first_request  # the grace period already running is kept


def test_cancel_after_the_wall_time_stop_keeps_the_timeout(researcher, pending, hosts):
    # Given an attempt the tick stopped for its wall-time limit (the workload ends failed anyway)
    attempt = _start(pending, hosts["a100-1"], 4, stop_reason=Attempt.EndReason.TIMEOUT)
    # When its owner cancels it during the grace period
    do_cancel_workload(researcher, pending)
    # Then the first stop's reason stands (DESIGN.md §4): it was relabelled canceled
    attempt.refresh_from_db()
    assert attempt.stop_reason == Attempt.EndReason.TIMEOUT
    assert not WorkloadEvent.objects.filter(workload=pending, kind="cancel_requested").exists()


def test_cancel_twice_is_harmless(researcher, pending, hosts):
    _start(pending, hosts["a100-1"], 4)
    do_cancel_workload(researcher, pending)
    do_cancel_workload(researcher, pending)
    assert WorkloadEvent.objects.filter(workload=pending, kind="cancel_requested").count() == 1


def test_cancel_of_final_workload_is_refused(researcher, pending):
    do_cancel_workload(researcher, pending)
    with pytest.raises(CancelError) as info:
        do_cancel_workload(researcher, pending)
    assert (info.value.code, info.value.status) == ("already_final", 409)


@pytest.mark.parametrize("persona", ["manager", "admin", "researcher"])
def test_owner_manager_and_staff_may_cancel(request, pending, persona):
    do_cancel_workload(request.getfixturevalue(persona), pending)
    pending.refresh_from_db()
    assert pending.state == Workload.State.CANCELED


@pytest.mark.parametrize("persona", ["teammate", "outsider"])
def test_teammate_and_outsider_may_not_cancel(request, pending, persona):
    with pytest.raises(CancelError) as info:
        do_cancel_workload(request.getfixturevalue(persona), pending)
    assert (info.value.code, info.value.status) == ("forbidden", 403)
    pending.refresh_from_db()
    assert pending.state == Workload.State.PENDING
