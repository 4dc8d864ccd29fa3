"""Accounting like Slurm's sacct: per workload and per finished attempt, what it waited, ran and cost.

Per workload (the workloads list and detail, ``fairway ls`` / ``show``): ``submitted_at``,
``started_at`` (the agent-confirmed start of its current run, or of its last once it ended:
:func:`run_start`, idle58; it was the first), ``wait_s`` (its whole time in the queue: from
submission to its end, or now, less the run of its attempts, so every wait across requeues counts;
left41: it stopped at the first start), ``elapsed_s`` (the run time of all its attempts, the open
one up to now; ``started_at`` None and ``elapsed_s`` 0 while it is pending, a requeued one too, as
squeue shows it: left57), ``charged_gpu_hours`` (allocated GPU-time charged: closed attempts'
``charged_gpu_seconds`` plus GPUs × run so far of an open funded attempt), ``requeues`` (times it
went back to the queue, every cause: ``stop_rules.requeue_count``) and ``preemptions`` (of those,
attempts ended ``preempted``). An open attempt on an ``offline`` host runs and
is charged only up to that host's last heartbeat (DESIGN.md §4: it ends ``lost`` there unless the
host returns), as the budgets' usage counts it (``snapshot``): the list said 37 GPU-min where the
budgets said 19, and fell back to 19 when it ended lost (try37). Computed from annotations (``with_accounting``:
aggregates over one join), or with the same values from the attempts in memory
(``account_from_attempts``: a detail that prefetched them; ``account_page``: one light query of a
page's attempts, cheaper to compile and to run than the aggregate GROUP BY, and one of the
running ones' links on offline hosts): no query per row.

Per finished attempt (``GET /api/v1/workloads/history/``, ``fairway history``): one query.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import TruncSecond
from django.utils import timezone

from fairway_cli.numbers import second_up, seconds_between
from scheduler.models import Attempt, AttemptGPU, Host, Workload
from scheduler.stop_rules import FAILED_TO_START, REQUEUE_REASONS, requeue_count

# A closed attempt's run in the whole seconds its charge counts (``lifecycle.charged_seconds``:
# start and end floored), so that elapsed × GPUs is its charge (try34: 20 s beside 21 GPU-s).
_RUN = ExpressionWrapper(
    TruncSecond("attempts__ended_at") - TruncSecond("attempts__started_at"), output_field=DurationField()
)
_UP = timedelta(microseconds=999_999)
"""Added before truncating to the second: an instant rounded up (``fairway_cli.numbers.second_up``)."""
_SHOWN_RUN = ExpressionWrapper(
    TruncSecond(F("attempts__ended_at") + _UP) - TruncSecond(F("attempts__started_at") + _UP),
    output_field=DurationField(),
)
"""A closed attempt's run between its two instants as shown (``fairway_cli.numbers.seconds_between``):
what the wait leaves out, so the wait is the difference of the instants shown beside it (left56);
the elapsed keeps :data:`_RUN`, its charge's seconds."""


def host_silent_since(state: str, removed_at: datetime | None, last_heartbeat: datetime | None) -> datetime | None:
    """The rule "a host is offline" for charging, stated once (DESIGN.md §4): a host in state
    ``offline`` (the sweep marks it so once its agent is silent for ``HOST_OFFLINE_AFTER_S``), not
    removed and heard from at least once, has run its attempts up to its last heartbeat, which this
    returns; None for any other host (its attempts run now). Its SQL form is :data:`SILENT_HOST`
    (compared with this on every combination in tests/api/test_offline_rule_once.py). Read by
    :func:`silent_until`, the accounting's queries and the snapshot's hosts (the budgets' usage,
    ``Attempt.charged_until``): one rule, whatever surface."""
    if state == Host.State.OFFLINE and removed_at is None and last_heartbeat is not None:
        return last_heartbeat
    return None


