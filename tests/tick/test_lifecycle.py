"""Attempt lifecycle, charging, heartbeats, sweeps and the desired state (DESIGN.md §4, §6, §7)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent import protocol
from scheduler import gateway, lifecycle, tasks
from scheduler.gpu_report import stamped
from scheduler.models import GPU, Attempt, AttemptGPU, Host, HostEvent, Workload, WorkloadEvent


def test_started_confirmation_stamps_start_and_protection(tw, ticks):
    host = tw.host("h1", 2)
    w = tw.workload(gpus=2, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)

    assert lifecycle.attempt_started(host, attempt.pk, now=tw.now)

    attempt.refresh_from_db()
    assert attempt.started_at == tw.now and attempt.protected_until == tw.now + timedelta(seconds=600)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.RUNNING


def test_a_host_cannot_confirm_another_hosts_attempt(tw, ticks):
    tw.host("h1", 1)
    other = tw.host("h2", 1)
    w = tw.workload(gpus=1)
    attempt = tw.attempt(w, list(GPU.objects.filter(host__name="h1")), started_ago=None)

    assert not lifecycle.attempt_started(other, attempt.pk, now=tw.now)
    assert not lifecycle.attempt_exited(other, attempt.pk, 0, now=tw.now)

    attempt.refresh_from_db()
    assert (attempt.started_at, attempt.ended_at) == (None, None)


def test_exit_zero_succeeds_charges_gpu_seconds_and_frees_the_gpus(tw, ticks, django_capture_on_commit_callbacks):
    host = tw.host("h1", 2)
    w = tw.workload(gpus=2, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=100)

    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.attempt_exited(host, attempt.pk, 0, age_s=10, now=tw.now)

    attempt.refresh_from_db()
    assert attempt.ended_at == tw.now - timedelta(seconds=10)
    assert (attempt.end_reason, attempt.exit_code, attempt.charged_gpu_seconds) == ("succeeded", 0, 2 * 90)
    assert not AttemptGPU.objects.filter(open=True).exists()
    w.refresh_from_db()
    assert (w.state, w.finished_at) == (Workload.State.SUCCEEDED, attempt.ended_at)
    assert ticks == [tw.cluster.pk]
    # a duplicate report changes nothing
    assert not lifecycle.attempt_exited(host, attempt.pk, 0, now=tw.now)


def test_preempted_attempt_requeues_with_the_original_submission_time(tw, ticks):
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    submitted, seq = w.submitted_at, w.seq
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=50, stop_requested_at=tw.now, stop_reason="preempted")
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.PREEMPTING)

    lifecycle.attempt_exited(host, attempt.pk, 143, now=tw.now)

    attempt.refresh_from_db()
    w.refresh_from_db()
    assert (attempt.end_reason, attempt.exit_code, attempt.charged_gpu_seconds) == ("preempted", 143, 50)
    assert (w.state, w.submitted_at, w.seq, w.finished_at) == (Workload.State.PENDING, submitted, seq, None)


def test_an_exit_dated_before_its_start_ends_with_a_stop_issued_before_the_start(tw, ticks):
    """brk35: a stop issued while the attempt was starting (a cancel before its start was
    confirmed), then an exit report whose ``age_s`` dated the end before both: the end was stamped
    at the start (after the stop) but the reason was decided on the earlier instant, so the attempt
    escaped ``canceled`` and ended ``succeeded``. The end is never before the start, and the reason
    is decided on the instant stamped (DESIGN.md §4)."""
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    stop = tw.now - timedelta(seconds=20)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=10, stop_requested_at=stop, stop_reason="canceled")

    assert lifecycle.attempt_exited(host, attempt.pk, 0, age_s=10_000, now=tw.now)

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.ended_at) == ("canceled", attempt.started_at)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.CANCELED


def test_an_exit_is_never_dated_before_the_agent_last_said_it_ran(tw, ticks):
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(
        w,
        list(GPU.objects.all()),
        started_ago=300,
        stop_requested_at=tw.now - timedelta(seconds=30),
        stop_reason="preempted",
    )
    alive = tw.now - timedelta(seconds=5)

    assert lifecycle.attempt_exited(host, attempt.pk, 0, age_s=100, now=tw.now, alive_at=alive)

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.ended_at, attempt.charged_gpu_seconds) == ("preempted", alive, 295)


def test_unallocated_attempts_are_never_charged(tw, ticks):
    host = tw.host("h1", 2)
    w = tw.workload(gpus=2, min_runtime=0)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=500)

    lifecycle.attempt_exited(host, attempt.pk, 1, now=tw.now)

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.charged_gpu_seconds) == ("failed", 0)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.FAILED


def test_finished_workload_loses_its_nominations(tw, ticks):
    host = tw.host("h1", 2)
    w = tw.workload(gpus=1, min_runtime=0)
    attempt = tw.attempt(w, list(GPU.objects.filter(index=0)))
    GPU.objects.filter(index=1).update(nominated_for=w)

    lifecycle.attempt_exited(host, attempt.pk, 0, now=tw.now)

    assert list(GPU.objects.values_list("nominated_for_id", flat=True)) == [None, None]


def test_failed_starts_requeue_three_times_then_fail(tw, ticks):
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1)
    states = []
    for _ in range(4):
        attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)
        lifecycle.attempt_failed_to_start(host, attempt.pk, "no such image", now=tw.now)
        w.refresh_from_db()
        states.append(w.state)
    assert states == ["pending", "pending", "pending", "failed"]
    assert w.start_failures == 4
    assert set(Attempt.objects.values_list("end_reason", "charged_gpu_seconds")) == {("failed_to_start", 0)}


def test_stop_answered_stopped_ends_the_attempt_with_the_stop_reason(tw, ticks):
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=0)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None, stop_requested_at=tw.now, stop_reason="drained")

    assert lifecycle.attempt_stopped_unknown(host, attempt.pk, now=tw.now)

    attempt.refresh_from_db()
    assert attempt.end_reason == "drained"
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING


def test_heartbeat_records_health_and_a_fatal_xid_drains_the_host(
    tw, ticks, settings, django_capture_on_commit_callbacks
):
    settings.FAIRWAY = {**settings.FAIRWAY, "AUTO_DRAIN_ON_GPU_FAULT": True}
    host = tw.host("h1", 2)
    samples = [
        lifecycle.GpuSample(0, "healthy", (), {"utilization_pct": 50.0}),
        lifecycle.GpuSample(1, "unhealthy", (79,), {"utilization_pct": 0.0}),
    ]

    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.record_heartbeat(host, samples, now=tw.now + timedelta(seconds=3))

    host.refresh_from_db()
    assert host.state == Host.State.DRAINING and host.last_heartbeat == tw.now + timedelta(seconds=3)
    assert list(GPU.objects.order_by("index").values_list("health", flat=True)) == ["healthy", "unhealthy"]
    assert GPU.objects.get(index=0).last_sample == stamped({"utilization_pct": 50.0}, tw.now + timedelta(seconds=3))
    assert set(HostEvent.objects.values_list("kind", flat=True)) == {"gpu_health", "draining"}
    assert ticks == [tw.cluster.pk]


def test_silent_host_goes_offline_then_its_attempts_are_lost_and_requeued(tw, ticks, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_OFFLINE_AFTER_S": 30, "HOST_LOST_AFTER_S": 300}
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=100)
    last = tw.now
    Host.objects.filter(pk=host.pk).update(last_heartbeat=last)

    assert lifecycle.sweep_hosts(now=last + timedelta(seconds=31)) == {"offline": 1, "lost": 0}
    host.refresh_from_db()
    assert (host.state, host.state_before_offline) == ("offline", "active")
    assert lifecycle.sweep_hosts(now=last + timedelta(seconds=301)) == {"offline": 0, "lost": 1}

    attempt.refresh_from_db()
    assert (attempt.end_reason, attempt.ended_at, attempt.charged_gpu_seconds) == ("lost", last, 100)
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING


def test_hello_reregisters_gpus_brings_the_host_back_and_ends_vanished_attempts(tw, ticks, pushed, settings):
    host = tw.host("h1", 2, state=Host.State.OFFLINE, state_before_offline=Host.State.CORDONED)
    last = tw.now - timedelta(seconds=40)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=last)
    host.refresh_from_db()
    gone = tw.attempt(tw.workload(gpus=1), list(GPU.objects.filter(index=0)), started_ago=100)
    kept = tw.attempt(tw.workload(gpus=1), list(GPU.objects.filter(index=1)), started_ago=None)
    gpus = [lifecycle.GpuReport(i, f"GPU-new-{i}", "H100", 81559) for i in range(2)]

    lifecycle.host_hello(host, agent_version="0.1", gpus=gpus, running=[], now=tw.now)

    host.refresh_from_db()
    assert (host.state, host.agent_version, host.last_heartbeat) == ("cordoned", "0.1", tw.now)
    # new UUIDs differ from the registered inventory: held for an admin (issue 14, finding 6)
    assert host.pending_inventory is not None
    assert list(GPU.objects.order_by("index").values_list("uuid", flat=True)) == ["GPU-h1-0", "GPU-h1-1"]
    lifecycle.do_approve_host_inventory(None, host)
    assert list(GPU.objects.order_by("index").values_list("uuid", "memory_mb")) == [
        ("GPU-new-0", 81559),
        ("GPU-new-1", 81559),
    ]
    gone.refresh_from_db()
    kept.refresh_from_db()
    assert (gone.end_reason, gone.ended_at, gone.charged_gpu_seconds) == ("lost", last, 60)
    assert kept.ended_at is None  # never confirmed: its start is sent again


def test_desired_state_starts_missing_attempts_and_stops_unwanted_ones(tw, ticks):
    host = tw.host("h1", 3)
    gpus = list(GPU.objects.order_by("index"))
    w = tw.workload(gpus=2)
    wanted = tw.attempt(w, gpus[:2], started_ago=None)
    leaving = tw.attempt(
        tw.workload(gpus=1), gpus[2:], started_ago=10, stop_requested_at=tw.now, stop_reason="preempted"
    )

    # the agent link names attempts by their wire ids (issue 14, finding 3)
    cmds = gateway.desired_commands(host.pk, reported_running={leaving.wire_id, 999})

    start, stop, stray = cmds
    assert isinstance(start, protocol.Start) and start.attempt_id == wanted.wire_id
    assert (start.gpu_indices, start.gpu_uuids) == ([0, 1], ["GPU-h1-0", "GPU-h1-1"])
    assert start.env["TOKEN"] == "s3cret" and start.env["WORLD_SIZE"] == "2" and start.workload_id == w.pk
    assert (stop.attempt_id, stop.reason) == (leaving.wire_id, "preempted")
    assert (stray.attempt_id, stray.reason) == (999, "not_wanted")
    # already sent on this connection: nothing more to say
    again = gateway.desired_commands(
        host.pk, {leaving.wire_id}, already_started={wanted.wire_id}, already_stopped={leaving.wire_id}
    )
    assert again == []


def test_a_burst_of_tick_requests_sends_one_tick(db, monkeypatch):
    sent: list[tuple] = []
    monkeypatch.setattr(tasks.tick, "send_with_options", lambda **kw: sent.append(kw["args"]))
    tasks.reset_debounce([4242])

    results = [tasks.request_tick(4242) for _ in range(5)]

    assert results == [True, False, False, False, False] and sent == [(4242,)]
    tasks._clear_marker(4242)  # the tick clears the marker as it begins
    assert tasks.request_tick(4242) and len(sent) == 2
    tasks.reset_debounce([4242])


def test_a_burst_after_this_process_sent_the_tick_skips_the_marker(db, monkeypatch, settings):
    """Within half the debounce delay of its own sent tick message, a process does not ask the
    marker (a Redis round trip per submission): that message has not begun and will see the
    change. After that, or once the tick began here, the marker decides again."""
    sent: list[tuple] = []
    asked: list[int] = []
    real_set_marker = tasks._set_marker
    monkeypatch.setattr(tasks.tick, "send_with_options", lambda **kw: sent.append(kw["args"]))
    monkeypatch.setattr(tasks, "_set_marker", lambda cid, *a, **kw: asked.append(cid) or real_set_marker(cid, *a, **kw))
    settings.FAIRWAY = {**settings.FAIRWAY, "TICK_DEBOUNCE_S": 0.5}
    clock = [1000.0]
    monkeypatch.setattr(tasks.time, "monotonic", lambda: clock[0])
    tasks.reset_debounce([4244])

    assert [tasks.request_tick(4244) for _ in range(5)] == [True, False, False, False, False]
    assert sent == [(4244,)] and asked == [4244]  # one marker round trip for the burst
    clock[0] += 0.24
    assert not tasks.request_tick(4244) and asked == [4244]
    clock[0] += 0.02  # past half the delay: the marker decides (still set: no message)
    assert not tasks.request_tick(4244) and asked == [4244, 4244] and len(sent) == 1
    tasks._clear_marker(4244)  # the tick begins (here: the embedded mode) and clears the marker
    assert tasks.request_tick(4244) and len(sent) == 2
    tasks._clear_marker(4244)
    assert tasks.request_tick(4244) and len(sent) == 3  # a tick that began here ends the window
    settings.FAIRWAY = {**settings.FAIRWAY, "TICK_DEBOUNCE_S": 0.0}
    tasks._clear_marker(4244)
    assert [tasks.request_tick(4244) for _ in range(2)] == [True, False] and len(asked) == 6  # no delay: no window
    tasks.reset_debounce([4244])


def test_a_tick_that_finds_the_lock_held_asks_for_another(db, monkeypatch):
    """A change that asked for a tick while another tick ran (and had read its snapshot) is not
    left to the clock: the tick that found the cluster's lock held asks again (one message, the
    debounce's; a burst of requests meanwhile adds none)."""
    from scheduler.tick import TickResult

    sent: list[tuple] = []
    monkeypatch.setattr(tasks.tick, "send_with_options", lambda **kw: sent.append(kw["args"]))
    monkeypatch.setattr(tasks, "run_tick", lambda cid: TickResult(cluster_id=cid, status="skipped"))
    tasks.reset_debounce([4243])

    tasks.tick.fn(4243)
    assert [tasks.request_tick(4243) for _ in range(3)] == [False] * 3  # the retry is pending already

    assert sent == [(4243,)]
    tasks.reset_debounce([4243])


