"""Replay a job trace against a live Fairway: submit its jobs in compressed time, wait, summarise.

    python manage.py replay_trace data/philly/philly_jobs.csv --start 34805 --limit 500 \\
        --time-scale 300 --max-duration 1h

Each trace job becomes a workload submitted through ``do_submit_workload`` (the service the API
uses) by ``--user`` to the budget named ``vc-<vc>``, at the real instant its trace submission maps
to (``--time-scale`` trace seconds per real second). It runs ``agent.standin`` for the compressed
run time. The minimum runtime comes from ``--min-runtime-rule`` / ``--unallocated-rule``
(``scheduler.trace``; docs/demo.md explains the defaults). The whole file is read and checked before
anything is submitted. With ``--wait`` (default) the command waits until every workload is final
and prints a summary; the exit code is 0 only when every job was submitted and (with ``--wait``)
reached a final state.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count
from django.utils import timezone
from tqdm import tqdm

from budgets.models import Budget
from fairway_cli.args import positive_number, whole_number
from scheduler.models import GPU, Attempt, Cluster, Workload
from scheduler.sizes import SizeError, parse_size
from scheduler.trace import (
    DEFAULT_MIN_RUNTIME_RULE,
    DEFAULT_UNALLOCATED_RULE,
    MinRuntimeRule,
    PlannedJob,
    TraceError,
    TraceJob,
    UnallocatedRule,
    format_duration,
    parse_duration,
    plan_replay,
    read_trace,
    select_jobs,
)

DEFAULT_TIME_SCALE = 300.0
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_PROTECTION_ALLOWANCE_S = 1
POLL_S = 0.5
BUDGET_PREFIX = "vc-"


def _duration_arg(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_positive_float = positive_number()
_positive_int = whole_number(1)


@dataclass
class ReplayRun:
    """What one replay submitted, for progress and the summary."""

    plan: list[PlannedJob]
    time_scale: float
    workload_ids: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (trace job id, message)
    clamped: int = 0  # minimum runtimes lowered to MAX_MINIMUM_RUNTIME_S


class Command(BaseCommand):
    help = "Replay a job trace (e.g. data/philly/philly_jobs.csv) through the submission service, time-compressed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("trace", help="trace CSV (columns job_id, submit_time_s, vc, num_gpus, duration_s, ...)")
        start = parser.add_mutually_exclusive_group()
        start.add_argument("--start", type=int, metavar="JOB_ID", help="first trace job to replay")
        start.add_argument("--start-day", type=float, metavar="D", help="start with the first job of day D")
        parser.add_argument("--limit", type=_positive_int, metavar="N", help="replay at most N jobs")
        parser.add_argument(
            "--time-scale",
            type=_positive_float,
            default=DEFAULT_TIME_SCALE,
            metavar="X",
            help=f"trace seconds per real second (default {DEFAULT_TIME_SCALE:g})",
        )
        parser.add_argument(
            "--max-duration",
            type=_duration_arg,
            metavar="SECONDS",
            help="cap each job's run time at this many trace seconds (or 90m, 1h, ...) before compression",
        )
        parser.add_argument(
            "--min-runtime-rule",
            default=DEFAULT_MIN_RUNTIME_RULE,
            help=f"minimum runtime of allocated jobs (default {DEFAULT_MIN_RUNTIME_RULE!r}; "
            "duration | fraction:F | fixed:D, then optional floor:D, cap:D)",
        )
        parser.add_argument(
            "--unallocated-rule",
            default=DEFAULT_UNALLOCATED_RULE,
            help=f"which jobs run unallocated (default {DEFAULT_UNALLOCATED_RULE!r}; vc:NAME, fraction:F, none, all)",
        )
        parser.add_argument(
            "--protection-allowance",
            type=int,
            default=DEFAULT_PROTECTION_ALLOWANCE_S,
            metavar="S",
            help="real seconds added to each allocated job's compressed minimum runtime for process start "
            f"and exit reporting (default {DEFAULT_PROTECTION_ALLOWANCE_S})",
        )
        parser.add_argument(
            "--wall-time-slack",
            type=int,
            default=None,
            metavar="S",
            help="give each job a wall-time limit (max_runtime) of its compressed run time (at least its "
            "minimum runtime) plus S real seconds, as a Slurm user gives --time; the forward simulation "
            "of estimated starts knows when such work ends (docs/estimates.md). Default: no limit",
        )
        parser.add_argument("--cluster", default="philly")
        parser.add_argument("--gpu-model", default="H100")
        parser.add_argument("--user", default="researcher", help="username that submits the workloads")
        parser.add_argument(
            "--submit-limit",
            type=whole_number(0),
            default=0,
            metavar="N",
            help="the most pending + running workloads --user may hold during the replay (default 0: no limit; "
            "the replay submits a whole lab's jobs as one user, so FAIRWAY_MAX_SUBMITTED_PER_USER, a per-user "
            "limit, does not apply unless given here)",
        )
        parser.add_argument(
            "--wait",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="wait until every workload is final, then print the summary (default: wait)",
        )
        parser.add_argument(
            "--timeout",
            type=_positive_float,
            default=DEFAULT_TIMEOUT_S,
            metavar="S",
            help=f"with --wait, give up this many seconds after the last submission (default {DEFAULT_TIMEOUT_S:g})",
        )
        parser.add_argument(
            "--workload-python",
            default=sys.executable,
            metavar="PATH",
            help="the Python the workloads run (python -m agent.standin, standard library only); default: this "
            "one. The demo gives /usr/bin/python3 where the accounts attempts run as cannot use this one",
        )
        parser.add_argument(
            "--cpus-per-gpu",
            type=int,
            default=0,
            metavar="N",
            help="request N CPUs per GPU each job holds on a host (default 0: no request, the host's per-GPU share)",
        )
        parser.add_argument(
            "--memory-per-gpu",
            default="0",
            metavar="SIZE",
            help="request SIZE of memory (e.g. 48G) per GPU each job holds on a host (default 0: the per-GPU share)",
        )
        parser.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="show a tqdm progress bar on stderr (default: on)",
        )

    def handle(self, *args: object, **opts: Any) -> None:
        try:
            min_rule = MinRuntimeRule.parse(opts["min_runtime_rule"])
            unalloc_rule = UnallocatedRule.parse(opts["unallocated_rule"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        time_scale: float = opts["time_scale"]
        max_duration: int | None = opts["max_duration"]
        timeout: float = opts["timeout"]
        wait: bool = opts["wait"]
        progress: bool = opts["progress"]
        gpu_model: str = opts["gpu_model"]
        allowance: int = opts["protection_allowance"]
        if allowance < 0:
            raise CommandError("--protection-allowance must be >= 0")
        slack: int | None = opts["wall_time_slack"]
        if slack is not None and slack < 0:
            raise CommandError("--wall-time-slack must be >= 0")
        try:
            per_gpu = (int(opts["cpus_per_gpu"]), parse_size(opts["memory_per_gpu"]))
        except SizeError as exc:
            raise CommandError(f"--memory-per-gpu: {exc}") from None
        if per_gpu[0] < 0:
            raise CommandError("--cpus-per-gpu must be >= 0")

        # Read and check the whole file first: a bad file submits nothing.
        try:
            jobs = read_trace(opts["trace"])
            jobs = select_jobs(jobs, start_job_id=opts["start"], start_day=opts["start_day"], limit=opts["limit"])
        except TraceError as exc:
            raise CommandError(f"bad trace, nothing submitted: {exc}") from None
        except ValueError as exc:
            raise CommandError(f"{exc}; nothing submitted") from None
        if not jobs:
            raise CommandError("no jobs selected")

        user, cluster, budgets = self._resolve(jobs, opts["user"], opts["cluster"])
        plan = plan_replay(
            jobs,
            time_scale=time_scale,
            max_duration_s=max_duration,
            min_runtime_rule=min_rule,
            unallocated_rule=unalloc_rule,
            protection_allowance_s=allowance,
        )
        run = ReplayRun(plan=plan, time_scale=time_scale)

        n_unalloc = sum(1 for p in plan if not p.allocated)
        cap_text = format_duration(max_duration) if max_duration is not None else "none"
        self.stdout.write(
            f"Replaying {len(plan)} jobs ({jobs[0].job_id}..{jobs[-1].job_id}) of {opts['trace']} "
            f"on cluster {cluster.name} ({gpu_model}) as {user.get_username()}\n"
            f"  time scale {time_scale:g} trace s per real s: {format_duration(plan[-1].offset_s)} of "
            f"submissions ({format_duration(plan[-1].offset_s * time_scale)} of trace), run-time cap {cap_text}\n"
            f"  minimum runtime: {min_rule.describe()} ({min_rule.spec}), compressed, + {allowance} s allowance\n"
            f"  unallocated: {unalloc_rule.describe()} ({unalloc_rule.spec}): "
            f"{n_unalloc} of {len(plan)} jobs"
            + (f"\n  wall-time limit: run time + {slack} s" if slack is not None else "")
        )
        self.stdout.flush()

        started = time.monotonic()
        interrupted = False
        bar = progress_bar(len(plan), enabled=progress)
        try:
            self._submit_all(
                run, bar, user=user, cluster=cluster, budgets=budgets, gpu_model=gpu_model,
                python=str(opts["workload_python"]), per_gpu=per_gpu, wall_time_slack=slack,
                submit_limit=int(opts["submit_limit"]),
            )  # fmt: skip
            if wait:
                self._wait(run, bar, timeout=timeout)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
        if interrupted:
            self.stderr.write("interrupted")
        elapsed = time.monotonic() - started

        if run.clamped:
            self.stdout.write(
                f"  note: {run.clamped} minimum runtimes were lowered to MAX_MINIMUM_RUNTIME_S "
                f"({settings.FAIRWAY['MAX_MINIMUM_RUNTIME_S']} s)"
            )
        for job_id, message in run.rejected[:20]:
            self.stderr.write(f"  rejected trace job {job_id}: {message}")
        if len(run.rejected) > 20:
            self.stderr.write(f"  ... and {len(run.rejected) - 20} more rejections")

        if wait or interrupted:
            summary = summarize(run.workload_ids, time_scale=time_scale)
            self.stdout.write(
                format_summary(summary, elapsed_s=elapsed, time_scale=time_scale, rejected=len(run.rejected))
            )
        else:
            self.stdout.write(
                f"Submitted {len(run.workload_ids)} of {len(plan)} jobs in {elapsed:.1f} s (not waiting)."
            )

        if interrupted:
            raise CommandError("interrupted", returncode=130)
        if run.rejected:
            raise CommandError(f"{len(run.rejected)} of {len(plan)} jobs were rejected at submission")
        if wait:
            open_count = len(run.workload_ids) - finished_count(run.workload_ids)
            if open_count:
                raise CommandError(
                    f"{open_count} of {len(run.workload_ids)} workloads did not reach a final state "
                    f"within {timeout:g} s after the last submission"
                )

    # --- setup -------------------------------------------------------------------------------

    def _resolve(
        self, jobs: Sequence[TraceJob], username: str, cluster_name: str
    ) -> tuple[Any, Cluster, dict[str, Budget]]:
        """The submitting user, the cluster and the budget of each VC; CommandError before any submission."""
        user_model = get_user_model()
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: username})
        except user_model.DoesNotExist:
            raise CommandError(f"no user {username!r} (run `manage.py seed_demo` first)") from None
        try:
            cluster = Cluster.objects.get(name=cluster_name)
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster {cluster_name!r} (run `manage.py seed_demo` first)") from None
        budgets: dict[str, Budget] = {}
        missing: list[str] = []
        for vc in sorted({j.vc for j in jobs}):
            name = f"{BUDGET_PREFIX}{vc}"
            found = list(Budget.objects.filter(name=name, archived_at__isnull=True)[:2])
            if len(found) != 1:
                missing.append(name if not found else f"{name} (ambiguous: {len(found)} live budgets)")
            else:
                budgets[vc] = found[0]
        if missing:
            raise CommandError(
                f"no budget for {len(missing)} VC(s) of the selected jobs: {', '.join(missing)}; "
                "nothing submitted (seed_demo creates one project vc-<vc> per Philly VC)"
            )
        return user, cluster, budgets

    # --- submitting --------------------------------------------------------------------------

    def _submit_all(
        self,
        run: ReplayRun,
        bar: tqdm,
        *,
        user: Any,
        cluster: Cluster,
        budgets: dict[str, Budget],
        gpu_model: str,
        python: str = sys.executable,
        per_gpu: tuple[int, int] = (0, 0),
        wall_time_slack: int | None = None,
        submit_limit: int = 0,
    ) -> None:
        """Submit every planned job at its instant, updating ``bar`` (finished, with submitted as postfix).

        ``per_gpu``: CPUs and memory bytes to request per GPU a job holds on one host (0: no
        request); a gang holds a whole host on each, so its request is per host of the model."""
        from scheduler.services import SubmissionError, do_submit_workload

        host_size = max(
            Counter(
                GPU.objects.filter(host__cluster=cluster, model=gpu_model).values_list("host_id", flat=True)
            ).values(),
            default=1,
        )

        max_m = int(settings.FAIRWAY["MAX_MINIMUM_RUNTIME_S"])
        t_start = time.monotonic()
        last_poll = 0.0
        for planned in run.plan:
            due = t_start + planned.offset_s
            while True:
                now = time.monotonic()
                if now - last_poll >= POLL_S and not bar.disable:
                    self._update(run, bar)
                    last_poll = now
                if now >= due:
                    break
                time.sleep(min(POLL_S, due - now))
            job = planned.job
            m = planned.min_runtime_s
            if m > max_m:
                m = max_m
                run.clamped += 1
            try:
                workload = do_submit_workload(
                    user,
                    name=f"philly-{job.job_id}",
                    budget=budgets[job.vc],
                    cluster=cluster,
                    gpu_model=gpu_model,
                    gpu_count=job.num_gpus,
                    image="",
                    command=[python, "-m", "agent.standin", "--duration", f"{planned.run_s:.2f}"],
                    env={
                        "TRACE_JOB_ID": {"value": str(job.job_id), "secret": False},
                        "TRACE_VC": {"value": job.vc, "secret": False},
                    },
                    min_runtime_s=m,
                    max_runtime_s=(
                        max(m, math.ceil(planned.run_s)) + wall_time_slack if wall_time_slack is not None else None
                    ),
                    duration_hint_s=math.ceil(planned.run_s),
                    cpus=per_gpu[0] * min(job.num_gpus, host_size) or None,
                    memory_bytes=per_gpu[1] * min(job.num_gpus, host_size) or None,
                    submitted_limit=submit_limit,
                )
            except SubmissionError as exc:
                where = f" ({exc.field})" if getattr(exc, "field", None) else ""
                run.rejected.append((job.job_id, f"{getattr(exc, 'code', 'error')}{where}: {exc}"))
            else:
                run.workload_ids.append(workload.pk)
        self._update(run, bar)

    def _update(self, run: ReplayRun, bar: tqdm) -> int:
        """Refresh the bar: n = finished workloads; postfix = submitted so far. Returns finished."""
        done = finished_count(run.workload_ids)
        bar.set_postfix_str(f"submitted {len(run.workload_ids) + len(run.rejected)}/{len(run.plan)}", refresh=False)
        bar.update(done - bar.n)
        return done

    def _wait(self, run: ReplayRun, bar: tqdm, *, timeout: float) -> None:
        """Poll until every submitted workload is final or ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        while True:
            done = self._update(run, bar)
            if done >= len(run.workload_ids) or time.monotonic() >= deadline:
                return
            time.sleep(POLL_S)


