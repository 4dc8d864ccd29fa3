"""One lock order (docs/locking.md): cancels racing exit reports and ticks on PostgreSQL.

Issue 14, finding 4: a cancel locked workload → attempt and exit processing attempt →
workload, so on PostgreSQL parallel cancels got 500 "deadlock detected", an exit report was
lost, an attempt that exited 0 before the cancel was recorded ``canceled``. Real threads,
each with its own connection; skipped on SQLite (one writer, no row locks).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from scheduler import lifecycle
from scheduler.lifecycle import charged_seconds
from scheduler.models import Attempt, AttemptGPU, Workload
from scheduler.services import CancelError, do_cancel_workload, do_set_host_state, do_submit_workload
from scheduler.tick import run_tick

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]

N = 16


def _running(researcher, submit_kwargs, hosts, n: int) -> list[Attempt]:
    """``n`` one-GPU allocated workloads running on the A100 hosts, started 100-115 s ago."""
    started = timezone.now() - timedelta(seconds=100)
    gpus = [g for h in ("a100-1", "a100-2") for g in hosts[h].gpus.order_by("index")]
    attempts = []
    for i in range(n):
        workload = do_submit_workload(researcher, **submit_kwargs(name=f"w{i}", gpu_count=1))
        attempt = Attempt.objects.create(
            workload=workload,
            number=1,
            host=gpus[i].host,
            allocated=True,
            placed_at=started - timedelta(seconds=i + 1),
            started_at=started - timedelta(seconds=i),
        )
        AttemptGPU.objects.create(attempt=attempt, gpu=gpus[i])
        Workload.objects.filter(pk=workload.pk).update(state=Workload.State.RUNNING)
        attempts.append(attempt)
    return attempts


def _race(jobs: list[tuple[str, Any]]) -> list[tuple[str, BaseException]]:
    """Run every job in its own thread (own connection), all released at once; their errors."""
    barrier = threading.Barrier(len(jobs))
    errors: list[tuple[str, BaseException]] = []

    def run(name: str, job: Any) -> None:
        try:
            barrier.wait(10)
            job()
        except CancelError as exc:
            if exc.code != "already_final":  # a cancel after the exit was recorded: refused, fine
                errors.append((name, exc))
        except BaseException as exc:  # noqa: BLE001 -- every failure is a finding
            errors.append((name, exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=job, name=job[0]) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung (lock wait)"
    return errors


def _charge(attempt: Attempt) -> int:
    return charged_seconds(attempt.started_at, attempt.ended_at)  # one GPU


def test_parallel_cancels_racing_natural_exits_and_ticks(researcher, submit_kwargs, hosts, cluster):
    attempts = _running(researcher, submit_kwargs, hosts, N)
    host_of = {a.pk: a.host for a in attempts}
    natural, stopped = attempts[: N // 2], attempts[N // 2 :]
    # The natural half exited (code 0) on the agent before anyone cancels; the reports arrive
    # while the cancels run, stamped with the agent's exit time (receipt − age).
    exit_at = timezone.now() - timedelta(seconds=5)

    jobs: list[tuple[str, Any]] = []
    for a in attempts:
        jobs.append((f"cancel-{a.pk}", lambda a=a: do_cancel_workload(researcher, a.workload)))
    for a in natural:
        jobs.append(
            (
                f"exit-{a.pk}",
                lambda a=a: lifecycle.attempt_exited(host_of[a.pk], a.pk, 0, 5.0, now=exit_at + timedelta(seconds=5)),
            )
        )
    jobs.append(("tick", lambda: [run_tick(cluster.pk) for _ in range(3)]))
    # ... and an admin drains a100-1 now (the tick stops its attempts), agents send heartbeats
    jobs.append(("drain", lambda: do_set_host_state(None, hosts["a100-1"], "draining", "test", drain_now=True)))
    for name in ("a100-1", "a100-2"):
        samples = [lifecycle.GpuSample(i, "healthy", sample={"utilization_pct": 50.0}) for i in range(8)]
        jobs.append((f"heartbeat-{name}", lambda h=hosts[name], s=samples: lifecycle.record_heartbeat(h, s)))
    errors = _race(jobs)
    assert errors == []

    # Then the stopped half exits after the SIGTERM (143), reported as they happen, in parallel
    # with a sweep and a tick.
    release_at = timezone.now()
    errors = _race(
        [
            (f"exit-{a.pk}", lambda a=a: lifecycle.attempt_exited(host_of[a.pk], a.pk, 143, now=release_at))
            for a in stopped
        ]
        + [("sweep", lambda: lifecycle.sweep_hosts()), ("tick", lambda: [run_tick(cluster.pk) for _ in range(3)])]
    )
    assert errors == []

    for a in natural:
        a.refresh_from_db()
        a.workload.refresh_from_db()
        assert (a.end_reason, a.exit_code, a.workload.state) == ("succeeded", 0, "succeeded"), a.pk
        assert a.ended_at == exit_at  # its own end, not the cancel's nor the processing time
        assert a.charged_gpu_seconds == _charge(a)
    for a in stopped:
        a.refresh_from_db()
        a.workload.refresh_from_db()
        # canceled even where the drain's stop came first: a cancel overrides it (DESIGN.md §4)
        assert (a.end_reason, a.exit_code, a.workload.state) == ("canceled", 143, "canceled"), a.pk
        assert a.stop_requested_at is not None and a.stop_requested_at <= release_at
        assert a.ended_at == release_at
        assert a.charged_gpu_seconds == _charge(a)
    assert not AttemptGPU.objects.filter(open=True).exists()


def test_an_exit_waiting_on_a_locked_workload_keeps_its_receipt_time(researcher, submit_kwargs, hosts):
    # Given an exit report received while a cancel holds the workload's row for a second
    (attempt,) = _running(researcher, submit_kwargs, hosts, 1)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                Workload.objects.select_for_update().get(pk=attempt.workload_id)
                holding.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    received = timezone.now()
    threading.Timer(1.0, release.set).start()
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0, now=received)
    holder.join(10)

    # Then its end is the receipt time, not the time the lock was obtained
    attempt.refresh_from_db()
    assert attempt.ended_at == received
    assert attempt.end_reason == "succeeded"