def test_an_exit_report_is_stamped_from_its_receipt_not_from_when_it_was_processed(tw, ticks):
    """Issue 14 finding 4: a report that waited for a lock (a cancel, the tick) kept waiting in the
    clock; the consumer now passes the frame's receipt time, and the end is receipt − age_s."""
    from scheduler import consumers

    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=100)
    received = tw.now - timedelta(seconds=5)  # the frame arrived 5 s before it was processed
    msg = protocol.AttemptEvent(attempt_id=attempt.wire_id, state="exited", exit_code=0, age_s=2.0)

    assert consumers._attempt_event.func(host, host.link_generation, msg, received)

    attempt.refresh_from_db()
    assert attempt.ended_at == received - timedelta(seconds=2)


def test_a_host_where_attempts_of_several_workloads_keep_failing_to_start_is_cordoned(tw, ticks):
    """A broken host (e.g. an account that cannot run the program) must not burn every workload's
    retries: each requeued workload is placed on it again while it is the emptiest fit."""
    from accounts.models import User

    host = tw.host("h1", 1)
    gpus = list(GPU.objects.all())
    other = User.objects.create(username="second-owner")
    workloads = [tw.workload(gpus=1), tw.workload(gpus=1), tw.workload(gpus=1)]
    Workload.objects.filter(pk=workloads[1].pk).update(owner=other)
    for i, w in enumerate(workloads):
        attempt = tw.attempt(w, gpus, started_ago=None)
        assert lifecycle.attempt_failed_to_start(host, attempt.pk, "cannot run /x", now=tw.now + timedelta(seconds=i))
        assert Host.objects.get(pk=host.pk).state == (Host.State.CORDONED if i == 2 else Host.State.ACTIVE)
    event = HostEvent.objects.get(host=host, kind="cordoned")
    assert "failed to start" in event.message and "cannot run /x" in event.message