def silent_until(links: Iterable[AttemptGPU]) -> datetime | None:
    """The instant an open attempt holding ``links`` (with their GPU's host loaded) is known to have
    run until: the earliest last heartbeat of a silent host (:func:`host_silent_since`) among its
    open links; None when none of its hosts is (it runs now)."""
    beats = [
        beat
        for link in links
        if link.open
        and (beat := host_silent_since(link.gpu.host.state, link.gpu.host.removed_at, link.gpu.host.last_heartbeat))
        is not None
    ]
    return min(beats) if beats else None


def _silent_host(prefix: str = "") -> Q:
    """:func:`host_silent_since`'s condition as a ``Q`` on the host at ``prefix`` (``""``: the
    host itself, ``"gpu__host__"``: an attempt link's host)."""
    return Q(
        **{
            f"{prefix}state": Host.State.OFFLINE,
            f"{prefix}removed_at__isnull": True,
            f"{prefix}last_heartbeat__isnull": False,
        }
    )


SILENT_HOST = _silent_host()
"""A host :func:`host_silent_since` gives a last heartbeat for, in SQL (``Host`` rows)."""

SILENT_LINK = Q(open=True) & _silent_host("gpu__host__")
"""An attempt's open GPU link on a silent host (:data:`SILENT_HOST`), whose last heartbeat
:func:`silent_until` reads: the rule in SQL, for the readers below and the caps' usage
(``snapshot.cap_records``, through :func:`silent_until_sql`)."""


def _silent_links(**where: Any) -> QuerySet[AttemptGPU]:
    """:data:`SILENT_LINK` of started, open attempts, narrowed by ``where``."""
    return AttemptGPU.objects.filter(
        SILENT_LINK, attempt__started_at__isnull=False, attempt__ended_at__isnull=True, **where
    ).order_by()


def silent_until_sql(attempt_id: str) -> tuple[str, tuple[Any, ...]]:
    """:func:`silent_until` as a parenthesized SQL subquery and its parameters, for a raw statement
    whose column ``attempt_id`` (e.g. ``a.id``) is the attempt's id; the statement's own WHERE says
    the attempt is started and open. Compiled from :data:`SILENT_LINK` (the same joins, link → GPU →
    host, as the statement once spelled out by hand: left40), so the rule is written once; compiled
    once per process and database engine (a compilation costs ~1 ms of CPU, a tick with caps asks
    every time)."""
    return _compiled_silent_until(attempt_id, connection.vendor)


@functools.cache
def _compiled_silent_until(attempt_id: str, vendor: str) -> tuple[str, tuple[Any, ...]]:
    links = (
        AttemptGPU.objects.filter(SILENT_LINK, attempt_id=RawSQL(attempt_id, ()))  # noqa: S611 -- a column name of the caller's statement
        .order_by()
        .values("attempt_id")
        .annotate(until=Min("gpu__host__last_heartbeat"))
        .values("until")
    )
    sql, params = links.query.sql_with_params()
    return f"({sql})", tuple(params)


def silent_until_subquery(row: str, outer: str = "pk") -> Subquery:
    """:func:`silent_until` as a subquery of a row: ``row`` is the link's path to the row's key
    (``attempt__workload_id`` for a workload's row, ``attempt_id`` for an attempt's), ``outer``
    that key's name in the outer row (``attempt_id`` for an attempt link's: ``scheduler.efficiency``)."""
    links = (
        _silent_links(**{row: OuterRef(outer)})
        .values(row)
        .annotate(until=Min("gpu__host__last_heartbeat"))
        .values("until")
    )
    return Subquery(links[:1])


