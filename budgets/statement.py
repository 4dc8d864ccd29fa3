"""Per-budget accounting statement: GPU-hours by day (UTC), allocated vs unallocated, by project and user.

``budget_statement(budget, since, until)`` covers the budget and every budget under it; rows are
(day, project = leaf path, user). Attempts count from ``started_at`` to ``ended_at`` (or now), each
in whole seconds as an attempt is charged, times their GPUs, split across day boundaries pro-rata;
an attempt is *allocated* when it ran funded (``allocated`` and not ``unfunded``), else
unallocated. Usage entries (imports, history) are allocated, without a user (an imported Slurm job's
row names its ``sacct`` user, kept in the entry's note): an interval entry is
split like an attempt, a lump counts on its ``end`` day. Days are UTC dates, ``since`` and ``until`` inclusive.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from budgets.models import Budget, UsageEntry
from budgets.services import budget_paths, load_tree, subtree_ids
from config.errors import ServiceError

MAX_DAYS = 366
DEFAULT_DAYS = 30
USAGE_ENTRY_USER = "(usage entry)"
CSV_HEADER = ["budget", "day", "project", "user", "allocated_gpu_hours", "unallocated_gpu_hours", "total_gpu_hours"]


class StatementError(ServiceError):
    """A bad date range (400)."""


STATEMENT_READ_PERMISSIONS = ("budgets.view_budget", "budgets.change_budget")
"""Either lets a staff member read any budget's statement: what the admin's "Download statement"
action needs, the budget list (brk44: ``is_staff`` alone read every budget's, each user's GPU-hours,
on the API, the CLI and the budgets page)."""

STATEMENT_REFUSAL = (
    "Only members of this budget (or of a budget above it) and admins with the view_budget permission "
    "may read its statement."
)


def may_read_statement(user: Any, budget_id: int, accessible: set[int] | frozenset[int]) -> bool:
    """Whether ``user`` may read budget ``budget_id``'s statement: members of it or of an ancestor
    (``accessible``: ``accounts.services.accessible_budget_ids``), superusers and staff holding one
    of :data:`STATEMENT_READ_PERMISSIONS` (README.md, the API's table of who may do what)."""
    from scheduler.services import staff_may

    if not user.is_authenticated:
        return False
    if user.is_superuser or budget_id in accessible:
        return True
    return staff_may(user, *STATEMENT_READ_PERMISSIONS)


@dataclass(frozen=True)
class StatementRow:
    day: date
    project: str
    user: str
    allocated_gpu_seconds: float
    unallocated_gpu_seconds: float

    @property
    def allocated_gpu_hours(self) -> float:
        return self.allocated_gpu_seconds / 3600

    @property
    def unallocated_gpu_hours(self) -> float:
        return self.unallocated_gpu_seconds / 3600


def statement_file_name(paths: Sequence[str], since: date, until: date) -> str:
    """The file name of the statement of budgets ``paths`` over ``since``..``until`` (UTC days):
    ``statement-nlp-olmo-2026-11-08-2026-12-07.csv``, each path's ``/`` as ``-``, several joined by
    ``+``, any character but ASCII letters, digits, ``.``, ``_`` and ``-`` as ``_`` (a name is any
    text without ``/``: a quote or a ``;`` would break the header, an accent some browsers' names);
    past 120 characters, ``N-budgets``. The one name of the API's download and the admin's action
    (left59: the admin's named no budget, the API's its id)."""
    safe = "+".join(re.sub(r"[^A-Za-z0-9._-]", "_", path.replace("/", "-")) for path in paths)
    if len(safe) > 120:
        safe = f"{len(paths)}-budgets"
    return f"statement-{safe}-{since.isoformat()}-{until.isoformat()}.csv"


def parse_range(
    since: str | None, until: str | None, today: date | None = None, now: datetime | None = None
) -> tuple[date, date]:
    """``since`` and ``until`` texts (either may be empty) → (since, until) UTC days; default: the
    last 30 days to today. Each is read as history and the pyramid read theirs
    (:func:`scheduler.api.params.parse_instant`: ``7d``, ``36h``, ``2w`` back from ``now``, or an ISO
    8601 date or date-time), and the statement covers the UTC day holding that instant.

    Raises StatementError naming the field on a bad date (9999-12-31 included: no midnight follows it),
    ``since`` after ``until`` or more than 366 days.
    """
    from rest_framework.exceptions import ValidationError

    from scheduler.api.params import instant_problem, parse_instant

    now = now or timezone.now()
    today = today or now.astimezone(UTC).date()

    def parse(text: str | None, field: str) -> date | None:
        if text is None or not str(text).strip():
            return None
        try:
            day = parse_instant(field, str(text), now, now).date()
        except ValidationError:
            # the field is the error's key (``since``): "since: since: '…'" on the API and the CLI (try40)
            problem = f"{instant_problem(str(text))}; the statement covers its UTC day."
            raise StatementError("invalid_date", field, problem) from None
        # The statement reads up to the midnight after ``until``: the last day a date holds has none
        # (OverflowError, a 500, on ``until=9999-12-31``).
        if day == date.max:
            raise StatementError("invalid_date", field, f"{text!r} is past the last day a statement covers.")
        return day

    given_until = parse(until, "until")
    end = given_until or today
    # The default covers the 30 days to ``until``, or fewer when ``until`` is within 30 days of the
    # first day a date holds (``until=0001-01-01`` took 29 days off it: OverflowError, a 500).
    start = parse(since, "since") or end - min(timedelta(days=DEFAULT_DAYS - 1), end - date.min)
    if start > end:
        # until not given: its default said so, not as if the person had typed it (try50)
        bound = f"until ({end})" if given_until else f"today ({end}, the default until)"
        raise StatementError("invalid_range", "since", f"since ({start}) is after {bound}.")
    if (end - start).days + 1 > MAX_DAYS:
        raise StatementError("range_too_long", "since", f"A statement covers at most {MAX_DAYS} days.")
    return start, end


def _midnight(d: date) -> datetime:
    return datetime.combine(d, time.min, tzinfo=UTC)


def _whole(instant: datetime) -> datetime:
    """``instant`` floored to its whole second."""
    return instant.replace(microsecond=0)


def _split(start: datetime, end: datetime, lo: datetime, hi: datetime) -> Iterable[tuple[date, float]]:
    """(day, seconds) of [start, end) clipped to [lo, hi), per UTC day."""
    start, end = max(start, lo), min(end, hi)
    while start < end:
        next_midnight = _midnight(start.astimezone(UTC).date() + timedelta(days=1))
        upto = min(end, next_midnight)
        yield start.astimezone(UTC).date(), (upto - start).total_seconds()
        start = upto


def budget_statement(budget: Budget, since: date, until: date, *, now: datetime | None = None) -> list[StatementRow]:
    """Rows of the statement of ``budget`` (and its subtree) for the UTC days ``since``..``until``."""
    from scheduler.models import Attempt

    now = now or timezone.now()
    lo, hi = _midnight(since), _midnight(until + timedelta(days=1))
    tree = load_tree()
    paths = budget_paths(tree)
    ids = subtree_ids([budget.pk], tree)
    # day, project, user -> [allocated, unallocated] GPU-seconds
    acc: dict[tuple[date, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    rows = list(
        Attempt.objects.filter(workload__budget_id__in=ids, started_at__isnull=False, started_at__lt=hi)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=lo))
        .annotate(n_gpus=Count("gpu_links"))
        .values_list(
            "workload__budget_id",
            "workload__owner__username",
            "allocated",
            "unfunded",
            "started_at",
            "ended_at",
            "n_gpus",
            "workload_id",
        )
    )
    from scheduler.accounting import silent_until_of

    # An open attempt on an offline host up to its last heartbeat, as the budgets' usage and the
    # workload's charge count it (try37).
    silent = silent_until_of([row[-1] for row in rows if row[5] is None])
    for budget_id, user, allocated, unfunded, started, ended, n_gpus, workload_id in rows:
        if ended is None and workload_id in silent:
            ended = min(now, silent[workload_id])
        column = 0 if allocated and not unfunded else 1
        # Whole seconds, as a closed attempt is charged and counted in the budget's usage
        # (lifecycle.charged_seconds): the exact instants gave 0.1113 GPU-h where `fairway history`
        # and the budgets page said 0.111.
        for day, seconds in _split(_whole(started), _whole(ended or now), lo, hi):
            acc[(day, paths.get(budget_id, str(budget_id)), user)][column] += seconds * n_gpus
    entries = UsageEntry.objects.filter(budget_id__in=ids, end__gte=lo).filter(
        Q(gpus__isnull=True, end__lt=hi) | Q(gpus__isnull=False, start__lt=hi)
    )
    from scheduler.history import sacct_note_user

    for entry in entries.values_list("budget_id", "start", "end", "gpus", "gpu_seconds", "note"):
        budget_id, start, end, gpus, lump, note = entry
        project = paths.get(budget_id, str(budget_id))
        # an imported Slurm job's user (its note): the statement is by user, imports included
        user = sacct_note_user(note) or USAGE_ENTRY_USER
        if gpus is None:
            acc[(end.astimezone(UTC).date(), project, user)][0] += lump
        else:
            for day, seconds in _split(start, end, lo, hi):
                acc[(day, project, user)][0] += seconds * gpus
    return [
        StatementRow(day, project, user, allocated, unallocated)
        for (day, project, user), (allocated, unallocated) in sorted(acc.items())
        if allocated or unallocated
    ]


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    """``value`` as a cell a spreadsheet shows as text: one that starts like a formula gets a
    leading ``'`` (OWASP "CSV Injection"; usernames may start with ``+``, ``-`` or ``@``). The CLI's
    ``fairway_cli.cli.csv_cell`` is the same rule (it imports nothing of the server; a test keeps
    the two equal)."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def statement_csv(budget: Budget, rows: Iterable[StatementRow], out: io.TextIOBase | None = None) -> str:
    """The rows as CSV (GPU-hours with 4 decimals), header first; written to ``out`` too when given."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    name = csv_text(budget.path)
    for r in rows:
        a, u = round(r.allocated_gpu_hours, 4), round(r.unallocated_gpu_hours, 4)
        row = [name, r.day.isoformat(), csv_text(r.project), csv_text(r.user), f"{a:.4f}", f"{u:.4f}", f"{a + u:.4f}"]
        writer.writerow(row)
    text = buffer.getvalue()
    if out is not None:
        out.write(text)
    return text