def test_one_owners_workloads_failing_to_start_cordon_nothing(tw, ticks):
    """tryout24: one researcher submitted four jobs whose command was not on the job's PATH, and
    within 4 s both hosts of the cluster were cordoned; nobody could start work until an admin
    resumed them. One owner's mistakes fail that owner's workloads, not the host."""
    host = tw.host("h1", 1)
    gpus = list(GPU.objects.all())
    for i in range(4):
        attempt = tw.attempt(tw.workload(gpus=1), gpus, started_ago=None)
        message = "command not found or not executable: python"
        assert lifecycle.attempt_failed_to_start(host, attempt.pk, message, now=tw.now + timedelta(seconds=i))
    assert Host.objects.get(pk=host.pk).state == Host.State.ACTIVE
    assert not HostEvent.objects.filter(host=host, kind="cordoned").exists()


def test_one_workload_failing_to_start_again_and_again_cordons_nothing(tw, ticks):
    """A workload's own fault (a bad image) fails the workload after its retries, not the host."""
    host = tw.host("h1", 1)
    gpus = list(GPU.objects.all())
    w = tw.workload(gpus=1)
    for i in range(3):
        attempt = tw.attempt(w, gpus, started_ago=None)
        assert lifecycle.attempt_failed_to_start(host, attempt.pk, "no such image", now=tw.now + timedelta(seconds=i))
        Workload.objects.filter(pk=w.pk).update(state=Workload.State.STARTING)
    assert Host.objects.get(pk=host.pk).state == Host.State.ACTIVE