def with_accounting(queryset: QuerySet[Workload]) -> QuerySet[Workload]:
    """``queryset`` annotated with what :func:`accounting` reads (aggregates over one join)."""
    closed = Q(attempts__ended_at__isnull=False, attempts__started_at__isnull=False)
    open_ = Q(attempts__ended_at__isnull=True, attempts__started_at__isnull=False)
    return queryset.annotate(
        acct_open_until=silent_until_subquery("attempt__workload_id"),
        acct_last_start=Max("attempts__started_at"),
        acct_closed_run=Sum(_RUN, filter=closed),
        acct_closed_shown=Sum(_SHOWN_RUN, filter=closed),
        acct_charged=Sum("attempts__charged_gpu_seconds", filter=Q(attempts__ended_at__isnull=False)),
        acct_open_start=Max("attempts__started_at", filter=open_),
        acct_open_funded=Max(
            "attempts__started_at", filter=open_ & Q(attempts__allocated=True, attempts__unfunded=False)
        ),
        acct_preemptions=Count("attempts", filter=Q(attempts__end_reason=Attempt.EndReason.PREEMPTED)),
        acct_requeue_ends=Count("attempts", filter=Q(attempts__end_reason__in=sorted(REQUEUE_REASONS))),
        acct_start_failures=Count("attempts", filter=Q(attempts__end_reason=FAILED_TO_START)),
        acct_open_unfunded=Count("attempts", filter=Q(attempts__ended_at__isnull=True, attempts__unfunded=True)),
    )


ATTEMPT_ROW = ("started_at", "ended_at", "charged_gpu_seconds", "allocated", "unfunded", "end_reason")
"""What :func:`account_from_attempts` reads of an attempt (the columns :func:`with_accounting` aggregates)."""


def account_from_attempts(w: Workload, rows: Iterable[tuple[Any, ...]], open_until: datetime | None = None) -> Workload:
    """``w`` given the annotations of :func:`with_accounting` computed from its attempts' rows
    (:data:`ATTEMPT_ROW` tuples) in memory: the same values the SQL aggregates give (``None``
    where an aggregate has no row, as SQL's MIN/MAX/SUM); ``open_until``: :func:`silent_until`
    of its open attempt."""
    last = closed_run = closed_shown = charged = open_start = open_funded = None
    preemptions = requeue_ends = start_failures = open_unfunded = 0
    for started, ended, charged_s, allocated, unfunded, end_reason in rows:
        open_unfunded += ended is None and bool(unfunded)
        if started is not None:
            last = started if last is None or started > last else last
            if ended is not None:
                run = ended.replace(microsecond=0) - started.replace(microsecond=0)  # as _RUN
                closed_run = run if closed_run is None else closed_run + run
                shown = second_up(ended) - second_up(started)  # as _SHOWN_RUN
                closed_shown = shown if closed_shown is None else closed_shown + shown
            else:
                open_start = started if open_start is None or started > open_start else open_start
                if allocated and not unfunded:
                    open_funded = started if open_funded is None or started > open_funded else open_funded
        if ended is not None:
            charged = charged_s if charged is None else charged + charged_s
        if end_reason == Attempt.EndReason.PREEMPTED:
            preemptions += 1
        requeue_ends += end_reason in REQUEUE_REASONS
        start_failures += end_reason == FAILED_TO_START
    w.acct_last_start, w.acct_closed_run, w.acct_charged = last, closed_run, charged  # type: ignore[attr-defined]
    w.acct_closed_shown = closed_shown  # type: ignore[attr-defined]
    w.acct_open_start, w.acct_open_funded = open_start, open_funded  # type: ignore[attr-defined]
    w.acct_preemptions = preemptions  # type: ignore[attr-defined]
    w.acct_requeue_ends, w.acct_start_failures = requeue_ends, start_failures  # type: ignore[attr-defined]
    w.acct_open_unfunded = open_unfunded  # type: ignore[attr-defined]
    w.acct_open_until = open_until if open_start is not None else None  # type: ignore[attr-defined]
    return w


def account_prefetched(w: Workload) -> Workload:
    """:func:`account_from_attempts` over ``w.attempts.all()`` (prefetched with their GPU links
    and hosts: no query)."""
    attempts = list(w.attempts.all())
    open_ = [a for a in attempts if a.started_at is not None and a.ended_at is None]
    until = silent_until(open_[0].gpu_links.all()) if open_ else None
    return account_from_attempts(w, ([getattr(a, f) for f in ATTEMPT_ROW] for a in attempts), until)


