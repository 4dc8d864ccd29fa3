"""A cluster's past, imported (``manage.py import_history``; docs/demo.md, README).

Two sources:

- **the Philly trace**: the days before a start job, run through the real policy on the
  cluster's own hosts and budgets (``scheduler.sim.engine``), shifted so that they end now, and
  written as finished workloads, attempts (with their GPUs) and events, in bulk;
- **a Slurm accounting export** (``sacct -a -X -P --duplicates -S <start> -o
  JobID,User,Account,AllocTRES,Start,End,State``): every job that held GPUs becomes a usage
  interval (``UsageEntry``) of the budget named by its Account, noted with its JobID and User, so a
  lab moving from Slurm keeps its window of usage; one still running at the export counts to the
  import's instant (:data:`SACCT_RUNNING_NOTE`).

Every problem is found before anything is written: :class:`HistoryError` lists them all, one a
line, and the database is unchanged.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import F

from budgets.models import Budget, UsageEntry
from budgets.services import budget_paths
from fairway_cli.numbers import instant_text
from scheduler.gpu_text import invisible_problem
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, HostEvent, Workload, WorkloadEvent
from scheduler.stop_rules import REQUEUE_REASONS
from scheduler.trace import MinRuntimeRule, TraceJob, UnallocatedRule, job_hash_fraction

PHILLY_PREFIX = "vc-"
CUT = "canceled"
"""The end of an attempt still running at the import's instant: cut there (no agent goes on with it)."""
CUT_MESSAGE = "imported history: still running at the end of the imported span, cut there"


class HistoryError(ValueError):
    """Bad input; ``problems`` lists every one (``str()`` joins them, one a line)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


# --- the Philly trace through the simulator ------------------------------------------------------


@dataclass
class PastAttempt:
    gpus: tuple[tuple[str, int], ...]
    allocated: bool
    started_at: int
    ended_at: int
    end_reason: str
    stopped_at: int | None = None
    """When its stop was asked (a preemption, a drain): its GPUs were released a grace later, at
    ``ended_at``; None for one that ended by itself or was cut at the import's instant."""


@dataclass
class PastWorkload:
    job: TraceJob
    budget_key: str
    min_runtime: int
    submitted_at: int
    attempts: list[PastAttempt] = field(default_factory=list)
    state: str = "pending"
    run_s: int | None = None
    """The run it was given: the trace's, capped at ``max_duration`` (the replay's hint, too)."""
    remaining: int | None = None
    """The run time left at the import's instant of one pending again there (requeued)."""
    waiting_canceled: bool = False
    """Pending again at the import's instant and canceled there on request (:func:`cancel_waiting`)."""


@dataclass
class PhillyHistory:
    workloads: list[PastWorkload]
    start: int
    end: int
    sampled: float
    skipped_vcs: dict[str, int]


SAMPLE_SALT = "fairway-history-sample"


def choose_jobs(
    jobs: Sequence[TraceJob], before_job: int, days: float, *, capacity_gpus: int, load: float, max_duration: int
) -> tuple[list[TraceJob], float]:
    """The jobs submitted in the ``days`` before job ``before_job``, sampled (deterministically, by
    job id) so that their GPU-time, each capped at ``max_duration``, is about ``load`` × the
    cluster's capacity over the span, independently of which of them the unallocated rule picks.
    Returns the jobs and the fraction kept."""
    index = next((i for i, j in enumerate(jobs) if j.job_id == before_job), None)
    if index is None:
        raise HistoryError([f"job {before_job} is not in the trace"])
    end = jobs[index].submit_time_s
    start = end - int(days * 86400)
    span = [j for j in jobs[:index] if j.submit_time_s >= start]
    demand = sum(j.num_gpus * min(j.duration_s, max_duration) for j in span)
    capacity = capacity_gpus * (end - start)
    fraction = 1.0 if demand <= 0 else min(1.0, load * capacity / demand)
    # Its own salt: with the unallocated rule's hash, a sample of F <= 10 % would keep only the
    # jobs that rule makes unallocated (a history with no charged work at all).
    return [j for j in span if job_hash_fraction(j.job_id, SAMPLE_SALT) < fraction], fraction


