"""Busy random traces on a small cluster, run through the trace simulator with every pass checked:
the incremental scheduler under ``check=True`` (its kept answers compared with fresh ones) must
decide what a fresh ``schedule()`` of the same snapshot decides. Shared by the tests of the
policy's kept state (tests/policy/test_tail.py, test_change_log.py) and the simulator's.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from scheduler.policy import Decisions, IncrementalScheduler, Snapshot, schedule
from scheduler.sim.simulate import SimConfig, TraceSim, prepare

HEADER = "job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n"


def random_trace(
    tmp_path: Path, seed: int, *, jobs: int, gap_s: int, sizes: list[int], longest_s: int, **cfg: Any
) -> Any:
    """``jobs`` jobs of random ``sizes`` (GPUs) and durations (1 min to ``longest_s``), submitted
    0 to ``gap_s`` apart into four budgets; the simulator's inputs for ``SimConfig(**cfg)``."""
    rng = random.Random(seed)
    rows, t = [], 0
    for i in range(jobs):
        t += rng.randint(0, gap_s)
        g = rng.choice(sizes)
        d = rng.randint(60, longest_s)
        rows.append(f"{i},{t},{rng.choice(['aa', 'aa', 'bb', 'cc', 'dd'])},{g},{d},{d}\n")
    path = tmp_path / f"trace{seed}.csv"
    path.write_text(HEADER + "".join(rows))
    return prepare(SimConfig(trace=str(path), **cfg))


def busy_trace(tmp_path: Path, seed: int, **cfg: Any) -> Any:
    """:func:`random_trace` of a busy cluster (by default 260 jobs of up to 16 GPUs, up to 8 h, on 4
    hosts of 8 GPUs, two reservations): queues, preemptions and reservations in every run; ``cfg``
    overrides or adds to these (and ``SimConfig``'s)."""
    busy: dict[str, Any] = {
        "jobs": 260,
        "gap_s": 600,
        "sizes": [1, 1, 1, 2, 2, 4, 8, 16],
        "longest_s": 8 * 3600,
        "hosts": 4,
        "gpus_per_host": 8,
        "grace_s": 30,
        "max_reservations": 2,
    }
    return random_trace(tmp_path, seed, **{**busy, **cfg})


def run_checked(inputs: Any) -> None:
    """Run ``inputs`` with every pass decided by ``IncrementalScheduler(check=True)`` and compared
    with a fresh ``schedule()`` (which keeps nothing between passes)."""
    inc = IncrementalScheduler(check=True)

    def both(snap: Snapshot) -> Decisions:
        dec = inc(snap)
        assert dec == schedule(snap)
        return dec

    TraceSim(inputs, both).run()
