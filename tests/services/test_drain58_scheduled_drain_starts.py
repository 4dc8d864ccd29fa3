"""drain58: the live tick reads a host's scheduled drain (``load_snapshot`` → ``Host.drain_at``): before
it, no allocated work starts there whose minimum runtime would end after it, and the pending reason
says so; work whose protection ends by then, and unallocated work, start (docs/deploy.md "Scheduled
drains")."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.models import Attempt, Host, Workload
from scheduler.reports import explain_pending
from scheduler.services import do_cancel_scheduled_drain, do_schedule_drain, do_set_host_state, do_submit_workload
from scheduler.snapshot import epoch, load_snapshot
from scheduler.tick import run_tick


def test_a_scheduled_drain_keeps_long_protected_work_off_the_host_until_then(
    admin, hosts, researcher, submit_kwargs, django_capture_on_commit_callbacks
):
    host = hosts["a100-1"]
    do_set_host_state(None, hosts["a100-2"], Host.State.CORDONED)
    now = timezone.now().replace(microsecond=0)
    at = now + timedelta(hours=2)
    do_schedule_drain(admin, host, at, "PSU swap")
    snap, _index = load_snapshot(host.cluster_id, now)
    assert {h.name: h.drain_at for h in snap.hosts}[host.name] == epoch(at)

    long = do_submit_workload(researcher, **submit_kwargs(gpu_count=2, min_runtime_s=8 * 3600))
    run_tick(host.cluster_id, now)
    long.refresh_from_db()
    assert long.state == Workload.State.PENDING
    assert long.pending_reason == "reserved_for_other"
    assert long.pending_detail["drain"] == {"host": host.name, "at": epoch(at)}
    lines = " ".join(explain_pending(long, now).lines())
    assert "reserved for maintenance" in lines
    assert f"Host {host.name} drains at {instant_text(epoch(at))} before its minimum runtime would end" in lines

    short = do_submit_workload(researcher, **submit_kwargs(gpu_count=2, min_runtime_s=2 * 3600))
    free = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=0))
    run_tick(host.cluster_id, now + timedelta(seconds=1))
    started = set(Attempt.objects.values_list("workload_id", flat=True))
    assert started == {free.pk}  # 2 h from now + 1 s would cross the drain too; M = 0 always starts
    short.refresh_from_db()
    assert short.state == Workload.State.PENDING

    with django_capture_on_commit_callbacks(execute=True):
        do_cancel_scheduled_drain(admin, host)  # cancelled: the long work starts at the next tick
    run_tick(host.cluster_id, now + timedelta(seconds=2))
    started = set(Attempt.objects.values_list("workload_id", flat=True))
    assert {long.pk, short.pk} <= started
