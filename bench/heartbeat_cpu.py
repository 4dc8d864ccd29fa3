"""CPU of a web process's heartbeats, in this process: frames handed to real consumers. Prints, asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairway_load python bench/heartbeat_cpu.py [--rate 100]

Run on the database ``bench/agents_load.py`` left behind (its hosts, 8 GPUs each, and the attempts
its agents started). One :class:`scheduler.consumers.AgentConsumer` per host, past its hello (as
``connect`` and the hello leave it, without a socket: what it sends is counted and dropped), on
one event loop with the process's :class:`scheduler.gateway.AgentHub`; ``--rate`` heartbeat
frames per second (8 random GPU samples, every open attempt of the host reported running) go to
``AgentConsumer.receive`` as uvicorn would hand them. The hub flushes them to the database every
``HEARTBEAT_FLUSH_S`` as in production. Measured: the process's CPU seconds (every thread: the
event loop's decode and dispatch, the flush thread's writes and desired state) over the window,
per heartbeat. Not measured: the websocket framing (uvicorn, websockets) and the channel layer.

Runs against the code of the current directory (``cd`` into a before-worktree to compare)."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import random
import sys
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("FAIRWAY_DB_POOL", "true")
os.environ.setdefault("FAIRWAY_HEARTBEAT_S", "5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="heartbeats per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds (after 5 unmeasured)")
    parser.add_argument("--hosts", type=int, default=500, help="hosts (connections) used, at most the database's")
    parser.add_argument("--profile", action="store_true", help="cProfile the event loop's thread; print its top")
    args = parser.parse_args()
    import django

    django.setup()
    asyncio.run(run(args))


def frame(rng: random.Random, seq: int, running: list[int]) -> str:
    from agent import protocol

    samples = [
        protocol.GpuSample(
            index=g,
            utilization_pct=rng.uniform(0, 100),
            memory_used_mb=rng.randint(0, 81559),
            temperature_c=55.0,
            power_w=350.0,
            ecc_uncorrected=0,
            health="healthy",
            xids=[],
        )
        for g in range(8)
    ]
    return protocol.encode(protocol.Heartbeat(gpus=samples, running=running, id=seq))


async def run(args: argparse.Namespace) -> None:
    from asgiref.sync import sync_to_async

    from scheduler import gateway
    from scheduler.consumers import AgentConsumer
    from scheduler.models import AttemptGPU, Host

    def world() -> tuple[list[Any], dict[int, list[int]]]:
        hosts = list(Host.objects.filter(removed_at__isnull=True).order_by("pk")[: args.hosts])
        running: dict[int, set[int]] = defaultdict(set)
        for host_id, wire_id in AttemptGPU.objects.filter(open=True, attempt__ended_at__isnull=True).values_list(
            "gpu__host_id", "attempt__wire_id"
        ):
            running[host_id].add(wire_id)
        return hosts, {h: sorted(r) for h, r in running.items()}

    hosts, running = await sync_to_async(world)()
    flush_cpu = [0.0]
    real_flush = gateway.flush_heartbeats

    def timed_flush(*a: Any, **k: Any) -> Any:  # the flush thread's CPU
        began = time.thread_time()
        try:
            return real_flush(*a, **k)
        finally:
            flush_cpu[0] += time.thread_time() - began

    gateway.flush_heartbeats = timed_flush
    sent = [0]

    async def send(text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False) -> None:
        sent[0] += 1

    consumers = []
    for host in hosts:  # as connect() and a hello leave a connection
        c = AgentConsumer()
        c.scope = {"type": "websocket", "headers": []}
        c.host, c.seq, c.hello_done, c.reported_running = host, 0, True, set(running.get(host.pk, ()))
        c.sent_starts, c.sent_stops, c.log_requests = set(), set(), {}
        c.lock, c.inbox, c.handler = asyncio.Lock(), asyncio.Queue(maxsize=256), None
        c.live, c.closing, c.generation = True, False, host.link_generation
        c.send = send  # type: ignore[method-assign]
        gateway.hub().register(host.pk, c)
        consumers.append(c)
    rng = random.Random(1)
    frames = [[frame(rng, i, running.get(c.host.pk, [])) for i in range(1, 6)] for c in consumers]
    seq = [0] * len(consumers)

    async def drive(seconds: float) -> int:
        n, began = 0, time.monotonic()
        while time.monotonic() - began < seconds:
            i = rng.randrange(len(consumers))
            await consumers[i].receive(text_data=frames[i][seq[i] % 5])
            seq[i] += 1
            n += 1
            await asyncio.sleep(max(0.0, began + n / args.rate - time.monotonic()))
        return n

    await drive(5.0)
    cpu, wall, loop, flush_cpu[0] = time.process_time(), time.perf_counter(), time.thread_time(), 0.0
    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    n = await drive(args.seconds)
    await asyncio.sleep(1.0)  # the last flush
    if profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    cpu, wall, loop = time.process_time() - cpu, time.perf_counter() - wall, time.thread_time() - loop
    print(
        f"{len(consumers)} connections, {n} heartbeats in {wall:.1f} s ({n / args.seconds:.0f}/s): "
        f"CPU {cpu / n * 1e3:.3f} ms per heartbeat (all threads; event loop {loop / n * 1e3:.3f},"
        f" flushes {flush_cpu[0] / n * 1e3:.3f}), {sent[0]} frames sent; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for c in consumers:
        c.live = False
        gateway.hub().unregister(c.host.pk, c)


if __name__ == "__main__":
    main()
