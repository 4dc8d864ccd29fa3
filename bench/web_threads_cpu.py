"""CPU of the thread a request's synchronous work runs on, without Django's request. Prints, asserts nothing.

    python bench/web_threads_cpu.py [--n 3000] [--rounds 3] [--threads 4]

``fresh``: what Django's ``ASGIHandler.__call__`` does per request, a new ``ThreadSensitiveContext()``
(a new single-thread executor: an OS thread started, and joined by another thread at its exit)
and one thread-sensitive hop (``SyncChainASGIHandler``'s one hop per request). ``pooled``: the
same hop on an executor lent by ``config.overload.SyncThreadPool`` (reused threads) in a
``LentThreadContext``, as ``SyncChainASGIHandler`` does. Alternated,
``--rounds`` times; CPU microseconds per request (``time.process_time``: every thread).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    import django

    django.setup()
    from asgiref.sync import ThreadSensitiveContext, sync_to_async

    from config.overload import LentThreadContext, SyncThreadPool

    def work() -> int:
        return 1

    async def fresh() -> None:
        for _ in range(args.n):
            async with ThreadSensitiveContext():
                await sync_to_async(work, thread_sensitive=True)()

    async def pooled() -> None:
        pool = SyncThreadPool(args.threads)
        for _ in range(args.n):
            executor = await pool.acquire()
            try:
                async with LentThreadContext(executor):
                    await sync_to_async(work, thread_sensitive=True)()
            finally:
                pool.release(executor)

    for round_ in range(1, args.rounds + 1):
        for name, run in (("fresh", fresh), ("pooled", pooled)):
            started = time.process_time()
            asyncio.run(run())
            print(f"round {round_} {name:6} {(time.process_time() - started) / args.n * 1e6:6.0f} us CPU per request")


if __name__ == "__main__":
    main()