def simulate_philly(
    jobs: Sequence[TraceJob],
    *,
    trace_end_s: int,
    now: int,
    snapshot_hosts: Sequence,  # noqa: ANN001 -- policy Hosts
    budgets: Sequence,  # noqa: ANN001 -- policy Budgets
    budget_key_of: dict[str, str],
    min_rule: MinRuntimeRule,
    unalloc_rule: UnallocatedRule,
    max_duration: int,
    grace: int,
    window: int,
    tick_interval: int = 600,
) -> PhillyHistory:
    """Run ``jobs`` (trace seconds; ``trace_end_s`` maps to ``now``) through the policy on the
    given hosts and budgets (``budget_key_of``: Philly VC → policy budget key; jobs of other VCs
    are skipped and counted). Pure: no database."""
    from scheduler.policy import GpuHealth, HostState
    from scheduler.sim.engine import Engine, SimAttempt, SimWorkload

    shift = now - trace_end_s
    skipped: dict[str, int] = {}
    kept = []
    for j in jobs:
        if j.vc in budget_key_of:
            kept.append(j)
        else:
            skipped[j.vc] = skipped.get(j.vc, 0) + 1
    start = (kept[0].submit_time_s + shift) if kept else now
    e = Engine(start=start, window=window, tick_interval=tick_interval, grace=grace, with_reasons=False)
    for b in budgets:
        e.add_budget(b)
    # The past ran on the cluster's hosts as registered, each active and healthy (as the what-if's,
    # scheduler.sim.dbdemand): today's states are not the past's, and a host whose agent has not
    # said hello yet is offline (the demo imports before its agents start: "imported 0", try32).
    for h in snapshot_hosts:
        e.add_host(
            replace(
                h, state=HostState.ACTIVE, drain_now=False, gpu_health=dict.fromkeys(h.gpu_health, GpuHealth.HEALTHY)
            )
        )
    model = next(iter(snapshot_hosts)).model if snapshot_hosts else ""
    past: dict[str, PastWorkload] = {}

    def on_release(a: SimAttempt, reason: str, at: int) -> None:
        stopped = a.stop_at if reason not in ("succeeded", "failed") else None
        past[a.workload].attempts.append(PastAttempt(a.gpus, a.allocated, a.started_at, at, reason, stopped))

    e.on_release = on_release
    sizes = {h.name: len(h.gpu_health) for h in snapshot_hosts}
    biggest = max(sizes.values(), default=0)
    for j in kept:
        t = j.submit_time_s + shift
        if t > e.now:
            e.advance_to(t)
        gpus = j.num_gpus
        if biggest and gpus > biggest and gpus % biggest:
            gpus = math.ceil(gpus / biggest) * biggest  # a gang takes whole hosts (§3.3)
        if gpus > biggest * len(sizes):
            continue  # larger than the cluster: the trace's own giant jobs
        run = min(j.duration_s, max_duration)
        m = 0 if unalloc_rule.is_unallocated(j) else max(1, math.ceil(min_rule.min_runtime_s(run)))
        wid = f"j{j.job_id}"
        past[wid] = PastWorkload(j, budget_key_of[j.vc], m, t, run_s=run)
        e.submit(SimWorkload(wid, budget_key_of[j.vc], gpus, model, m, t, e.next_seq(), remaining=run))
        e.tick()
    e.advance_to(now)
    # At the import's instant (import48): work still running has no agent to go on with it, so its
    # attempt is cut there and the workload canceled, said by an event (docs/demo.md); work
    # preempted and requeued is pending, as the live scheduler has it, with the run time it has
    # left; work that never started is not history (not imported).
    # One being preempted there (its stop asked, its grace not over) ends preempted there, requeued.
    for a in list(e.attempts.values()):
        if a.started_at < now:
            stopping = a.stop_reason in REQUEUE_REASONS
            reason = str(a.stop_reason) if stopping else CUT
            past[a.workload].attempts.append(
                PastAttempt(a.gpus, a.allocated, a.started_at, now, reason, a.stop_at if stopping else None)
            )
            left = e.workloads[a.workload].remaining
            if stopping and left is not None:
                e.workloads[a.workload].remaining = max(0, left - (now - a.started_at))
    for wid, pw in past.items():
        sw = e.workloads[wid]
        if sw.state in ("succeeded", "failed", "canceled"):
            pw.state = sw.state
        elif not pw.attempts:
            pw.state = ""
        elif pw.attempts[-1].ended_at >= now and pw.attempts[-1].end_reason == CUT:
            pw.state = "canceled"
        else:
            pw.state, pw.remaining = "pending", sw.remaining
    done = [pw for pw in past.values() if pw.state]  # never started by the end: not history
    return PhillyHistory(done, start, now, 1.0, skipped)


WAITING_CANCELED_MESSAGE = (
    "imported history: preempted and waiting at the end of the imported span, canceled there (--requeued cancel)"
)


def cancel_waiting(history: PhillyHistory) -> int:
    """Cancel, at the import's instant, the work pending again there (``import_history philly
    --requeued cancel``: the demo's, whose replay starts from an empty queue); each says so by its
    ``canceled`` event. Returns how many."""
    n = 0
    for pw in history.workloads:
        if pw.state == "pending":
            pw.state, pw.remaining, pw.waiting_canceled = "canceled", None, True
            n += 1
    return n


def _dt(epoch_s: int) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def standin_command(job: TraceJob, run_s: int, python: str = sys.executable) -> list[str]:
    """The command of an imported workload pending at the import's instant: the stand-in the replay
    runs (``agent.standin``, standard library only) for the run time it has left; a finished one's
    is ``philly <job id>``, a record only (it never runs again)."""
    return [python, "-m", "agent.standin", "--duration", str(run_s)]


