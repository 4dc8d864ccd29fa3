"""The idle rule's cost (scheduler/idle.py) at a few thousand running attempts (idle55). Prints, asserts little.

    DATABASE_URL=sqlite:////tmp/fw_bench_idle.sqlite3 python bench/idle_check.py --setup [--attempts 3000]
    DATABASE_URL=… python bench/idle_check.py [--repeat 5]

``--setup`` writes (``bulk_create``) ``--attempts`` running attempts of 4 GPUs each (hosts of 8
GPUs), each with ``--minutes`` minute samples per GPU (default 120): one in ten idle for the last
90 minutes, the others busy, into the database (emptied first with ``flush``: its name must contain
"bench"). Without it, it times ``idle_attempts()`` over every running attempt (what the list's
``?idle=true`` and the clock's check read) and ``tell_idle()`` once every stretch is told (the check's
steady state: the read plus one query of the told marks), medians of ``--repeat`` after one warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _setup(attempts: int, minutes: int) -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from accounts.models import User
    from budgets.models import Budget
    from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, GpuMinuteSample, Host, Workload

    assert "bench" in str(connection.settings_dict["NAME"]), "a database whose name holds 'bench' (it is emptied)"
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    now = timezone.now()
    user = User.objects.create_user("bench", password="x")  # noqa: S106 -- a bench user
    cluster = Cluster.objects.create(name="idlebench")
    budget = Budget.objects.create(name="org", shares=1)
    hosts = Host.objects.bulk_create(
        Host(cluster=cluster, name=f"n{h}", token_hash=f"hash-{h}", last_heartbeat=now) for h in range(attempts // 2)
    )
    gpus = GPU.objects.bulk_create(
        GPU(host=host, index=i, uuid=f"GPU-{host.name}-{i}", model="H100") for host in hosts for i in range(8)
    )
    started = now - timedelta(minutes=minutes + 5)
    workloads = Workload.objects.bulk_create(
        Workload(
            name=f"w{i}", owner=user, budget=budget, cluster=cluster, gpu_model="H100", gpu_count=4,
            command=["true"], min_runtime_s=3600, submitted_at=started, state=Workload.State.RUNNING,
        )
        for i in range(attempts)
    )  # fmt: skip
    rows = Attempt.objects.bulk_create(
        Attempt(workload=w, number=1, host_id=gpus[4 * i].host_id, allocated=True, placed_at=started,
                started_at=started)
        for i, w in enumerate(workloads)
    )  # fmt: skip
    AttemptGPU.objects.bulk_create(
        AttemptGPU(attempt=a, gpu=gpus[4 * i + k]) for i, a in enumerate(rows) for k in range(4)
    )
    minute = now.replace(second=0, microsecond=0)
    batch: list[GpuMinuteSample] = []
    for i in range(attempts):
        idle = i % 10 == 0
        for k in range(4):
            for m in range(minutes):
                util = 0.0 if idle and m < 90 else 60.0
                batch.append(GpuMinuteSample(gpu=gpus[4 * i + k], minute=minute - timedelta(minutes=m), samples=6,
                                             utilization_samples=6, utilization_sum=6 * util))  # fmt: skip
            if len(batch) >= 50_000:
                GpuMinuteSample.objects.bulk_create(batch)
                batch = []
    GpuMinuteSample.objects.bulk_create(batch)
    print(f"set up {attempts} running attempts, {4 * attempts} GPUs, {GpuMinuteSample.objects.count()} minute samples")


def _timed(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    result = fn()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setup", action="store_true")
    parser.add_argument("--attempts", type=int, default=3000)
    parser.add_argument("--minutes", type=int, default=120)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings

    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}
    if args.setup:
        _setup(args.attempts, args.minutes)
        return
    from datetime import timedelta

    from django.db import connection
    from django.db.models import Max

    from scheduler import idle, notifications
    from scheduler.models import Attempt, GpuMinuteSample

    notifications.queue_for = lambda events, owners=None: None  # time the check, not the mail
    vendor = connection.vendor
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    # As if right after the setup: its samples are the latest (else they are stale, and nothing is idle).
    now = GpuMinuteSample.objects.aggregate(m=Max("minute"))["m"] + timedelta(seconds=30)
    running = Attempt.objects.filter(ended_at__isnull=True).count()
    read_ms, found = _timed(lambda: idle.idle_attempts(now=now), args.repeat)
    idle.tell_idle(now)  # tell every stretch once
    told_ms, told = _timed(lambda: idle.tell_idle(now), args.repeat)
    print(
        f"{vendor}: {running} running attempts, {len(found)} idle"  # type: ignore[arg-type]
        f" | idle_attempts() {read_ms:.0f} ms | tell_idle() steady state {told_ms:.0f} ms (told {told})"
    )


if __name__ == "__main__":
    main()
