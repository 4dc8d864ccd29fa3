"""CPU of one web process's heartbeat flush (``gateway.flush_heartbeats``), in this process. Prints, asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairway_load python bench/flush_cpu.py [--hosts 32] [--n 150]

Run on the database ``bench/agents_load.py`` left behind (its hosts, 8 GPUs each, and the attempts
its agents started): each flush is ``--hosts`` random hosts' heartbeats (8 random samples, a third
of them stored, as ``AgentHub.flush`` does) and their views reporting every open attempt running,
so nothing is to start: the steady state of busy hosts. Writes to that database (last heartbeats,
samples, roll-ups). ``--profile`` prints cProfile's top functions. ``--starts``: the views report
nothing running, so every open attempt of the flushed hosts is started again (a push after
placements: its parts read whole, their gangs' layout, the ``start`` messages built). ``--push F``:
only the push thread's ``desired_commands_many`` (no heartbeat written), each host's open attempts
unreported with probability F (a tick's new placements; push36: ``--hosts 70 --push 0.5``)."""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("FAIRWAY_DB_POOL", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=32, help="hosts per flush")
    parser.add_argument("--n", type=int, default=150, help="flushes measured (after 10 unmeasured)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--starts", action="store_true", help="views report nothing running: everything open starts")
    parser.add_argument("--push", type=float, default=None, metavar="F", help="desired_commands_many only (see above)")
    args = parser.parse_args()
    import django

    django.setup()
    from django.utils import timezone

    from agent import protocol
    from scheduler import gateway, lifecycle
    from scheduler.models import AttemptGPU, Host

    generation = dict(Host.objects.values_list("pk", "link_generation"))  # as the connections' views carry it
    hosts = sorted(generation)
    running: dict[int, set[int]] = defaultdict(set)
    for host_id, wire_id in AttemptGPU.objects.filter(open=True, attempt__ended_at__isnull=True).values_list(
        "gpu__host_id", "attempt__wire_id"
    ):
        running[host_id].add(wire_id)
    rng = random.Random(1)
    started = [0]

    def samples() -> list[lifecycle.GpuSample]:
        return [
            lifecycle.GpuSample(
                index=g,
                health="healthy",
                sample={
                    "utilization_pct": rng.uniform(0, 100),
                    "memory_used_mb": rng.randint(0, 81559),
                    "temperature_c": 55.0,
                    "power_w": 350.0,
                    "ecc_uncorrected": 0,
                    "xids": [],
                },
            )
            for g in range(8)
        ]

    busy = sorted(running)

    def push() -> None:
        batch = rng.sample(busy, min(args.hosts, len(busy)))
        views = [
            gateway.AgentView(h, {w for w in running[h] if rng.random() >= args.push}, generation=generation[h])
            for h in batch
        ]
        commands = gateway.desired_commands_many(views)
        started[0] += sum(isinstance(m, protocol.Start) for ms in commands.values() for m in ms or ())

    def flush() -> None:
        if args.push is not None:
            push()
            return
        batch, now = rng.sample(hosts, min(args.hosts, len(hosts))), timezone.now()
        reports = [lifecycle.HeartbeatReport(h, now, samples(), store_samples=rng.random() < 1 / 3) for h in batch]
        views = [
            gateway.AgentView(h, set() if args.starts else set(running[h]), generation=generation[h]) for h in batch
        ]
        commands = gateway.flush_heartbeats(reports, views)
        started[0] += sum(isinstance(m, protocol.Start) for ms in commands.values() for m in ms or ())

    for _ in range(10):
        flush()
    profile = cProfile.Profile(time.thread_time) if args.profile else None  # CPU, not wall (waits for PostgreSQL)
    cpu, wall = time.process_time(), time.perf_counter()
    if profile:
        profile.enable()
    for _ in range(args.n):
        flush()
    if profile:
        profile.disable()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"{len(hosts)} hosts, {sum(map(len, running.values()))} open attempt parts; {args.n} "
        f"{'pushes' if args.push is not None else 'flushes'} of {args.hosts}"
        f" hosts: CPU {cpu / args.n * 1e3:.2f} ms each ({cpu / args.n / args.hosts * 1e3:.3f} ms per host),"
        f" wall {wall / args.n * 1e3:.2f} ms; {started[0] / (args.n + 10):.1f} starts each"
    )
    if profile:
        pstats.Stats(profile).sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(40)


if __name__ == "__main__":
    main()
