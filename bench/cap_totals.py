"""The caps' part of a tick's snapshot at 50,000 closed attempts (left44). Prints, asserts nothing.

    DATABASE_URL=postgres://…/fw_bench python bench/cap_totals.py --setup [--attempts 50000]
    DATABASE_URL=… python bench/cap_totals.py [--repeat 5]          # in the tree to time

``--setup`` writes (``bulk_create``) one cluster of 8 hosts × 8 GPUs, 61 budgets (org → 6 programs
→ 9 projects each), a cap on 10 of them (30 days; never reached) and ``--attempts`` closed
allocated attempts of the projects, 1–8 GPUs each, ended in the last 30 days, into the database
(emptied first with ``flush``: its name must contain "bench"). Without it, it times in the tree it
runs from (its working directory: run it from a base worktree for the A/B) the snapshot the tick
loads (``load_snapshot`` as ``scheduler.tick`` calls it) and, where the tree has
``snapshot.cap_totals``, the caps' two readings apart: the records walked in Python
(``cap_records`` + ``cap_state``, what the tick did) and the database's aggregate (``cap_totals``
+ ``cap_state(counted=…)``). CPU: ``time.process_time`` of this process (the database server's
work is in the wall time); medians of ``--repeat`` after one warm-up.
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal

sys.path.insert(0, os.getcwd())  # the tree being timed (a base worktree for the A/B)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _setup(attempts: int) -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from accounts.models import User
    from budgets.models import Budget
    from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload

    assert "bench" in connection.settings_dict["NAME"], "a database whose name holds 'bench' (it is emptied)"
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    rng = random.Random(44)
    now = timezone.now()
    user = User.objects.create_user("bench", password="x")  # noqa: S106 -- a bench user
    cluster = Cluster.objects.create(name="capbench")
    gpus = []
    for h in range(8):
        host = Host.objects.create(cluster=cluster, name=f"n{h}", token_hash=f"hash-{h}", last_heartbeat=now)
        gpus += GPU.objects.bulk_create([GPU(host=host, index=i, uuid=f"GPU-{h}-{i}", model="H100") for i in range(8)])
    org = Budget.objects.create(name="org", shares=1)
    programs = [Budget.objects.create(name=f"p{i}", parent=org, shares=1) for i in range(6)]
    projects = [Budget.objects.create(name=f"j{i}", parent=pr, shares=1) for pr in programs for i in range(9)]
    for b in [*programs[:4], *projects[::9]][:10]:
        Budget.objects.filter(pk=b.pk).update(cap_gpu_hours=Decimal(10**9), cap_period_days=30)
    workloads = Workload.objects.bulk_create(
        Workload(
            name=f"w{i}",
            owner=user,
            budget=rng.choice(projects),
            cluster=cluster,
            gpu_model="H100",
            gpu_count=1,
            command=["true"],
            min_runtime_s=3600,
            submitted_at=now - timedelta(days=31),
            seq=i + 1,
            state=Workload.State.SUCCEEDED,
        )
        for i in range(attempts)
    )
    rows = []
    for w in workloads:
        end = now - timedelta(seconds=rng.randint(60, 30 * 86400))
        start = end - timedelta(seconds=rng.randint(600, 36000), microseconds=rng.randint(0, 999_999))
        rows.append(
            Attempt(workload=w, number=1, host_id=gpus[0].host_id, allocated=True, placed_at=start, started_at=start)
        )
        rows[-1].ended_at, rows[-1].end_reason = end, Attempt.EndReason.SUCCEEDED
    made = Attempt.objects.bulk_create(rows, batch_size=5000)
    links = [AttemptGPU(attempt=a, gpu=g, open=False) for a in made for g in rng.sample(gpus[:8], rng.randint(1, 8))]
    AttemptGPU.objects.bulk_create(links, batch_size=10000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    print(f"set up: {attempts} closed attempts, {len(links)} GPU links, 61 budgets, 10 caps")


def _measure(repeat: int) -> None:
    from django.db import connection, transaction
    from django.utils import timezone

    from scheduler import snapshot as snap
    from scheduler.models import Cluster

    cluster = Cluster.objects.get(name="capbench")
    now = timezone.now()
    takes = "with_cap_records" in inspect.signature(snap.load_snapshot).parameters  # main's does not
    tick_kw = {"with_cap_records": False} if takes else {}

    def timed(fn) -> tuple[float, float]:  # noqa: ANN001 -- a callable of no arguments
        cpu, wall = [], []
        for i in range(repeat + 1):
            with transaction.atomic():
                c0, w0 = time.process_time(), time.perf_counter()
                fn()
                c1, w1 = time.process_time(), time.perf_counter()
            if i:
                cpu.append(c1 - c0)
                wall.append(w1 - w0)
        return statistics.median(cpu), statistics.median(wall)

    out = {"tree": os.getcwd(), "tick_snapshot": timed(lambda: snap.load_snapshot(cluster, now, **tick_kw))}
    if hasattr(snap, "cap_totals"):
        from budgets.models import Budget
        from scheduler.policy.caps import cap_members, cap_state

        rows = list(
            Budget.objects.values_list(
                "id", "name", "parent_id", "shares", "archived_at", "hold", "on_cap", "cap_gpu_hours", "cap_period_days"
            ).order_by("id")
        )
        caps = snap._caps(rows)
        budgets = snap.load_snapshot(cluster, now)[0].budgets
        members = cap_members(caps, budgets)
        now_s = snap.epoch(now)

        def python() -> list[int]:
            return cap_state(caps, members, snap.cap_records(caps, members, now, cluster.pk), (), now_s)[0]

        def database() -> list[int]:
            return cap_state(caps, members, (), (), now_s, counted=snap.cap_totals(caps, members, now, cluster.pk))[0]

        assert python() == database()
        out["caps_python"] = timed(python)
        out["caps_database"] = timed(database)
    connection.close()
    print({k: (tuple(round(x, 4) for x in v) if isinstance(v, tuple) else v) for k, v in out.items()}, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setup", action="store_true")
    parser.add_argument("--attempts", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import django

    django.setup()
    if args.setup:
        _setup(args.attempts)
    else:
        _measure(args.repeat)


if __name__ == "__main__":
    main()