def write_philly(cluster: Cluster, owner: object, history: PhillyHistory, gpu_model: str) -> dict[str, int]:
    """Write the simulated past as workloads (finished, or pending again: requeued at the import's
    instant), attempts, their GPUs and events, in bulk and in one transaction. Returns counts."""
    hosts = {h.name: h for h in Host.objects.filter(cluster=cluster)}
    gpus = {(g.host.name, g.index): g.pk for g in GPU.objects.filter(host__cluster=cluster).select_related("host")}
    budgets = Budget.objects.in_bulk([int(pw.budget_key) for pw in history.workloads])
    with transaction.atomic():
        # The simulated past ran on the cluster's hosts, so they were registered then: a host
        # created after the span's start (the demo seeds its hosts just before importing) is
        # backdated to it, or the pyramid would count none of the span's GPU-time (compute_hour
        # counts a GPU only from its host's creation).
        Host.objects.filter(
            pk__in=[h.pk for h in hosts.values() if h.removed_at is None], created_at__gt=_dt(history.start)
        ).update(created_at=_dt(history.start))
        # The span ran on each of them, taken as active and healthy: the roll-up of the import's own
        # hour (by the clock, after it) counts that part available as rollup_span does the earlier
        # hours, whatever the hosts' state then (import48b; scheduler.pyramid.imported_spans).
        from scheduler.pyramid import IMPORTED_SPAN

        HostEvent.objects.bulk_create(
            HostEvent(
                host=h,
                at=_dt(history.end),
                kind=IMPORTED_SPAN,
                message="imported history ran on this host, taken as active and healthy, from "
                f"{instant_text(_dt(history.start), absolute=True)}",
                data={"imported": "philly", "from": _dt(history.start).isoformat()},
            )
            for h in hosts.values()
            if h.removed_at is None
        )
        rows = [
            Workload(
                name=f"philly-{pw.job.job_id}",
                owner=owner,
                budget=budgets[int(pw.budget_key)],
                cluster=cluster,
                gpu_model=gpu_model,
                gpu_count=len(pw.attempts[0].gpus) if pw.attempts else pw.job.num_gpus,
                image="",
                command=(
                    standin_command(pw.job, pw.remaining or 0)
                    if pw.state == "pending"
                    else ["philly", str(pw.job.job_id)]
                ),
                env={},
                min_runtime_s=pw.min_runtime,
                submitted_at=_dt(pw.submitted_at),
                state=pw.state,
                # the run it was given, capped as the replay's hint (the trace's uncapped 3 days
                # read beside 8 h run); a requeued one's: the run time it has left (the simulator's)
                duration_hint_s=pw.remaining if pw.state == "pending" else (pw.run_s or pw.job.duration_s),
                finished_at=(
                    None
                    if pw.state == "pending"
                    else _dt(history.end if pw.waiting_canceled else max(a.ended_at for a in pw.attempts))
                ),
            )
            for pw in history.workloads
        ]
        Workload.objects.bulk_create(rows, batch_size=500)
        Workload.objects.filter(pk__in=[w.pk for w in rows]).update(seq=F("id"))
        attempts, links, events = [], [], []
        for w, pw in zip(rows, history.workloads, strict=True):
            events.append(
                WorkloadEvent(
                    workload=w,
                    at=w.submitted_at,
                    kind="submitted",
                    message=f"imported history: Philly job {pw.job.job_id} (vc {pw.job.vc}), simulated",
                    data={"imported": "philly", "job": pw.job.job_id},
                )
            )
            for n, a in enumerate(pw.attempts, start=1):
                gpu_count = len(a.gpus)
                attempts.append(
                    Attempt(
                        workload=w,
                        number=n,
                        host=hosts[a.gpus[0][0]],
                        allocated=a.allocated,
                        placed_at=_dt(a.started_at),
                        started_at=_dt(a.started_at),
                        protected_until=_dt(a.started_at + (pw.min_runtime if a.allocated else 0)),
                        stop_requested_at=(
                            _dt(a.stopped_at if a.stopped_at is not None else a.ended_at)
                            if a.end_reason not in ("succeeded", "failed")
                            else None
                        ),
                        stop_reason=a.end_reason if a.end_reason not in ("succeeded", "failed") else "",
                        ended_at=_dt(a.ended_at),
                        end_reason=a.end_reason,
                        exit_code=0 if a.end_reason == "succeeded" else None,
                        charged_gpu_seconds=gpu_count * (a.ended_at - a.started_at) if a.allocated else 0,
                    )
                )
                if a.end_reason in REQUEUE_REASONS:
                    # as the live scheduler: preempted when the stop is asked, requeued at the release
                    stopped = a.stopped_at if a.stopped_at is not None else a.ended_at
                    events += [
                        WorkloadEvent(workload=w, at=_dt(stopped), kind="preempted", message="imported history"),
                        WorkloadEvent(
                            workload=w,
                            at=_dt(a.ended_at),
                            kind="requeued",
                            message=f"attempt {n} ended {a.end_reason}: imported history",
                        ),
                    ]
                elif a.end_reason == CUT and a.ended_at >= history.end:
                    events.append(WorkloadEvent(workload=w, at=_dt(a.ended_at), kind="canceled", message=CUT_MESSAGE))
            if pw.waiting_canceled:
                events.append(
                    WorkloadEvent(workload=w, at=_dt(history.end), kind="canceled", message=WAITING_CANCELED_MESSAGE)
                )
        Attempt.objects.bulk_create(attempts, batch_size=500)
        k = 0
        for pw in history.workloads:
            for a in pw.attempts:
                att = attempts[k]
                k += 1
                host_rank = {name: r for r, name in enumerate(dict.fromkeys(g[0] for g in a.gpus))}
                links.extend(AttemptGPU(attempt=att, gpu_id=gpus[g], rank=host_rank[g[0]], open=False) for g in a.gpus)
        AttemptGPU.objects.bulk_create(links, batch_size=1000)
        WorkloadEvent.objects.bulk_create(events, batch_size=1000)
    return {"workloads": len(rows), "attempts": len(attempts), "events": len(events)}