def test_image_workloads_failing_on_a_process_runtime_host_cordon_nothing(tw, ticks):
    """In a mixed cluster an image workload may land on a process-runtime host and fail to start
    there: that is the placement's mismatch, not a broken host."""
    host = tw.host("h1", 1, labels={"runtime": "process"})
    gpus = list(GPU.objects.all())
    for i in range(3):
        w = tw.workload(gpus=1)
        Workload.objects.filter(pk=w.pk).update(image="busybox")
        attempt = tw.attempt(w, gpus, started_ago=None)
        assert lifecycle.attempt_failed_to_start(host, attempt.pk, "no images here", now=tw.now + timedelta(seconds=i))
    assert Host.objects.get(pk=host.pk).state == Host.State.ACTIVE


def test_an_exit_without_a_confirmed_start_is_charged_from_the_placement(tw, ticks):
    """Demo under load: 34 attempts ran and exited but were never confirmed started (their
    ``started`` report was lost with a connection, from an agent that did not repeat it). An exit
    says the attempt ran: its start is dated at the placement, as Slurm dates a job's start at its
    allocation (docs/policy.md), so it is charged and counted as started."""
    host = tw.host("h1", 2)
    w = tw.workload(gpus=2, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)
    placed = tw.now - timedelta(seconds=100)
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=placed)

    assert lifecycle.attempt_exited(host, attempt.pk, 0, age_s=10, now=tw.now)

    attempt.refresh_from_db()
    assert (attempt.started_at, attempt.ended_at) == (placed, tw.now - timedelta(seconds=10))
    assert (attempt.end_reason, attempt.charged_gpu_seconds) == ("succeeded", 2 * 90)
    assert attempt.protected_until == placed + timedelta(seconds=60)
    assert list(WorkloadEvent.objects.filter(workload=w).values_list("kind", flat=True).order_by("pk")) == [
        "started",
        "succeeded",
    ]