def account_page(workloads: Sequence[Workload]) -> None:
    """The annotations of :func:`with_accounting` on every workload of ``workloads``: one query of
    their attempts' :data:`ATTEMPT_ROW` columns (none when the list is empty) and, when one of them
    runs, one of :func:`silent_until_of` the running ones. Not a subquery per attempt row (~1.5 ms
    of the ORM's compiling per page, session 37's list)."""
    if not workloads:
        return
    rows: dict[int, list[tuple[Any, ...]]] = {w.pk: [] for w in workloads}
    ends: dict[int, list[tuple[Any, ...]]] = {w.pk: [] for w in workloads}
    running: list[int] = []
    columns = ("workload_id", *ATTEMPT_ROW, *END_ROW)
    for wid, *row in Attempt.objects.filter(workload_id__in=list(rows)).values_list(*columns):
        rows[wid].append(row[: len(ATTEMPT_ROW)])
        ends[wid].append(row[len(ATTEMPT_ROW) :])
        if row[0] is not None and row[1] is None:  # started, not ended (ATTEMPT_ROW's first two)
            running.append(wid)
    until = silent_until_of(running) if running else {}
    for w in workloads:
        account_from_attempts(w, rows[w.pk], until.get(w.pk))
        w.__dict__[LAST_END] = last_end(ends[w.pk])


END_ROW = ("number", "ended_at", "end_reason", "exit_code")
"""What :func:`last_end` reads of an attempt."""
LAST_END = "acct_last_end"
"""The attribute :func:`account_page` leaves a row's :func:`last_end` in (the list's ``last_end``)."""


def last_end(rows: Iterable[tuple[Any, ...]]) -> dict[str, Any] | None:
    """How the last attempt (the highest number) of a workload ended, from its attempts'
    :data:`END_ROW` tuples: ``{"reason": "failed", "exit_code": 1}`` (``exit_code`` None where the
    attempt exited with none: lost, preempted, ...); None with no attempt or one still open. What
    ``fairway wait`` says of a workload that ended ("running → failed (exit 1)") from the list's rows."""
    last = max(rows, key=lambda row: row[0], default=None)
    if last is None or last[1] is None:
        return None
    return {"reason": last[2], "exit_code": last[3]}


def silent_until_of(workload_ids: list[int]) -> dict[int, datetime]:
    """:func:`silent_until` of the open attempt of each of ``workload_ids`` whose host is offline
    (one query, of the open links on offline hosts only: usually none; the earliest heartbeat
    taken here, not by a GROUP BY, cheaper to compile)."""
    until: dict[int, datetime] = {}
    links = _silent_links(attempt__workload_id__in=workload_ids)
    for wid, beat in links.values_list("attempt__workload_id", "gpu__host__last_heartbeat"):
        until[wid] = min(until.get(wid, beat), beat)
    return until


def as_never_started(w: Workload) -> Workload:
    """``w``, known to have no attempt yet (just submitted), given the annotations of
    :func:`with_accounting` without a query: nothing started, run or charged."""
    w.acct_last_start = w.acct_open_start = w.acct_open_funded = None  # type: ignore[attr-defined]
    w.acct_closed_run = w.acct_closed_shown = w.acct_charged = None  # type: ignore[attr-defined]
    w.acct_preemptions = w.acct_requeue_ends = w.acct_start_failures = 0  # type: ignore[attr-defined]
    w.acct_open_unfunded = 0  # type: ignore[attr-defined]
    w.acct_open_until = None  # type: ignore[attr-defined]
    w.__dict__[LAST_END] = None
    return w