def rollup_span(cluster: Cluster, start: datetime, end: datetime) -> int:
    """Roll the pyramid (``scheduler.pyramid.rollup_hour``) up for every complete hour of the span,
    in one transaction (a commit per hour was 40 % of the roll-up on SQLite, in one profile).

    The hosts count as available in every hour, as the simulated past took them (active and
    healthy): their state at the import (``offline`` until the agents' first hello) made every idle
    GPU-hour of the week unavailable, availability equal to occupancy (lead47)."""
    from scheduler.pyramid import hour_of, rollup_hour

    hour = hour_of(start)
    last = hour_of(end)
    n = 0
    with transaction.atomic():
        while hour < last:
            rollup_hour(cluster, hour, end, hosts_available=True)
            hour += timedelta(hours=1)
            n += 1
    return n


# --- a Slurm accounting export -------------------------------------------------------------------

SACCT_COLUMNS = ("JobID", "User", "Account", "AllocTRES", "Start", "End", "State")
"""The columns ``import_history sacct`` needs (any order, others ignored): ``sacct -a -X -P
--duplicates -S <start> -o JobID,User,Account,AllocTRES,Start,End,State`` (each run of a requeued job)."""


@dataclass(frozen=True)
class SacctJob:
    line: int
    job_id: str
    user: str
    budget: Budget
    gpus: int
    start: datetime
    end: datetime
    running: bool = False
    """Still running at the export (End ``Unknown``): ``end`` is the import's instant."""
    entry: int | None = None
    """The interval of the job imported running before, whose end this line moves (``start``: its
    old end, so ``end - start`` is the usage added, less than 0 when the job ended before that cut)."""


MAX_SACCT_GPUS = 2**31 - 1
"""The most GPUs one imported job may hold: what ``UsageEntry.gpus`` stores on every database."""

SACCT_GPUS_WITHOUT_HOSTS = 4096
"""The most GPUs one imported job may hold on a cluster with no registered GPU yet (an import before
the agents join); otherwise the cluster's registered GPUs bound it (decision brk46, README)."""

_DIGITS = re.compile(r"[0-9]+")


def repeated_tres(tres: str) -> list[str]:
    """The keys an AllocTRES value names more than once (``gres/gpu=1,gres/gpu=2``: which one was
    meant is ambiguous; the last one won, brk46), in order."""
    keys = [part.partition("=")[0].strip() for part in tres.split(",") if part.strip()]
    return sorted({k for k in keys if keys.count(k) > 1}, key=keys.index)


def _gpus_of(tres: str) -> int | None:
    """GPUs in an AllocTRES value (``cpu=8,gres/gpu=4,mem=64G`` or ``gres/gpu:a100=4``): its
    ``gres/gpu`` total, else its typed counts together (``gres/gpu:a100=1,gres/gpu:v100=3``: 4; the
    first type's alone was taken, try38); None if it names none. ValueError unless each count is
    ASCII digits and the GPUs at most :data:`MAX_SACCT_GPUS` (``int()`` also took ``1_0``, and a
    count past the column was a traceback at the write)."""
    total = None
    typed = None
    for part in tres.split(","):
        key, _, value = part.partition("=")
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            if not _DIGITS.fullmatch(value.strip()) or len(value.strip()) > 10:
                raise ValueError(value)
            if key == "gres/gpu":
                total = int(value)
            else:
                typed = (typed or 0) + int(value)
    gpus = total if total is not None else typed
    if gpus is not None and gpus > MAX_SACCT_GPUS:
        raise ValueError(tres)
    return gpus