def test_an_unallocated_exit_without_a_confirmed_start_is_counted_started_and_charged_nothing(tw, ticks):
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=0)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)

    assert lifecycle.attempt_exited(host, attempt.pk, 0, now=tw.now)

    attempt.refresh_from_db()
    assert (attempt.started_at, attempt.end_reason, attempt.charged_gpu_seconds) == (attempt.placed_at, "succeeded", 0)


def test_a_start_report_is_stamped_from_its_receipt_and_its_age_never_before_the_placement(tw, ticks):
    """A ``started`` report waited for the database like an exit may (the tick, a cancel): it is
    stamped at its receipt, less its age, but no earlier than the placement (a late report, an
    agent's clock running ahead)."""
    from scheduler import consumers

    host = tw.host("h1", 2)
    gpu0, gpu1 = GPU.objects.order_by("index")
    late = tw.attempt(tw.workload(gpus=1, min_runtime=60), [gpu0], started_ago=None)
    old = tw.attempt(tw.workload(gpus=1, min_runtime=60), [gpu1], started_ago=None)
    Attempt.objects.update(placed_at=tw.now - timedelta(seconds=60))
    received = tw.now - timedelta(seconds=5)  # the frames arrived 5 s before they were processed

    for attempt, age in ((late, None), (old, 10**6)):
        msg = protocol.AttemptEvent(attempt_id=attempt.wire_id, state="started", age_s=age)
        assert consumers._attempt_event.func(host, host.link_generation, msg, received)

    late.refresh_from_db()
    old.refresh_from_db()
    assert late.started_at == received and late.protected_until == received + timedelta(seconds=60)
    assert old.started_at == tw.now - timedelta(seconds=60)