def progress_bar(total: int, *, enabled: bool) -> tqdm:
    """One bar on stderr: finished workloads of ``total``, submitted ones as postfix. Off a terminal
    it redraws at most every 10 s, so logs get a line per 10 s instead of one per poll."""
    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc="finished",
        unit="job",
        disable=not enabled,
        dynamic_ncols=tty,
        mininterval=0.5 if tty else 10.0,
        # Off a terminal, end each redraw with a newline: a log gets lines, not carriage returns.
        bar_format=None if tty else "{l_bar}{bar:20}{r_bar}\n",
        ascii=not tty,
        file=sys.stderr,
    )


# --- summary -------------------------------------------------------------------------------------


def finished_count(workload_ids: Sequence[int]) -> int:
    """How many of these workloads are in a final state."""
    if not workload_ids:
        return 0
    return Workload.objects.filter(id__in=workload_ids, state__in=Workload.FINAL_STATES).count()


@dataclass
class BudgetHours:
    allocated_s: float = 0.0  # GPU-seconds
    unallocated_s: float = 0.0


@dataclass
class ReplaySummary:
    """Figures of a replay, from the database (real seconds unless named trace)."""

    submitted: int
    states: Counter
    preemptions: int
    preempted_workloads: int
    preemptions_allocated: int  # of ``preemptions``: attempts that were funded (past their protection)
    started: int
    waits_s: list[float]
    gpu_seconds: dict[str, BudgetHours]
    open_attempts: int

    @property
    def mean_wait_s(self) -> float | None:
        return sum(self.waits_s) / len(self.waits_s) if self.waits_s else None

    @property
    def p90_wait_s(self) -> float | None:
        return percentile(self.waits_s, 0.9)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (the smallest value with at least ``q`` of the values at or below it)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def summarize(workload_ids: Sequence[int], *, time_scale: float, now: datetime | None = None) -> ReplaySummary:
    """Read the outcome of the replayed workloads.

    Wait: from the workload's submission to its first agent-confirmed start (``Attempt.started_at``)
    in real seconds, over the workloads that started. GPU time: per attempt, GPUs × (release or now −
    confirmed start), allocated when the attempt was funded (``allocated`` and not ``unfunded``).
    Preemptions: attempts that ended ``preempted``.
    """
    now = now or timezone.now()
    ids = list(workload_ids)
    workloads = {w.pk: w for w in Workload.objects.filter(id__in=ids).select_related("budget")}
    states = Counter(w.state for w in workloads.values())
    attempts = list(
        Attempt.objects.filter(workload_id__in=ids)
        .annotate(n_gpus=Count("gpu_links"))
        .only("id", "workload_id", "allocated", "unfunded", "started_at", "ended_at", "end_reason")
    )
    first_start: dict[int, datetime] = {}
    preemptions = preemptions_allocated = 0
    preempted: set[int] = set()
    gpu_seconds: dict[str, BudgetHours] = defaultdict(BudgetHours)
    open_attempts = 0
    for a in attempts:
        if a.ended_at is None:
            open_attempts += 1
        if a.end_reason == Attempt.EndReason.PREEMPTED:
            preemptions += 1
            preempted.add(a.workload_id)
            if a.allocated and not a.unfunded:
                preemptions_allocated += 1
        if a.started_at is None:
            continue
        if a.workload_id not in first_start or a.started_at < first_start[a.workload_id]:
            first_start[a.workload_id] = a.started_at
        end = a.ended_at or now
        secs = max(0.0, (end - a.started_at).total_seconds()) * a.n_gpus
        hours = gpu_seconds[workloads[a.workload_id].budget.name]
        if a.allocated and not a.unfunded:
            hours.allocated_s += secs
        else:
            hours.unallocated_s += secs
    waits = [max(0.0, (first_start[wid] - workloads[wid].submitted_at).total_seconds()) for wid in first_start]
    return ReplaySummary(
        submitted=len(ids),
        states=states,
        preemptions=preemptions,
        preempted_workloads=len(preempted),
        preemptions_allocated=preemptions_allocated,
        started=len(first_start),
        waits_s=waits,
        gpu_seconds=dict(gpu_seconds),
        open_attempts=open_attempts,
    )