def _slurm_time(raw: str) -> datetime | None:
    """``raw`` as UTC: a time without an offset is read as UTC; one with an offset is converted
    (it was relabelled UTC, hours off). ValueError on anything else."""
    if raw in ("", "Unknown", "None"):
        return None
    at = datetime.fromisoformat(raw)
    if at.tzinfo is None:
        return at.replace(tzinfo=UTC)
    try:
        return at.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+05:00 is before the first UTC instant a datetime holds
        raise ValueError(raw) from None


MAX_SACCT_CHARS = 256 * 1024 * 1024
"""The longest sacct export ``import_history sacct`` reads (about 1.7 million jobs of 150
characters): ``/dev/zero``, or a large file named by mistake, was read until memory ran out (brk51)."""

SACCT_NOTE = "sacct job {job} user {user}"
"""The note of an imported job's usage interval (at most 200 characters), by which a second import
of the same job is recognised (:func:`imported_sacct_jobs`)."""

RUNNING_AT_EXPORT = " (running at the export)"
SACCT_RUNNING_NOTE = SACCT_NOTE + RUNNING_AT_EXPORT
"""The note of a job still running at the export (End ``Unknown``): its interval is cut at the
import's instant, and a later export's line of the job moves that end (:func:`imported_running_sacct_jobs`)."""

WAITING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
"""Slurm states of a job waiting at the export: with no End, it has not started (again), whatever
its Start says (a requeued job's or a planned one's); skipped."""


def sacct_note_user(note: str) -> str | None:
    """The Slurm user of an imported job's usage interval (:data:`SACCT_NOTE`), None for any other
    note (an entry an admin typed in). The import checked it names an existing user."""
    prefix, sep = SACCT_NOTE.split("{job}")[0], SACCT_NOTE.split("{job}")[1].split("{user}")[0]
    if not note.startswith(prefix) or sep not in note:
        return None
    return note.removesuffix(RUNNING_AT_EXPORT)[note.rindex(sep) + len(sep) :] or None


def imported_sacct_jobs(cluster: Cluster) -> set[str]:
    """The JobIDs of the Slurm jobs already imported on ``cluster`` (their usage intervals' notes)."""
    prefix, sep = SACCT_NOTE.split("{job}")[0], SACCT_NOTE.split("{job}")[1].split("{user}")[0]
    notes = UsageEntry.objects.filter(cluster=cluster, note__startswith=prefix).values_list("note", flat=True)
    return {note[len(prefix) : note.rindex(sep)] for note in notes if sep in note}


def imported_sacct_runs(cluster: Cluster) -> dict[str, list[datetime]]:
    """The starts of the finished runs imported on ``cluster``, by JobID (a ``--duplicates`` export
    lists a requeued job once per run, each an interval of its own): a later export's line of a run
    is that run's if its Start is at or before the interval's start (clipped to the window then)
    and its job's next run in the export starts after it (import48c)."""
    prefix, sep = SACCT_NOTE.split("{job}")[0], SACCT_NOTE.split("{job}")[1].split("{user}")[0]
    rows = UsageEntry.objects.filter(cluster=cluster, note__startswith=prefix).exclude(note__endswith=RUNNING_AT_EXPORT)
    runs: dict[str, list[datetime]] = {}
    for note, start in rows.values_list("note", "start"):
        if sep in note:
            runs.setdefault(note[len(prefix) : note.rindex(sep)], []).append(start)
    return runs


@dataclass(frozen=True)
class RunningSacctJob:
    """A job imported while still running (:data:`SACCT_RUNNING_NOTE`): its interval, and what its
    line said, which a later export's line of it must say again (brk48b)."""

    entry: int
    start: datetime
    end: datetime
    """The cut: the earlier import's instant."""
    gpus: int
    budget_id: int
    user: str


def imported_running_sacct_jobs(cluster: Cluster) -> dict[str, RunningSacctJob]:
    """The JobIDs of the jobs imported on ``cluster`` while still running (:data:`SACCT_RUNNING_NOTE`),
    each with its interval (id, start, end: the cut), GPUs, budget and Slurm user: a later export's
    line of one moves its end."""
    prefix, sep = SACCT_NOTE.split("{job}")[0], SACCT_NOTE.split("{job}")[1].split("{user}")[0]
    rows = UsageEntry.objects.filter(cluster=cluster, note__startswith=prefix, note__endswith=RUNNING_AT_EXPORT)
    return {
        note[len(prefix) : note.rindex(sep)]: RunningSacctJob(
            pk, start, end, gpus or 0, budget_id, sacct_note_user(note) or ""
        )
        for pk, note, start, end, gpus, budget_id in rows.values_list("pk", "note", "start", "end", "gpus", "budget")
        if sep in note
    }


