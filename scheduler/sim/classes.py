"""Workload classes labs care about, assigned from the trace alone (docs/simulation.md, "Workload classes").

- **sweep**: a 1-GPU job in a *burst* of at least ``SWEEP_MIN_JOBS`` 1-GPU jobs of one VC whose
  consecutive submissions are at most ``SWEEP_GAP_S`` apart (a hyper-parameter sweep or array);
- **debug**: otherwise, 1–2 GPUs and a run time of at most ``DEBUG_MAX_S`` (someone waiting at a
  terminal for a short check);
- **training**: otherwise, 2 GPUs or more and a run time above ``DEBUG_MAX_S`` (long multi-GPU work);
- **other**: the rest (lone long 1-GPU jobs, short jobs of 3 GPUs or more).

The order matters: a short 1-GPU job inside a burst is a sweep member, not debug work.
Pure functions of the trace: every policy and every slice of a run sees the same classes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from scheduler.trace import TraceJob

WORKLOAD_CLASSES = ("debug", "training", "sweep", "other")
DEBUG_MAX_S = 30 * 60
SWEEP_GAP_S = 60
SWEEP_MIN_JOBS = 10


def classify(jobs: Iterable[TraceJob]) -> dict[int, str]:
    """The class of every job, by job id (the rules of the module docstring)."""
    jobs = list(jobs)
    sweep: set[int] = set()
    runs: dict[str, list[TraceJob]] = {}  # per VC: the current burst of 1-GPU jobs
    for j in sorted((j for j in jobs if j.num_gpus == 1), key=lambda j: (j.submit_time_s, j.job_id)):
        run = runs.setdefault(j.vc, [])
        if run and j.submit_time_s - run[-1].submit_time_s > SWEEP_GAP_S:
            if len(run) >= SWEEP_MIN_JOBS:
                sweep.update(x.job_id for x in run)
            run.clear()
        run.append(j)
    for run in runs.values():
        if len(run) >= SWEEP_MIN_JOBS:
            sweep.update(x.job_id for x in run)
    out: dict[int, str] = {}
    for j in jobs:
        if j.job_id in sweep:
            out[j.job_id] = "sweep"
        elif j.num_gpus <= 2 and j.duration_s <= DEBUG_MAX_S:
            out[j.job_id] = "debug"
        elif j.num_gpus >= 2 and j.duration_s > DEBUG_MAX_S:
            out[j.job_id] = "training"
        else:
            out[j.job_id] = "other"
    return out


def declares_zero(job_id: int, probability: float) -> bool:
    """Whether a debug job declares ``M = 0`` (runs unallocated) under a probability: a fixed
    pseudo-random number per job id (salted apart from the unallocated rule's hash), so every
    policy and replay sees the same jobs."""
    if probability <= 0:
        return False
    digest = hashlib.sha256(f"fairway:debug-zero:{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < probability