def test_a_hello_dates_the_start_of_a_running_attempt_from_the_age_it_reports(tw, ticks):
    host = tw.host("h1", 2)
    gpu0, gpu1 = GPU.objects.order_by("index")
    dated = tw.attempt(tw.workload(gpus=1, min_runtime=60), [gpu0], started_ago=None)
    undated = tw.attempt(tw.workload(gpus=1, min_runtime=60), [gpu1], started_ago=None)
    Attempt.objects.update(placed_at=tw.now - timedelta(seconds=120))
    gpus = [lifecycle.GpuReport(g.index, g.uuid, g.model) for g in (gpu0, gpu1)]

    unconfirmed = lifecycle.host_hello(
        host, agent_version="t", gpus=gpus, running=[dated.pk, undated.pk], started={dated.pk: 30.0}, now=tw.now
    )

    dated.refresh_from_db()
    undated.refresh_from_db()
    assert dated.started_at == tw.now - timedelta(seconds=30)
    assert Workload.objects.get(pk=dated.workload_id).state == Workload.State.RUNNING
    # without the age of its start (an older agent, an image still pulling): its start is sent again
    assert (undated.started_at, unconfirmed) == (None, {undated.pk})


def test_a_host_lost_before_an_attempts_start_was_confirmed_is_charged_from_the_placement(tw, ticks, settings):
    """break27: the host-lost sweep ended an attempt whose start it had not heard of yet (an image
    pull, a ``started`` lost with the link) charged 0, and the agent's hello dating its start
    afterwards charged nothing either, although the lab's GPUs were held for it from the placement.
    As Slurm charges an allocation whatever its processes did, its start is dated at the placement
    and it is charged up to the last heartbeat (docs/policy.md, "A lost attempt")."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_OFFLINE_AFTER_S": 30, "HOST_LOST_AFTER_S": 300}
    host = tw.host("h1", 2)
    gpu0, gpu1 = GPU.objects.order_by("index")
    w = tw.workload(gpus=2, min_runtime=60)
    attempt = tw.attempt(w, [gpu0, gpu1], started_ago=None)
    placed = tw.now - timedelta(seconds=100)
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=placed)
    last = tw.now
    Host.objects.filter(pk=host.pk).update(last_heartbeat=last)

    lifecycle.sweep_hosts(now=last + timedelta(seconds=31))
    assert lifecycle.sweep_hosts(now=last + timedelta(seconds=301)) == {"offline": 0, "lost": 1}

    attempt.refresh_from_db()
    assert (attempt.started_at, attempt.ended_at, attempt.end_reason) == (placed, last, "lost")
    assert attempt.charged_gpu_seconds == 2 * 100
    assert Workload.objects.get(pk=w.pk).state == Workload.State.PENDING
    assert list(WorkloadEvent.objects.filter(workload=w).values_list("kind", flat=True).order_by("pk")) == [
        "started",
        "requeued",
    ]
    # The agent comes back and dates the start (an image pull of 40 s): the attempt has ended,
    # its charge stands (as a confirmed attempt's does: lost attempts are charged to the last heartbeat).
    gpus = [lifecycle.GpuReport(g.index, g.uuid, g.model) for g in (gpu0, gpu1)]
    later = last + timedelta(seconds=400)
    lifecycle.host_hello(
        host, agent_version="t", gpus=gpus, running=[attempt.pk], started={attempt.pk: 460.0}, now=later
    )
    attempt.refresh_from_db()
    assert (attempt.started_at, attempt.ended_at, attempt.charged_gpu_seconds) == (placed, last, 2 * 100)


def test_an_attempt_placed_after_the_last_heartbeat_of_a_lost_host_is_charged_nothing(tw, ticks, settings):
    """Placed while its host was already silent (not yet offline): the server never heard of the
    host again, so it held nothing the server can vouch for."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_OFFLINE_AFTER_S": 30, "HOST_LOST_AFTER_S": 300}
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)
    last = tw.now - timedelta(seconds=20)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=last)
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=tw.now - timedelta(seconds=10))

    lifecycle.sweep_hosts(now=tw.now + timedelta(seconds=30))
    assert lifecycle.sweep_hosts(now=tw.now + timedelta(seconds=400))["lost"] == 1

    attempt.refresh_from_db()
    assert (attempt.started_at, attempt.end_reason, attempt.charged_gpu_seconds) == (None, "lost", 0)