def sacct_accounts(tree: dict[int, Budget]) -> tuple[dict[str, Budget], dict[str, str]]:
    """The Accounts an export may name: every live leaf budget by its path, and by its name where
    that name is one leaf's only; and the Accounts refused, with why: a name two or more leaves
    share (it went to whichever leaf was loaded first, silently another program's usage, try38), a
    budget with sub-budgets, an archived budget (each was "no leaf budget", as if it did not exist)."""
    paths = budget_paths(tree)
    parents = {b.parent_id for b in tree.values() if b.archived_at is None}
    leaf_ids = {b.pk for b in tree.values() if b.archived_at is None} - {b.parent_id for b in tree.values()}
    by_name: dict[str, list[int]] = {}
    budgets: dict[str, Budget] = {}
    for pk in leaf_ids:
        by_name.setdefault(tree[pk].name, []).append(pk)
        budgets[paths[pk]] = tree[pk]
    refused: dict[str, str] = {}
    for name, pks in by_name.items():
        if len(pks) == 1:
            budgets.setdefault(name, tree[pks[0]])
        elif name not in budgets:
            named = sorted(paths[pk] for pk in pks)
            refused[name] = f"names {len(named)} leaf budgets ({', '.join(named)}): write its path"
    for pk, b in sorted(tree.items()):
        if pk in leaf_ids:
            continue
        if b.archived_at is not None:
            why = f"is the archived budget {paths[pk]}"
        elif pk in parents:
            leaves = sorted(paths[c] for c in leaf_ids if tree[c].parent_id == pk)
            shown = ", ".join(leaves[:3]) + (", …" if len(leaves) > 3 else "")
            why = f"is {paths[pk]}, which has sub-budgets: usage is charged to a leaf" + (
                f" ({shown})" if leaves else ""
            )
        else:
            continue
        for key in (paths[pk], b.name):
            if key not in budgets:
                refused.setdefault(key, why)
    return budgets, refused