def format_summary(s: ReplaySummary, *, elapsed_s: float, time_scale: float, rejected: int = 0) -> str:
    """The summary as printed by the command (real figures and their trace-time equivalents)."""

    def wait_text(value: float | None) -> str:
        if value is None:
            return "n/a"
        return f"{value:6.1f} s real = {value * time_scale / 60:7.1f} min of trace"

    final = sum(s.states.get(state, 0) for state in Workload.FINAL_STATES)
    not_final = {k: v for k, v in s.states.items() if k not in Workload.FINAL_STATES}
    lines = [
        "",
        f"Replay summary ({elapsed_s:.0f} s of real time, time scale {time_scale:g})",
        f"  submitted           {s.submitted}" + (f"   (+{rejected} rejected)" if rejected else ""),
        f"  completed           {final}   succeeded {s.states.get('succeeded', 0)}, "
        f"failed {s.states.get('failed', 0)}, canceled {s.states.get('canceled', 0)}",
    ]
    if not_final:
        lines.append("  not final           " + ", ".join(f"{k} {v}" for k, v in sorted(not_final.items())))
    lines += [
        f"  preempted           {s.preemptions} preemptions of {s.preempted_workloads} workloads "
        f"({s.preemptions - s.preemptions_allocated} of unallocated attempts, {s.preemptions_allocated} of allocated)",
        f"  wait to first start ({s.started} started workloads)",
        f"    mean              {wait_text(s.mean_wait_s)}",
        f"    p90               {wait_text(s.p90_wait_s)}",
        "  GPU-hours per budget (from attempts; real, and trace-equivalent = real × time scale)",
        f"    {'budget':<14} {'allocated':>10} {'unallocated':>12} {'alloc (trace)':>14} {'unalloc (trace)':>16}",
    ]
    tot_a = tot_u = 0.0
    for name in sorted(s.gpu_seconds):
        h = s.gpu_seconds[name]
        tot_a += h.allocated_s
        tot_u += h.unallocated_s
        lines.append(_hours_row(name, h.allocated_s, h.unallocated_s, time_scale))
    lines.append(_hours_row("total", tot_a, tot_u, time_scale))
    return "\n".join(lines)


def _hours_row(name: str, alloc_s: float, unalloc_s: float, scale: float) -> str:
    return (
        f"    {name:<14} {alloc_s / 3600:10.3f} {unalloc_s / 3600:12.3f} "
        f"{alloc_s * scale / 3600:14.1f} {unalloc_s * scale / 3600:16.1f}"
    )