def test_an_unconfirmed_start_on_an_offline_host_waits_for_the_lost_sweep(tw, ticks, settings):
    """The start timeout (``failed_to_start``, uncharged, a start failure of the workload) is not
    the fate of an attempt whose host went silent during its start: whether the host comes back or
    is lost decides (the lost sweep charges it from the placement), whichever timeout comes first."""
    settings.FAIRWAY = {
        **settings.FAIRWAY,
        "HOST_OFFLINE_AFTER_S": 30,
        "HOST_LOST_AFTER_S": 300,
        "START_TIMEOUT_S": 600,
    }
    host = tw.host("h1", 1)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)
    placed = tw.now - timedelta(seconds=500)  # a long image pull: the host went silent after 400 s
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=placed)
    last = tw.now - timedelta(seconds=100)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=last)
    lifecycle.sweep_hosts(now=tw.now)  # offline

    assert lifecycle.start_timeouts(now=tw.now + timedelta(seconds=150)) == 0  # placed 650 s ago
    assert lifecycle.sweep_hosts(now=last + timedelta(seconds=301))["lost"] == 1

    attempt.refresh_from_db()
    w.refresh_from_db()
    assert (attempt.end_reason, attempt.charged_gpu_seconds, w.start_failures) == ("lost", 400, 0)


def test_an_attempt_on_a_host_that_never_connected_ends_lost(tw, ticks, settings):
    """brk30: a joined host whose agent never connected went offline (30 s after its registration)
    but was never lost (the sweep looked for a last heartbeat), and the start timeout skips offline
    hosts: the attempt the tick had placed on it stayed ``starting`` for good, a cancel stayed
    "stop requested", and an array's ``%N`` slot stayed taken. It ends ``lost`` (requeued),
    charged nothing: nothing vouches that it ever held the GPUs."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_OFFLINE_AFTER_S": 30, "HOST_LOST_AFTER_S": 300}
    host = tw.host("h1", 1)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=None, created_at=tw.now)
    w = tw.workload(gpus=1, min_runtime=60)
    attempt = tw.attempt(w, list(GPU.objects.all()), started_ago=None)
    Attempt.objects.filter(pk=attempt.pk).update(placed_at=tw.now + timedelta(seconds=1))

    assert lifecycle.sweep_hosts(now=tw.now + timedelta(seconds=31))["offline"] == 1
    assert lifecycle.start_timeouts(now=tw.now + timedelta(seconds=3600)) == 0  # the lost sweep decides
    assert lifecycle.sweep_hosts(now=tw.now + timedelta(seconds=299))["lost"] == 0
    assert lifecycle.sweep_hosts(now=tw.now + timedelta(seconds=301))["lost"] == 1

    attempt.refresh_from_db()
    w.refresh_from_db()
    assert (attempt.started_at, attempt.end_reason, attempt.charged_gpu_seconds) == (None, "lost", 0)
    assert attempt.ended_at == attempt.placed_at
    assert w.state == Workload.State.PENDING
    assert not AttemptGPU.objects.filter(open=True).exists()


def test_resume_waits_for_an_approved_inventory(tw, ticks, pushed):
    """A host the inventory hold cordoned is not resumed by hand while its agent's GPUs await an
    admin's approval (brk31: "resume" made it active, placing work on GPUs that may not be what
    the database says); cordon and drain stay allowed, and approval resumes it (as Slurm refuses to
    resume a node whose registration does not match its configuration)."""
    from scheduler.services import HostError, do_set_host_state

    host = tw.host("h1", 2)
    gpus = [lifecycle.GpuReport(i, f"GPU-other-{i}", "H100", 81559) for i in range(2)]
    lifecycle.host_hello(host, agent_version="0.1", gpus=gpus, running=[], now=tw.now)
    host.refresh_from_db()
    assert (host.state, host.pending_inventory is not None) == ("cordoned", True)

    with pytest.raises(HostError) as refused:
        do_set_host_state(None, host, "active", "try")
    assert refused.value.code == "inventory_pending"
    host.refresh_from_db()
    assert host.state == "cordoned" and not HostEvent.objects.filter(host=host, kind="resumed").exists()

    assert do_set_host_state(None, host, "draining", "maintenance").state == "draining"
    Host.objects.filter(pk=host.pk).update(state=Host.State.OFFLINE, state_before_offline=Host.State.CORDONED)
    with pytest.raises(HostError):  # offline: the state it returns to is not resumed either
        do_set_host_state(None, Host.objects.get(pk=host.pk), "active")

    Host.objects.filter(pk=host.pk).update(state=Host.State.CORDONED, state_before_offline="")
    lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))
    assert do_set_host_state(None, Host.objects.get(pk=host.pk), "active").state == "active"