def parse_sacct(
    lines: Iterable[str],
    budgets: dict[str, Budget],
    users: set[str],
    *,
    now: datetime,
    imported: Collection[str] = (),
    cluster: str = "",
    ambiguous: dict[str, str] | None = None,
    cluster_gpus: int = 0,
    window_s: int | None = None,
    running: dict[str, RunningSacctJob] | None = None,
    runs: dict[str, list[datetime]] | None = None,
) -> tuple[list[SacctJob], list[str]]:
    """Parse a ``sacct --parsable2`` export (header line first, ``|``-separated; times are read
    as UTC unless they carry an offset). Returns the GPU jobs and the skipped lines' notes (no
    GPUs, job steps, not started); raises :class:`HistoryError` listing every
    bad line. ``budgets``: Account → leaf budget (by path or name); ``ambiguous``: the Accounts
    refused, with why (:func:`sacct_accounts`: a name of several leaves, a parent, an archived
    one); ``users``: the usernames that exist; ``imported``: the JobIDs already imported on
    ``cluster`` (a second import of an export doubled its usage: refused like a bad line);
    ``cluster_gpus``: its registered GPUs, the most one job may hold (none registered:
    :data:`SACCT_GPUS_WITHOUT_HOSTS`); ``window_s``: the fair-share window (DESIGN.md §3.1): an
    interval starts ``window_s`` before ``now`` at the earliest, a job that ended by then is skipped
    (it adds nothing), as is one that ran for no time (Start is End; End before Start is refused).
    A job still running at the export (a Start, End ``Unknown``, a State not waiting:
    :data:`WAITING_STATES`) counts to ``now``, as a running attempt's usage (DESIGN.md §3.1);
    ``running``: the jobs imported running before (:func:`imported_running_sacct_jobs`), whose
    intervals a line of theirs moves to its End, or to ``now`` when still running.
    Several lines of one JobID (``sacct --duplicates``) are its runs, each an interval of its own;
    the same Start twice is refused. ``runs``: the starts of the finished runs imported before
    (:func:`imported_sacct_runs`; None: every line of a job in ``imported`` not running is one): a
    run imported again is skipped when its job has a line adding usage, else refused (import48c)."""
    it = iter(lines)
    header = next(it, "").rstrip("\n").removeprefix("\ufeff").split("|")  # a BOM read as "lacks JobID"
    missing = [c for c in SACCT_COLUMNS if c not in header]
    if missing:
        raise HistoryError(
            [f"line 1: the header lacks {', '.join(missing)} (export with -P -o {','.join(SACCT_COLUMNS)})"]
        )
    col = {c: header.index(c) for c in SACCT_COLUMNS}
    jobs: list[SacctJob] = []
    problems: list[str] = []
    skipped: list[str] = []
    seen: set[tuple[str, str]] = set()
    lines_of: dict[str, list[_SacctRun]] = {}
    for n, raw in enumerate(it, start=2):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(header):
            problems.append(f"line {n}: {len(cells)} fields, the header has {len(header)}")
            continue
        if "\x00" in line:  # stored in the note: PostgreSQL text cannot hold NUL (a traceback)
            problems.append(f"line {n}: holds a NUL character")
            continue
        v = {c: cells[i].strip() for c, i in col.items()}
        job = v["JobID"]
        if not job:
            problems.append(f"line {n}: no JobID")
            continue
        if problem := invisible_problem(job):  # stored in the note, shown reversed (U+202E) on every page
            problems.append(f"line {n} (job {job!r}): JobID {problem}")
            continue
        if "." in job:
            skipped.append(f"line {n}: job step {job} (export with -X)")
            continue
        here = []
        try:
            gpus = _gpus_of(v["AllocTRES"])
        except ValueError:
            here.append(
                f"AllocTRES {v['AllocTRES'][:100]!r} has a GPU count that is not a whole number up to {MAX_SACCT_GPUS}"
            )
            gpus = 0
        if twice := repeated_tres(v["AllocTRES"]):
            here.append(f"AllocTRES names {', '.join(twice)} twice: which one is meant is ambiguous")
        times: dict[str, datetime | None] = {}
        for name in ("Start", "End"):
            try:
                times[name] = _slurm_time(v[name])
            except ValueError:  # named with its value: "Start and End are times like" left the reader to find which
                here.append(f"{name} {v[name][:40]!r} is not a time like 2026-11-24T10:00:00 (or Unknown)")
        start, end = (times["Start"], times["End"]) if len(times) == 2 else (None, None)
        state = v["State"].split(" ")[0]
        # before the GPUs: a pending job has no AllocTRES, and read "held no GPUs"
        if not here and (start is None or (end is None and state in WAITING_STATES)):
            skipped.append(f"line {n}: job {job} has not started ({v['State']})")
            continue
        if not here and (gpus is None or gpus == 0):
            skipped.append(f"line {n}: job {job} held no GPUs")
            continue
        was_running = (running or {}).get(job)
        still_running = not here and end is None
        if still_running:
            end = now  # its usage so far, as a running attempt's (DESIGN.md §3.1)
        budget = budgets.get(v["Account"])
        if budget is None and v["Account"] in (ambiguous or {}):
            here.append(f"Account {v['Account']!r} {(ambiguous or {})[v['Account']]}")
        elif budget is None:
            here.append(f"no leaf budget for Account {v['Account']!r}")
        if v["User"] not in users:
            here.append(  # what to do too: a lab moving from Slurm has none of its users yet (tryout48)
                f"no user {v['User']!r}: each Slurm User needs a Fairway user of that name "
                "(admin → Users → Add, or their first single sign-on login)"
            )
        note = SACCT_RUNNING_NOTE if still_running else SACCT_NOTE
        note_room = UsageEntry._meta.get_field("note").max_length - len(note.format(job="", user=""))
        if len(job) + len(v["User"]) > note_room:  # cut, the note no longer names the job: a second import doubled it
            here.append(f"JobID and User are {len(job) + len(v['User'])} characters, at most {note_room} together")
        elif (job, v["Start"]) in seen:  # one run listed twice; runs of a requeued job each have theirs
            here.append(f"JobID {job} appears twice (Start {v['Start'][:40]})")
        if was_running is not None and not here:  # what was imported running, said again (brk48b)
            changed = [
                f"{what} {said!r}" if isinstance(said, str) else f"{said} GPUs"
                for what, said, same in (
                    ("User", v["User"], v["User"] == was_running.user),
                    ("Account", v["Account"], budget is None or budget.pk == was_running.budget_id),
                    ("GPUs", gpus, gpus == was_running.gpus),
                )
                if not same
            ]
            if changed:
                here.append(
                    f"{' and '.join(changed)} {'is' if len(changed) == 1 else 'are'} not what the job was imported "
                    f"running with (User {was_running.user!r}, Account "
                    f"{Budget.objects.get(pk=was_running.budget_id).path!r}, {was_running.gpus} GPUs): its usage "
                    "would move to another user or budget, or its GPUs be lost"
                )
        if still_running and start is not None and start > now:
            here.append("Start is in the future")
        elif start is not None and end is not None and (end < start or end > now):
            here.append("End is before Start or in the future")
        if gpus and gpus > (cluster_gpus or SACCT_GPUS_WITHOUT_HOSTS):
            has = cluster_gpus or f"no registered GPUs: at most {SACCT_GPUS_WITHOUT_HOSTS}"
            here.append(f"{gpus} GPUs is more than cluster {cluster} has ({has})")
        if here:
            problems.append(f"line {n} (job {job}): " + "; ".join(here))
            continue
        seen.add((job, v["Start"]))
        assert budget is not None and start is not None and end is not None and gpus  # noqa: S101 -- checked
        lines_of.setdefault(job, []).append(_SacctRun(n, v["User"], budget, gpus, start, end, still_running))
    since = now - timedelta(seconds=window_s) if window_s is not None else None
    for job, lines in lines_of.items():
        jobs_, skipped_, problems_ = _sacct_runs(
            job,
            sorted(lines, key=lambda r: r.start),
            (running or {}).get(job),
            (runs or {}).get(job, []) if runs is not None or job in (running or {}) else None,
            job in imported,
            since,
            cluster,
            window_s,
        )
        jobs += jobs_
        skipped += skipped_
        problems += problems_
    if problems:
        raise HistoryError(problems)
    return jobs, skipped


