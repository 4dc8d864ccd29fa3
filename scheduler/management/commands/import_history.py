"""Give a cluster its past: ``manage.py import_history philly|sacct`` (scheduler/history.py).

    python manage.py import_history philly --cluster philly --user researcher --before-job 34805 --days 7
    python manage.py import_history sacct usage.txt --cluster h100

``philly``: the ``--days`` of the Philly trace before ``--before-job`` (the demo's replay start),
sampled to about ``--load`` × the cluster's capacity, each job's run capped at ``--max-duration``,
run through the policy on the cluster's hosts and its ``vc-<id>`` budgets, shifted to end now and
written as workloads and attempts (their usage), then the pyramid's hours rolled up. Work preempted
and waiting at the import's instant is pending there, requeued with the run time it has left
(``--requeued cancel``: canceled there, saying so); work still running is cut there, canceled.

``sacct``: a Slurm export,
``TZ=UTC sacct -a -X -P --duplicates -S <start> -o JobID,User,Account,AllocTRES,Start,End,State``
(``--duplicates``: each run of a requeued job, each counted; ``--parsable2``: ``|``-separated, a
header line; times read as UTC unless they carry an offset: sacct prints local time, hence ``TZ=UTC``).
Account names a leaf budget (path or name), User an existing user; each job that held GPUs becomes
a usage interval, one still running at the export (End ``Unknown``) to the import's instant, noted
running at the export (a later export's line of it moves that end); a job already imported on the
cluster is a bad line (an export imported twice doubled the usage), as is a job holding more GPUs
than the cluster's, an AllocTRES naming a key twice or a JobID with a control character; usage
before the fair-share window is clipped (docs/standing.md). Every bad line is reported and nothing is written.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from budgets.services import load_tree
from scheduler.history import (
    MAX_SACCT_CHARS,
    PHILLY_PREFIX,
    HistoryError,
    cancel_waiting,
    choose_jobs,
    imported_running_sacct_jobs,
    imported_sacct_jobs,
    imported_sacct_runs,
    parse_sacct,
    rollup_span,
    sacct_accounts,
    simulate_philly,
    write_philly,
    write_sacct,
)
from scheduler.models import Cluster
from scheduler.services import read_hardware
from scheduler.trace import (
    DEFAULT_MIN_RUNTIME_RULE,
    DEFAULT_UNALLOCATED_RULE,
    MinRuntimeRule,
    TraceError,
    UnallocatedRule,
    parse_duration,
    read_trace,
)

MAX_DAYS = 3650
"""The most days of the trace ``philly`` imports (the Philly trace spans about 75)."""
MAX_LOAD = 100.0


class Command(BaseCommand):
    help = "Import a cluster's past: the Philly trace's preceding days (simulated) or a Slurm sacct export."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="source", required=True)
        ph = sub.add_parser("philly", help="the Philly trace's days before a job, through the simulator")
        ph.add_argument("--trace", default="data/philly/philly_jobs.csv")
        ph.add_argument("--cluster", required=True)
        ph.add_argument("--user", required=True, help="owner of the imported workloads")
        ph.add_argument("--before-job", type=int, default=34805, help="the first job not imported (the replay's start)")
        ph.add_argument("--days", type=float, default=7.0)
        ph.add_argument("--load", type=float, default=1.2, help="sampled demand ÷ the cluster's capacity (default 1.2)")
        ph.add_argument("--max-duration", default="8h", help="run-time cap per job (default 8h)")
        ph.add_argument("--min-runtime-rule", default=DEFAULT_MIN_RUNTIME_RULE)
        ph.add_argument("--unallocated-rule", default=DEFAULT_UNALLOCATED_RULE)
        ph.add_argument(
            "--requeued",
            choices=("pending", "cancel"),
            default="pending",
            help="work preempted and waiting at the import's instant: pending, requeued with the run time it has "
            "left (default), or canceled there, saying so (a replay that starts from an empty queue: the demo)",
        )
        sa = sub.add_parser(
            "sacct",
            help="a Slurm `sacct -a -X -P` export",
            description=(
                "Import a Slurm accounting export, made on the Slurm side with: TZ=UTC sacct -a -X -P --duplicates -S "
                "<start, e.g. now-7days> -o JobID,User,Account,AllocTRES,Start,End,State > usage.txt. "
                "Times without an offset are read as UTC (sacct prints local time: hence TZ=UTC); --duplicates lists "
                "each run of a requeued job, each its own usage (without it only the last run is in the file). Account "
                "names a leaf budget (path or name), User an existing user; each job that held GPUs becomes usage "
                "of that budget, from the fair-share window's start at the earliest to its End (one still running: "
                "to now, moved by a later export's line of it). A job "
                "holding more GPUs than the cluster has is a bad line. Every bad line is reported and nothing "
                "is written."
            ),
        )
        sa.add_argument("file")
        sa.add_argument("--cluster", required=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=opts["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster {opts['cluster']!r}; nothing written") from None
        try:
            if opts["source"] == "philly":
                self._philly(cluster, opts)
            else:
                self._sacct(cluster, opts)
        except HistoryError as exc:
            raise CommandError(f"nothing written:\n{exc}") from None

    def _philly(self, cluster: Cluster, opts: dict[str, Any]) -> None:
        from scheduler.snapshot import epoch, load_snapshot

        began = time.monotonic()
        try:
            user = get_user_model().objects.get(username=opts["user"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {opts['user']!r}; nothing written") from None
        try:
            min_rule = MinRuntimeRule.parse(opts["min_runtime_rule"])
            unalloc_rule = UnallocatedRule.parse(opts["unallocated_rule"])
            max_duration = parse_duration(opts["max_duration"])
            jobs = read_trace(opts["trace"])
        except (TraceError, ValueError) as exc:
            raise CommandError(f"{exc}; nothing written") from None
        if max_duration <= 0:  # every run capped at 0 s: history of work that ran for nothing (brk32)
            raise CommandError(
                f"--max-duration {opts['max_duration']!r}: a run-time cap is more than 0; nothing written"
            )
        # NaN passed "<= 0" and 1e308 days overflowed into a traceback.
        if not (0 < opts["days"] <= MAX_DAYS and 0 < opts["load"] <= MAX_LOAD):
            raise CommandError(f"--days is from 0 to {MAX_DAYS} and --load from 0 to {MAX_LOAD}; nothing written")
        now = timezone.now()
        snap, _ = load_snapshot(cluster, now)
        if not snap.hosts:
            raise CommandError(f"cluster {cluster.name} has no hosts; nothing written")
        capacity = sum(len(h.gpu_health) for h in snap.hosts)
        chosen, fraction = choose_jobs(
            jobs, opts["before_job"], opts["days"], capacity_gpus=capacity, load=opts["load"], max_duration=max_duration
        )
        end_trace = next(j.submit_time_s for j in jobs if j.job_id == opts["before_job"])
        tree = load_tree()
        leaves = {
            b.name: str(b.pk) for b in tree.values() if b.archived_at is None and b.name.startswith(PHILLY_PREFIX)
        }
        key_of = {
            vc: leaves[f"{PHILLY_PREFIX}{vc}"] for vc in {j.vc for j in chosen} if f"{PHILLY_PREFIX}{vc}" in leaves
        }
        history = simulate_philly(
            chosen,
            trace_end_s=end_trace,
            now=epoch(now),
            snapshot_hosts=snap.hosts,
            budgets=snap.budgets,
            budget_key_of=key_of,
            min_rule=min_rule,
            unalloc_rule=unalloc_rule,
            max_duration=max_duration,
            grace=int(settings.FAIRWAY["GRACE_PERIOD_S"]),
            window=snap.window,
        )
        simulated = time.monotonic() - began
        waiting = sum(pw.state == "pending" for pw in history.workloads)
        if opts["requeued"] == "cancel":
            cancel_waiting(history)
        counts = write_philly(cluster, user, history, snap.hosts[0].model)
        start = datetime.fromtimestamp(history.start, tz=UTC)
        hours = rollup_span(cluster, start, now)
        skipped = sum(history.skipped_vcs.values())
        self.stdout.write(
            f"imported {counts['workloads']} Philly jobs ({100 * fraction:.1f} % of the {opts['days']:g} days before "
            f"job {opts['before_job']}, {skipped} of VCs without a budget skipped) as {counts['attempts']} attempts "
            f"on {cluster.name}; {waiting} preempted and waiting at the span's end "
            f"({'canceled there' if opts['requeued'] == 'cancel' else 'pending, requeued'}); "
            f"{hours} pyramid hours rolled up; simulated in {simulated:.1f} s, "
            f"{time.monotonic() - began:.1f} s in all"
        )

    def _sacct(self, cluster: Cluster, opts: dict[str, Any]) -> None:
        path = Path(opts["file"])
        most = MAX_SACCT_CHARS
        try:
            with path.open(encoding="utf-8") as fh:
                text = fh.read(most + 1)  # bounded: /dev/zero was read until memory ran out (brk51)
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}; nothing written") from None
        if len(text) > most:
            raise CommandError(f"{path} is longer than {most:,} characters: not a sacct export; nothing written")
        budgets, ambiguous = sacct_accounts(load_tree())
        users = set(get_user_model().objects.values_list("username", flat=True))
        gpus = sum(n for _model, n, *_ in read_hardware(cluster))
        with transaction.atomic():
            # Under the cluster's row lock from the read of the jobs already imported to the write:
            # two imports of one export at once each found none and both wrote it (brk32).
            Cluster.objects.select_for_update().filter(pk=cluster.pk).values_list("pk", flat=True).first()
            jobs, skipped = parse_sacct(
                text.splitlines(),
                budgets,
                users,
                now=timezone.now(),
                ambiguous=ambiguous,
                imported=imported_sacct_jobs(cluster),
                runs=imported_sacct_runs(cluster),
                cluster=cluster.name,
                cluster_gpus=gpus,
                window_s=int(settings.FAIRWAY["LOOKBACK_WINDOW_S"]),
                running=imported_running_sacct_jobs(cluster),
            )
            n = write_sacct(cluster, jobs)
        for note in skipped:
            self.stdout.write(f"skipped {note}")
        gpu_h = sum(j.gpus * (j.end - j.start).total_seconds() for j in jobs) / 3600
        running = sum(j.running for j in jobs)
        moved = sum(j.entry is not None for j in jobs)
        n_jobs = len({j.job_id for j in jobs})
        self.stdout.write(
            f"imported {n_jobs} Slurm jobs"
            + (f" in {n} runs" if n != n_jobs else "")  # a requeued job's runs (import48c)
            + f" ({gpu_h:.1f} GPU-hours) into {cluster.name}"
            + (f"; {running} running at the export, counted to now" if running else "")
            + (f"; {moved} imported running before, their usage moved to their End or now" if moved else "")
            + f"; {len(skipped)} skipped"
        )