def _seconds(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, timedelta):
        return max(0, int(value.total_seconds()))
    return max(0, int(value) // 1_000_000)  # a backend that returns microseconds


RUNS_NOW = (Workload.State.STARTING, Workload.State.RUNNING, Workload.State.PREEMPTING)
"""The states of a workload with an open attempt (its current run, or the one being started)."""


def run_start(state: str, open_start: datetime | None, last_start: datetime | None) -> datetime | None:
    """A workload's ``started``, as squeue and sacct show a requeued job (idle58): the start of its
    current run while it has one (``open_start``: None while that attempt is only starting, not an
    earlier run's), none back in the queue (left57), the start of its last run once it ended
    (``last_start``, the latest attempt's that started). Every surface reads it through
    :func:`accounting`: the API's ``accounting.started_at``, ``fairway ls``/``show``, the web list."""
    if state == Workload.State.PENDING:
        return None
    if state in RUNS_NOW:
        return open_start
    return last_start


def accounting(w: Workload, now: datetime | None = None) -> dict[str, Any]:
    """The accounting fields of one workload annotated by :func:`with_accounting` (see the module)."""
    now = now or timezone.now()
    closed_run = _seconds(getattr(w, "acct_closed_run", None))
    elapsed = closed_run
    until = getattr(w, "acct_open_until", None)
    end = min(now, until) if until is not None else now  # an offline host: up to its last heartbeat
    open_start = getattr(w, "acct_open_start", None)
    if open_start is not None:
        elapsed += _seconds(end - open_start)
    # In the queue: from submission to its end (or now), less the time its attempts ran, the open
    # one up to now (held on an offline host is not queued): every wait, across requeues. Every
    # instant as shown (fairway_cli.numbers.second_up), so the wait is the difference of the
    # instants beside it (left56: "submitted 22:35:38, started 22:35:39" read "wait 0"); "now"
    # rounded once for both terms, so a running workload's wait never moves (try55).
    queued = seconds_between(w.submitted_at, w.finished_at or now) - _seconds(getattr(w, "acct_closed_shown", None))
    if open_start is not None:
        queued -= seconds_between(open_start, now)
    wait = max(0, queued)
    if w.state == Workload.State.PENDING:  # back in the queue: no start, no run, as squeue (left57)
        elapsed = 0
    charged = int(getattr(w, "acct_charged", None) or 0)
    funded = getattr(w, "acct_open_funded", None)
    if funded is not None:
        charged += w.gpu_count * _seconds(end - funded)
    return {
        "started_at": run_start(w.state, open_start, getattr(w, "acct_last_start", None)),
        "wait_s": wait,
        "elapsed_s": elapsed,
        "charged_gpu_hours": round(charged / 3600, 4),
        "charged_gpu_seconds": charged,
        "preemptions": int(getattr(w, "acct_preemptions", 0) or 0),
        "requeues": requeue_count(
            int(getattr(w, "acct_requeue_ends", 0) or 0), int(getattr(w, "acct_start_failures", 0) or 0)
        ),
        # its open attempt (placed or running) runs unfunded: its budget reached its cap (DESIGN.md
        # §3.7), neither protected nor charged; the lists mark it (words46)
        "unfunded": bool(getattr(w, "acct_open_unfunded", 0)),
    }


def attempt_charged_gpu_seconds(
    attempt: Attempt, gpus: int, now: datetime | None = None, until: datetime | None = None
) -> int:
    """GPU-seconds charged to one attempt holding ``gpus`` GPUs: a closed attempt's stored charge; an
    open funded one's GPUs × its run so far (what :func:`accounting` adds for it, so an attempt's
    row and its workload's total agree while it runs; ``until``: :func:`silent_until` of its
    links); 0 for one not started, unallocated or unfunded."""
    if attempt.ended_at is not None:
        return int(attempt.charged_gpu_seconds)
    if attempt.started_at is None or not attempt.allocated or attempt.unfunded:
        return 0
    now = now or timezone.now()
    end = min(now, until) if until is not None else now
    return gpus * _seconds(end - attempt.started_at)


def finished_attempts(
    since: datetime, budget_ids: set[int] | None = None, cluster: str | None = None
) -> QuerySet[Attempt]:
    """Attempts that ended at or after ``since``, newest first, with their workload, owner, budget,
    cluster and host, unread: the caller counts and slices it (brk46: the whole range, up to 400
    days of a cluster's attempts, was read for a ``?limit=`` of a few rows). ``budget_ids``
    restricts to those budgets (a subtree)."""
    qs = (
        Attempt.objects.filter(ended_at__isnull=False, ended_at__gte=since)
        .select_related("workload__owner", "workload__cluster", "host")
        .order_by("-ended_at", "-id")
    )
    if budget_ids is not None:
        qs = qs.filter(workload__budget_id__in=budget_ids)
    if cluster:
        qs = qs.filter(workload__cluster__name=cluster)
    return qs