@dataclass(frozen=True)
class _SacctRun:
    """One line of a job, checked: one run of it (a ``--duplicates`` export lists each)."""

    line: int
    user: str
    budget: Budget
    gpus: int
    start: datetime
    end: datetime
    running: bool


def _sacct_runs(
    job: str,
    lines: list[_SacctRun],
    was_running: RunningSacctJob | None,
    runs: list[datetime] | None,
    imported: bool,
    since: datetime | None,
    cluster: str,
    window_s: int | None,
) -> tuple[list[SacctJob], list[str], list[str]]:
    """The intervals of one job's runs (its lines, by Start), its skipped lines and bad lines. A run
    owns what was imported of it: an interval starting at or after its Start and before the next
    listed run's (an interval's start is its run's Start, or the window's start then). A finished
    run imported before is skipped when the job has a line adding usage, else refused (an export
    imported again, brk30); ``runs`` None: every line of a job ``imported`` is one."""
    jobs: list[SacctJob] = []
    skipped: list[str] = []
    problems: list[str] = []
    again: list[_SacctRun] = []
    moved = False
    for k, r in enumerate(lines):
        after = lines[k + 1].start if k + 1 < len(lines) else None
        if k and r.start < lines[k - 1].end:  # a job runs once at a time: both would be charged
            problems.append(
                f"line {r.line} (job {job}): its run from {instant_text(r.start, absolute=True)} overlaps the run "
                f"on line {lines[k - 1].line} (a job's records are its runs, one after another)"
            )
            continue

        def owns(at: datetime, r: _SacctRun = r, after: datetime | None = after) -> bool:
            return r.start <= at and (after is None or at < after)

        if runs is None and imported or any(owns(at) for at in runs or ()):
            again.append(r)
        elif was_running is not None and owns(was_running.start):
            if not r.running and r.end < was_running.start:
                problems.append(
                    f"line {r.line} (job {job}): End is before the start of the job's interval imported running "
                    f"({instant_text(was_running.start, absolute=True)})"
                )
                continue
            cut = was_running.end
            end = max(r.end, cut) if r.running else r.end
            jobs.append(
                SacctJob(r.line, job, r.user, r.budget, was_running.gpus, cut, end, r.running, was_running.entry)
            )
            moved = True
        else:
            if was_running is not None and not moved and r.start > was_running.start:
                # run again since (Slurm requeued it; its waiting lines skipped as not started): the first
                # run ended by the earlier cut, or by this Start; this run is an interval of its own, not
                # the first one's end moved across the wait between them (brk48b)
                cut = was_running.end
                jobs.append(
                    SacctJob(
                        r.line, job, r.user, r.budget, was_running.gpus, cut, min(cut, r.start), entry=was_running.entry
                    )
                )
                moved = True
            start = max(r.start, since) if since is not None else r.start
            if r.end == r.start:
                skipped.append(f"line {r.line}: job {job} ran for no time (Start is End)")
            elif r.end <= start:
                skipped.append(
                    f"line {r.line}: job {job} ended before the fair-share window ({_window_words(window_s)}): "
                    "adds nothing"
                )
            else:
                jobs.append(SacctJob(r.line, job, r.user, r.budget, r.gpus, start, r.end, running=r.running))
    for r in again:
        if jobs:  # a --duplicates export overlapping the last one: its earlier runs listed again
            skipped.append(
                f"line {r.line}: job {job}'s run from {instant_text(r.start, absolute=True)} is already imported"
            )
        else:
            problems.append(f"line {r.line} (job {job}): JobID {job} is already imported on {cluster}")
    return jobs, skipped, problems


def _window_words(window_s: int | None) -> str:
    days, rest = divmod(window_s or 0, 86400)
    return f"{days} day{'s' if days != 1 else ''}" if not rest else f"{window_s} s"


def write_sacct(cluster: Cluster, jobs: Sequence[SacctJob]) -> int:
    """One usage interval per job, in bulk (one transaction); a job imported running before has its
    interval's end moved (and its note says running no longer once it ended)."""
    note = {False: SACCT_NOTE, True: SACCT_RUNNING_NOTE}
    entries = [
        UsageEntry(
            budget=j.budget,
            cluster=cluster,
            start=j.start,
            end=j.end,
            gpus=j.gpus,
            note=note[j.running].format(job=j.job_id, user=j.user),  # parse_sacct: it fits
        )
        for j in jobs
        if j.entry is None
    ]
    moved = [
        UsageEntry(pk=j.entry, end=j.end, note=note[j.running].format(job=j.job_id, user=j.user))
        for j in jobs
        if j.entry is not None
    ]
    with transaction.atomic():
        UsageEntry.objects.bulk_create(entries, batch_size=1000)
        UsageEntry.objects.bulk_update(moved, ["end", "note"], batch_size=1000)
    return len(entries) + len(moved)
