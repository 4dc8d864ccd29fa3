"""CPU of one agent ``started`` event on the agent-database thread path, in this process. Prints, asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairway_load python bench/attempt_event_cpu.py [--n 300] [--profile]

Run on the database ``bench/agents_load.py`` left behind (its started attempts): each round makes
one started attempt unconfirmed again (``started_at`` cleared, its workload ``starting``; not
timed), then times ``consumers._attempt_event`` for a ``started`` report as the agent threads run
it (``gateway._closing_connections``: the pooled connection taken and given back) by the thread's
CPU (``time.thread_time``). Writes to that database. ``--profile``: cProfile by thread CPU. Also
prints the statements of one such event (hb34: 15 → 9, BEGIN and COMMIT included, for an owner without
notification settings)."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300, help="events measured (after 20 unmeasured)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    import django

    django.setup()
    from django.db import connection, connections
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from agent import protocol
    from scheduler import consumers, gateway
    from scheduler.models import Attempt, AttemptGPU, Host, Workload

    rows = list(
        AttemptGPU.objects.filter(open=True, attempt__ended_at__isnull=True, attempt__started_at__isnull=False)
        .values_list("attempt_id", "attempt__wire_id", "gpu__host_id")
        .distinct()[: args.n + 20]
    )
    hosts = {h.pk: h for h in Host.objects.filter(pk__in={r[2] for r in rows})}
    connections.close_all()
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    event = gateway._closing_connections(consumers._attempt_event.func)  # noqa: SLF001 -- what the threads run

    def unconfirm(attempt_id: int) -> None:
        Attempt.objects.filter(pk=attempt_id).update(started_at=None, protected_until=None)
        Workload.objects.filter(attempts__pk=attempt_id).update(state=Workload.State.STARTING)

    def one(i: int, attempt_id: int, wire: int, host_id: int) -> float:
        unconfirm(attempt_id)
        connections.close_all()
        host = hosts[host_id]
        msg = protocol.AttemptEvent(attempt_id=wire, state="started", id=1)
        began = time.thread_time()
        if profile is not None and i >= 20:
            profile.enable()
        event(host, host.link_generation, msg, timezone.now())
        if profile is not None and i >= 20:
            profile.disable()
        return time.thread_time() - began

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        spent = []
        for i, (attempt_id, wire, host_id) in enumerate(rows):
            seconds = await loop.run_in_executor(gateway.agent_db_executor(), one, i, attempt_id, wire, host_id)
            if i >= 20:
                spent.append(seconds)
        return spent

    spent = sorted(asyncio.run(run()))
    print(
        f"started event, CPU ms: mean {1000 * sum(spent) / len(spent):.3f}, "
        f"median {1000 * spent[len(spent) // 2]:.3f} ({len(spent)} events)"
    )
    attempt_id, wire, host_id = rows[0]
    unconfirm(attempt_id)
    host = hosts[host_id]
    with CaptureQueriesContext(connection) as ctx:
        consumers._attempt_event.func(  # noqa: SLF001
            host, host.link_generation, protocol.AttemptEvent(attempt_id=wire, state="started", id=1), timezone.now()
        )
    print(f"statements of one event: {len(ctx.captured_queries)} (BEGIN and COMMIT included)")
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
