"""Estimate quality on a trace (DESIGN.md §3.8, docs/estimates.md): how good is "by 14:05 at the latest"?

The trace simulator (:class:`~scheduler.sim.simulate.TraceSim`, Fairway's policy) runs as usual;
after the pass that follows a sampled job's arrival (its *arrival pass*), if the job is still
pending, one forward simulation (:func:`scheduler.sim.estimate.forward`, the function the live
``estimate_starts`` actor runs) gives it its **first estimate**, as the live system would store it
right after the tick that saw it. At the end each first estimate is compared with the job's
actual (simulated) first start:

- ``fraction_started_by_estimate``: the jobs that started no later than their first estimate said
  (the estimate is an upper bound: new arrivals of less-served budgets can only push a start back,
  work ending on its own can only bring it forward);
- ``median_error_h``: the median of (actual start − first estimate), in hours; negative means the
  job started earlier than estimated (the bound held).

Forward simulations are costly, so they are sampled (:class:`Sampling`): ``rate`` keeps a fixed
fraction of the allocated jobs (chosen by a hash of the job id, deterministic), ``every_s`` runs
at most one forward simulation per that much simulated time (the sampled arrivals since the last
one, still pending, are estimated together, as the live clock does every
``FAIRWAY_ESTIMATE_INTERVAL_S``), ``budget_s`` bounds each run's CPU seconds (a run cut short
leaves the jobs it did not reach without an estimate, counted as ``cut``). Only allocated jobs
(``M > 0``) are sampled: the coverage the demo reports counts only those, and unallocated work
starts only on idle GPUs. A job that started before a forward simulation estimated it (with
``every_s`` 0: in its arrival pass) needs no estimate and is counted apart (``started_unestimated``).
A job estimated to start before the horizon that had not started by then counts as not started
by its estimate; one estimated after the horizon that had not started is left out (``open``).
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from scheduler.policy import Workload
from scheduler.sim.estimate import forward
from scheduler.sim.simulate import DAY, T0, Inputs, TraceSim, _tw, make_policy, percentile
from scheduler.trace import TraceJob


@dataclass(frozen=True)
class Sampling:
    """Which jobs get a first estimate, and how often a forward simulation runs (module docstring)."""

    rate: float = 1.0
    """Fraction of the allocated jobs sampled (by a hash of the job id)."""
    every_s: int = 0
    """At most one forward simulation per this many simulated seconds (0: at every arrival pass)."""
    budget_s: float = 2.0
    """CPU seconds one forward simulation may take (as the live actor's ``ESTIMATE_BUDGET_S``)."""
    from_day: float = 0.0
    """Sample only jobs arriving on or after this day of the simulated slice."""
    wall_time_slack_s: int | None = None
    """If set, every job declares a wall-time limit of its run time plus this many seconds (as a
    Slurm user gives ``--time``; no job reaches it, so the trace runs as without): the forward
    simulations then know when running work ends (docs/estimates.md). None: no limits, nothing
    ends on its own in the forward simulation."""

    def check(self) -> None:
        if not (math.isfinite(self.budget_s) and math.isfinite(self.from_day)):  # nan passed the checks below
            raise ValueError("estimate sampling: --estimate-budget and --estimate-from-day must be finite numbers")
        if not 0 < self.rate <= 1:
            raise ValueError(f"estimate sampling rate {self.rate}: a fraction in (0, 1]")
        if self.every_s < 0 or self.budget_s <= 0 or self.from_day < 0 or (self.wall_time_slack_s or 0) < 0:
            raise ValueError("estimate sampling: every_s ≥ 0, budget_s > 0, from_day ≥ 0 and wall_time_slack_s ≥ 0")


def sampled(job_id: int, rate: float) -> bool:
    """Whether ``job_id`` is in the ``rate`` sample: the first 8 bytes of
    ``sha256("fairway-estimate:<job_id>")`` as a number in [0, 1) below ``rate``."""
    if rate >= 1:
        return True
    h = hashlib.sha256(f"fairway-estimate:{job_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < rate


class EstimatingSim(TraceSim):
    """:class:`TraceSim` that records the first estimate of the sampled jobs (module docstring)."""

    def __init__(self, inputs: Inputs, sampling: Sampling) -> None:
        policy, charge_all = make_policy("fairway")
        super().__init__(inputs, policy, charge_all=charge_all)
        self.sampling = sampling
        self.first: dict[str, int | None] = {}
        """Sampled job → its first estimate (None: none within one window, or the run was cut)."""
        self.cut: set[str] = set()
        self.unestimated: set[str] = set()
        self.fresh: list[str] = []
        self.runs = 0
        self.cut_runs = 0
        self.cpu_s = 0.0
        self._next_run = 0
        self._from = T0 + int(sampling.from_day * DAY)

    def _arrive(self, job: TraceJob) -> bool:
        due = super()._arrive(job)
        w = self.workloads.get(f"j{job.job_id}")
        if w is not None and w.min_runtime > 0 and self.now >= self._from and sampled(job.job_id, self.sampling.rate):
            self.fresh.append(w.id)
        return due

    def _pass(self) -> None:
        arrived = self.fresh
        super()._pass()
        if not arrived:
            return
        waiting = []
        for wid in arrived:
            if self.workloads[wid].first_start is not None and wid not in self.first:
                self.unestimated.add(wid)
            elif self.workloads[wid].state == "pending":
                waiting.append(wid)
        self.fresh = waiting
        if not waiting or self.now < self._next_run:
            return
        self._next_run = self.now + self.sampling.every_s
        self.fresh = []
        snap = self.snapshot()
        running: dict[str, Workload] = {}
        for a in self.attempts.values():
            running[a.workload] = self.workloads[a.workload].as_pending()
        limits = None
        slack = self.sampling.wall_time_slack_s
        if slack is not None:
            limits = {
                wid: _tw(self.workloads[wid]).duration + slack for wid in (*running, *(w.id for w in snap.pending))
            }
        t = time.process_time()
        found, reached = forward(
            snap,
            grace=self.grace,
            budget_s=self.sampling.budget_s,
            only=waiting,
            running=running,
            limits=limits,
            requeued=self.requeued(),
        )
        self.cpu_s += time.process_time() - t
        self.runs += 1
        complete = reached >= snap.now + snap.window
        self.cut_runs += not complete
        for wid in waiting:
            self.first[wid] = found.get(wid)
            if wid not in found and not complete:
                self.cut.add(wid)


def estimate_quality(inputs: Inputs, sampling: Sampling | None = None) -> dict[str, Any]:
    """Run Fairway on ``inputs`` and report the quality of the sampled first estimates (module
    docstring). Deterministic unless a forward simulation runs out of ``budget_s``."""
    sampling = sampling or Sampling()
    sampling.check()
    sim = EstimatingSim(inputs, sampling)
    sim.run()
    horizon = sim.horizon
    errors: list[float] = []
    held = judged = still_open = none = 0
    for wid, est in sim.first.items():
        if est is None:
            none += 1
            continue
        start = sim.workloads[wid].first_start
        if start is None:
            if est >= horizon:
                still_open += 1
                continue
            judged += 1  # estimated before the horizon, not started by then: the bound failed
            continue
        judged += 1
        held += start <= est
        errors.append((start - est) / 3600)
    cut = len(sim.cut)
    return {
        "sampling": {
            "rate": sampling.rate,
            "every_s": sampling.every_s,
            "budget_s": sampling.budget_s,
            "from_day": sampling.from_day,
            "wall_time_slack_s": sampling.wall_time_slack_s,
        },
        "jobs_sampled": len(sim.first) + len(sim.unestimated),
        "started_unestimated": len(sim.unestimated),
        "estimated": len(sim.first) - none,
        "no_estimate": none - cut,
        "cut": cut,
        "open": still_open,
        "judged": judged,
        "started_by_estimate": held,
        "fraction_started_by_estimate": round(held / judged, 4) if judged else None,
        "median_error_h": round(statistics.median(errors), 3) if errors else None,
        "p10_error_h": _r(percentile(errors, 10)),
        "p90_error_h": _r(percentile(errors, 90)),
        "forward_runs": sim.runs,
        "forward_runs_cut": sim.cut_runs,
        "forward_cpu_s": round(sim.cpu_s, 1),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
