"""Estimated starts and quotes on the live database (DESIGN.md §3.8).

The forward simulation itself is pure (:mod:`scheduler.sim.estimate`); this module reads the
snapshot, measures how many pending workloads carry an estimate and answers quotes.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import BooleanField, Case, DateTimeField, F, Q, Value, When

from scheduler.array_quote import ArrayQuote, array_note, array_quote
from scheduler.models import Attempt, Cluster, Workload, cluster_label

logger = logging.getLogger(__name__)

NOT_ESTIMABLE = ("held", "unschedulable", "dependency")
"""Reasons (§3.8) under which no estimate is expected: nothing starts them in the forward
simulation until a person or another workload acts. Of ``dependency``, only an unmet ``after``
list: a member waiting on its array group's ``%N`` cap (detail ``group``) starts in the
simulation once a sibling's wall-time limit frees a slot (:func:`estimable`). Not
``budget_capped``: the simulation follows caps, which lift as usage leaves their period
(docs/estimates.md, "Caps in the simulation")."""


def estimable(reason: str, detail: Mapping[str, object] | None) -> bool:
    """Whether a pending workload with this reason and detail may carry an estimate: not while it
    waits under :data:`NOT_ESTIMABLE`, except on its array group's ``%N`` cap."""
    if reason == "dependency":
        return (detail or {}).get("group") is not None
    return reason not in NOT_ESTIMABLE


def dependency_words(ids: Sequence[int] = ()) -> str:
    """Why a workload waiting on its ``after`` list has no estimated start, one sentence for every
    surface: the quote's note (``ids``: its dependencies not ended yet) and a submitted workload's
    estimate words (``reports.estimate_words``; no ids: its pending reason names them).
    docs/estimates.md, "A dependency's wall-time limit gives its dependent no estimate": the
    simulation ends work only at its wall-time limit, a ``timeout`` that ends it failed and cancels
    an ``:ok`` dependent; an ``:any`` dependent could start then, which is not simulated."""
    which = ", ".join(f"#{i}" for i in ids) if ids else "the workloads it depends on"
    return (
        f"No start is estimated while it waits for {which} (after): the estimate does not follow "
        "dependencies. In its simulation no work ends on its own, and work stopped at its wall-time limit "
        "ends failed, which cancels an :ok dependent; an :any dependent could start then, but that is not "
        "simulated. One is given once the wait is over."
    )


def not_estimable_q() -> Any:
    """:func:`estimable`, negated, as a filter on workload rows."""
    capped = Q(pending_reason="dependency", pending_detail__has_key="group")
    return Q(pending_reason__in=NOT_ESTIMABLE) & ~capped


@dataclass(frozen=True)
class Coverage:
    """Pending allocated workloads that should carry an estimate, and how many do."""

    counted: int
    estimated: int
    unseen: int = 0
    """Pending allocated workloads not counted because no tick has seen them yet (no reason: they
    were submitted or requeued since the last tick, so whether they are held, unschedulable or
    waiting on a dependency is not known yet)."""
    awaiting: int = 0
    """Seen by a tick, not counted because no estimates run has read them yet: pending since their
    cluster's last run's snapshot (``Cluster.estimated_at``: submitted or back from an attempt
    since), with no estimate and no answer of "none" (est61: the demo's worst sample, 79 %, was a
    burst of arrivals between the tick that gave them a reason and the run it asked for)."""

    @property
    def fraction(self) -> float | None:
        return self.estimated / self.counted if self.counted else None


def estimate_coverage(cluster_id: int | None = None) -> Coverage:
    """How many pending allocated workloads (``M > 0``) carry an estimated start, not counting
    those held, unschedulable or waiting on an ``after`` list (§3.8), nor those no tick has
    seen yet (no reason, so none of these is known yet: ``unseen``, counted apart), nor those no
    estimates run has read yet (``awaiting``, counted apart). One aggregate query."""
    from django.db.models import Count, Exists, OuterRef

    qs = Workload.objects.filter(state=Workload.State.PENDING, min_runtime_s__gt=0).exclude(not_estimable_q())
    if cluster_id is not None:
        qs = qs.filter(cluster_id=cluster_id)
    seen = ~Q(pending_reason="")
    # pending since the last run read the cluster: submitted, or an attempt ended, after its snapshot
    since_run = (
        Q(cluster__estimated_at__isnull=True)
        | Q(submitted_at__gt=F("cluster__estimated_at"))
        | Exists(Attempt.objects.filter(workload=OuterRef("pk"), ended_at__gt=OuterRef("cluster__estimated_at")))
    )
    awaiting = seen & Q(estimated_start__isnull=True, no_start_found=False) & since_run
    row = qs.aggregate(
        counted=Count("id", filter=seen & ~awaiting),
        estimated=Count("id", filter=seen & Q(estimated_start__isnull=False)),
        unseen=Count("id", filter=Q(pending_reason="")),
        awaiting=Count("id", filter=awaiting),
    )
    return Coverage(row["counted"], row["estimated"], row["unseen"], row["awaiting"])


ESTIMATE_BUDGET_S = 3.0
"""CPU seconds one estimate run may take (its thread's); a run cut short keeps the earlier
estimates it did not reach."""


def running_workloads(snap: object, index: Any = None) -> dict[str, object]:
    """The workloads of the snapshot's open attempts as policy workloads (id → workload, with
    their original submission time and sequence number), so the forward simulation can requeue
    what it preempts (DESIGN.md §4), and with their array group where the snapshot caps it
    (``group_limits``), so the slot a member's end frees counts (docs/estimates.md). As the
    snapshot read them where it was read ``simulated`` (its ``index``: ``SnapshotIndex.running``),
    else one query, the same workloads built by the same function."""
    from scheduler.snapshot import policy_workload

    if index is not None and index.running is not None:
        return dict(index.running)

    ids = {int(a.workload) for a in snap.attempts if a.workload.isdigit()}  # type: ignore[attr-defined]
    capped = snap.group_limits  # type: ignore[attr-defined]
    rows = Workload.objects.filter(pk__in=ids).values_list(
        "id",
        "budget_id",
        "gpu_count",
        "gpu_model",
        "min_runtime_s",
        "submitted_at",
        "seq",
        "cpus",
        "memory_bytes",
        "group_id",
    )
    return {
        str(pk): policy_workload(
            str(pk),
            bid,
            n,
            model,
            m,
            sub,
            seq if seq is not None else pk,
            cpus,
            memory,
            group=str(g) if g is not None and str(g) in capped else None,
        )
        for pk, bid, n, model, m, sub, seq, cpus, memory, g in rows
    }


def wall_time_limits(snap: object, index: Any = None) -> dict[str, int]:
    """Workload id → wall-time limit (``max_runtime_s``) of the snapshot's pending workloads and
    of its open attempts' workloads, those that have one: the forward simulation stops their
    attempts then (a ``timeout``, DESIGN.md §4), the only way running work ends in it. As the
    snapshot read them where it was read ``simulated`` (``SnapshotIndex.limits``), else one query."""
    if index is not None and index.limits is not None:
        return dict(index.limits)
    ids = {int(a.workload) for a in snap.attempts if a.workload.isdigit()}  # type: ignore[attr-defined]
    ids.update(int(w.id) for w in snap.pending if w.id.isdigit())  # type: ignore[attr-defined]
    rows = Workload.objects.filter(pk__in=ids, max_runtime_s__isnull=False).values_list("id", "max_runtime_s")
    return {str(pk): int(limit) for pk, limit in rows}


def requeued_attempts(snap: object, index: Any = None) -> frozenset[str]:
    """The snapshot's stopping attempts (ids) whose workloads run again once released (a preemption,
    a drain, a GPU fault, a lost host, a gang part's failure with retries left:
    :func:`scheduler.stop_rules.runs_again`, DESIGN.md §4): the forward simulation requeues them
    at their release with their original submission, as the live system does (est48: it dropped
    them, and later work of their budget was estimated to start in their place). As the snapshot
    read them where it was read ``simulated`` (``SnapshotIndex.requeued``), else one query."""
    from scheduler.stop_rules import runs_again

    if index is not None and index.requeued is not None:
        return index.requeued
    ids = [int(a.id) for a in snap.attempts if a.stopping and a.id.isdigit()]  # type: ignore[attr-defined]
    rows = Attempt.objects.filter(pk__in=ids).values_list(
        "id", "stop_reason", "workload__retries", "workload__retries_used"
    )
    return frozenset(
        str(pk) for pk, reason, retries, used in rows if runs_again(reason or "", retries_left=used < retries)
    )


@dataclass(slots=True)
class StoredEstimate:
    """A pending workload's estimate as stored: what :func:`store_estimates` compares, changes and
    writes (the fields of the :class:`Workload` it reads, by the same names)."""

    pk: int
    estimated_start: datetime | None
    no_start_found: bool
    estimate_told: datetime | None
    estimate_unfunded: bool = False


EstimateRow = Workload | StoredEstimate
"""What the writes of estimates take: a workload, or its estimate alone."""

Moved = tuple[EstimateRow, datetime, datetime]
"""A move of an estimate: the workload, the start last told, the new one."""


def store_estimates(cluster_id: int, now: datetime) -> int:
    """Store an estimated start on every pending workload of ``cluster_id`` (None: none within
    one window) from one forward simulation of the snapshot at ``now`` (§3.8); returns how many
    rows changed. A reservation the last tick stored (and the page shows) caps the estimate too,
    plus the grace (its room counts from the victims' release).
    Safe to run twice: it only overwrites estimates."""
    from scheduler.sim.estimate import forward_found
    from scheduler.snapshot import load_snapshot

    cpu0 = time.thread_time()
    snap, index = load_snapshot(cluster_id, now, simulated=True)
    cpu1 = time.thread_time()
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    # Each pending workload's stored estimate, as plain values: its reason and detail are the
    # snapshot's (db63: the rows read again as model instances, 0.3 CPU s at 19,152 pending).
    rows = [
        StoredEstimate(pk, start, none, told, unfunded)
        for pk, start, none, told, unfunded in Workload.objects.filter(
            cluster_id=cluster_id, state=Workload.State.PENDING
        ).values_list("pk", "estimated_start", "no_start_found", "estimate_told", "estimate_unfunded")
        # read by the simulation: one submitted since the snapshot was answered "no start found"
        # about a request it never read (brk46); the next run judges it
        if pk in index.pending_version
    ]
    stored = {}
    for w in rows:
        reserved = (index.pending_reason[w.pk][1] or {}).get("reserved_start")
        if isinstance(reserved, int | float):
            stored[str(w.pk)] = int(reserved)
    # The stored reservations cap the estimates inside ``forward``: not one made before a cap of
    # its budget is reached or lifted in the simulation (Forward.reservation_stands).
    # with which starts are unfunded: allocated work its budget's downgrade cap starts as unallocated
    found, reached, unfunded = forward_found(
        snap,
        grace=grace,
        budget_s=ESTIMATE_BUDGET_S,
        running=running_workloads(snap, index),
        limits=wall_time_limits(snap, index),
        stored=stored,
        requeued=requeued_attempts(snap, index),
    )
    complete = reached >= snap.now + snap.window
    changed: list[EstimateRow] = []
    moved: list[Moved] = []  # (workload, the start last told, the new one): judged in _notify_moved
    for w in rows:
        at = found.get(str(w.pk))
        value = datetime.fromtimestamp(at, tz=UTC) if at is not None else None
        if (
            value is None
            and not complete
            and w.estimated_start is not None
            and w.estimated_start.timestamp() >= reached
        ):
            # The run stopped at its CPU budget before reaching this workload's earlier estimate,
            # which it did not contradict: keep it (docs/estimates.md).
            continue
        # None after a whole window searched is an answer ("none within one window", as the quote
        # says), not "not known yet": the page said the latter (try37). Not of a workload no
        # simulation starts (held, its budget held, no host, an after list): its wait ends outside
        # the run, and the answer outlived it ("No start within the next 7 days" once its budget
        # was released, until the next run: brk52)
        none_found = value is None and complete and estimable(*index.pending_reason[w.pk])
        at_cap = value is not None and str(w.pk) in unfunded
        told = w.estimate_told
        if value is not None and told is None:
            # its first estimate (or its first since it left pending): what a move is judged from
            w.estimate_told = value
        elif value is not None and told is not None and abs(value - told).total_seconds() > ESTIMATE_MOVED_S:
            moved.append((w, told, value))
        if (
            w.estimated_start != value
            or w.no_start_found != none_found
            or w.estimate_told != told
            or w.estimate_unfunded != at_cap
        ):
            w.no_start_found = none_found
            w.estimated_start = value
            w.estimate_unfunded = at_cap
            changed.append(w)
    _write_estimates(changed, index.pending_version)
    # the run has read the cluster's pending work as of ``now`` (coverage counts work pending since as awaiting)
    later = Q(estimated_at__isnull=True) | Q(estimated_at__lt=now)
    Cluster.objects.filter(later, pk=cluster_id).update(estimated_at=now)
    logger.info(
        "estimates of cluster %s: %d pending (%d in the snapshot), %d found, %s, %d changed; "
        "%.2f s CPU (snapshot %.2f s)",
        cluster_label(cluster_id),
        len(rows),
        len(snap.pending),
        len(found),
        "complete" if complete else f"cut at +{int(reached - snap.now)} s",
        len(changed),
        time.thread_time() - cpu0,
        cpu1 - cpu0,
    )
    # notifications: an estimated start more than an hour from the one last told (docs/jobs.md),
    # judged from the stored reference at every run: a move held back by the hour is told after it
    # (brk43), and a start sliding under an hour a run is told once it slid an hour in all (left45);
    # only where the run wrote the estimate: still pending at the version it read (brk46)
    told = _as_written(moved, index.pending_version) if moved else []
    if told:
        _notify_moved(told)
    return len(changed)


def _write_estimates(changed: list[EstimateRow], versions: dict[int, int] | None = None) -> None:
    """Write the ``estimated_start``, ``no_start_found``, ``estimate_told`` and ``estimate_unfunded``
    of ``changed`` on those still pending (by 500, one UPDATE each): the rows were read unlocked,
    and a workload canceled or started since (both clear its estimate) kept the run's estimate for
    good with ``bulk_update``, which
    writes by primary key alone (brk38). On PostgreSQL the condition is read again on a row
    another transaction changed. Each value carries its column's type: a CASE of bare NULLs is
    text to PostgreSQL. ``versions``: each workload's ``spec_version`` as the simulation read it
    (``SnapshotIndex.pending_version``): a workload updated since keeps what the update left (no
    estimate) until the next run judges its new request.

    Each chunk (in id order) is its own transaction that locks its rows first, in id order, in one
    statement (docs/locking.md), then writes them: the ``UPDATE`` alone took them in the order
    PostgreSQL's plan chose, and deadlocked with the tick's or any ordered locker (left50).

    On PostgreSQL the write is one ``UPDATE ... FROM unnest(...)`` of five array parameters
    (:func:`_update_pg`), whatever the chunk's size; elsewhere one ``UPDATE`` of ``CASE`` per
    column (its readable form, which costs ≈ 0.9 ms of CPU a row: 16 s at 19,152, db63)."""
    from django.db import transaction

    versions = versions or {}
    changed = sorted(changed, key=lambda w: w.pk)
    for i in range(0, len(changed), 500):
        chunk = changed[i : i + 500]
        with transaction.atomic():
            _write_chunk(chunk, versions)


def _write_chunk(chunk: list[EstimateRow], versions: dict[int, int]) -> None:
    """:func:`_write_estimates` of one chunk, inside its transaction."""
    from django.db import connection

    pending = list(
        Workload.objects.select_for_update()
        .filter(pk__in=[w.pk for w in chunk], state=Workload.State.PENDING)
        .order_by("pk")  # docs/locking.md: several workloads in id order, one statement
        .values_list("pk", flat=True)
    )
    if pending and connection.vendor == "postgresql":
        locked = set(pending)
        _update_pg([w for w in chunk if w.pk in locked], versions)
    elif pending:
        _update_case(chunk, versions, pending)


def _update_case(chunk: list[EstimateRow], versions: dict[int, int], pending: list[int] | None = None) -> None:
    """The estimates of ``chunk`` written by one ``UPDATE`` of a ``CASE`` per column, on the rows of
    ``pending`` (None: the chunk's), those still pending at the version read: :func:`_update_pg`'s
    readable form, any database's."""
    pending = [w.pk for w in chunk] if pending is None else pending
    if pending:
        Workload.objects.filter(pk__in=pending, state=Workload.State.PENDING).update(
            estimated_start=Case(
                *(
                    When(pk=w.pk, **_as_read(w, versions), then=Value(w.estimated_start, DateTimeField(null=True)))
                    for w in chunk
                ),
                default=F("estimated_start"),
            ),
            no_start_found=Case(
                *(When(pk=w.pk, **_as_read(w, versions), then=Value(w.no_start_found, BooleanField())) for w in chunk),
                default=F("no_start_found"),
            ),
            estimate_told=Case(
                *(
                    When(pk=w.pk, **_as_read(w, versions), then=Value(w.estimate_told, DateTimeField(null=True)))
                    for w in chunk
                ),
                default=F("estimate_told"),
            ),
            estimate_unfunded=Case(
                *(
                    When(pk=w.pk, **_as_read(w, versions), then=Value(w.estimate_unfunded, BooleanField()))
                    for w in chunk
                ),
                default=F("estimate_unfunded"),
            ),
        )


def _update_pg(chunk: list[EstimateRow], versions: dict[int, int]) -> None:
    """The estimates of ``chunk`` written on PostgreSQL in one statement: the rows' ids, the
    versions read (NULL: not known, no condition), the four values, as six arrays joined to the
    table; the same conditions as the ``CASE`` form: still pending, at the version read."""
    from django.db import connection

    meta = Workload._meta
    column = {name: connection.ops.quote_name(meta.get_field(name).column) for name in _ESTIMATE_FIELDS}
    table, pk = connection.ops.quote_name(meta.db_table), connection.ops.quote_name(meta.pk.column)
    written = ", ".join(f"{column[name]} = v.{name}" for name in _ESTIMATE_FIELDS[:4])
    arrays = "unnest(%s::bigint[], %s::integer[], %s::timestamptz[], %s::boolean[], %s::timestamptz[], %s::boolean[])"
    values = f"{arrays} AS v(id, version, {', '.join(_ESTIMATE_FIELDS[:4])})"
    read = f"w.{column['state']} = %s AND (v.version IS NULL OR w.{column['spec_version']} = v.version)"
    sql = f"UPDATE {table} AS w SET {written} FROM {values} WHERE w.{pk} = v.id AND {read}"  # noqa: S608 - the model's names
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                [w.pk for w in chunk],
                [versions.get(w.pk) for w in chunk],
                [w.estimated_start for w in chunk],
                [w.no_start_found for w in chunk],
                [w.estimate_told for w in chunk],
                [w.estimate_unfunded for w in chunk],
                str(Workload.State.PENDING),
            ],
        )


_ESTIMATE_FIELDS = ("estimated_start", "no_start_found", "estimate_told", "estimate_unfunded", "state", "spec_version")
"""The columns :func:`_update_pg` names: the four it writes, the two it conditions on."""


def _as_written(moved: list[Moved], versions: dict[int, int]) -> list[Moved]:
    """The moves of ``moved`` whose estimate :func:`_write_estimates` wrote: still pending at the
    version the simulation read (brk46: a move judged on the old request of a workload updated
    before the write, which skipped it, was still told). One query; a workload updated after the
    write is not told either (its estimate was cleared)."""
    now = set(
        Workload.objects.filter(pk__in=[w.pk for w, _old, _new in moved], state=Workload.State.PENDING).values_list(
            "pk", "spec_version"
        )
    )
    return [m for m in moved if (m[0].pk, versions.get(m[0].pk)) in now]


def _as_read(w: Workload, versions: dict[int, int]) -> dict[str, int]:
    """The condition "still the request the simulation read" of :func:`_write_estimates` (none
    where the version is not known: a caller without a snapshot)."""
    return {"spec_version": versions[w.pk]} if w.pk in versions else {}


ESTIMATE_MOVED_S = 3600
"""An estimated start that moves by more than this is an ``estimate_moved`` event (docs/jobs.md),
and a workload has at most one such event in this long."""


def _told(moved: list[Moved], now: datetime) -> list[Moved]:
    """The moves of ``moved`` to tell their owners: those of workloads without an ``estimate_moved``
    event in the last :data:`ESTIMATE_MOVED_S` (brk42: anyone's submit and cancel of a large job
    flipped others' estimates back and forth by hours at every estimate run, an email or webhook
    each time). One held back stays judged from its reference (``Workload.estimate_told``) at
    every later run, so it is told once the hour is over if the estimate is still that far from
    the one told (brk43). One query."""
    from datetime import timedelta

    from scheduler.models import WorkloadEvent

    recent = set(
        WorkloadEvent.objects.filter(
            workload_id__in=[w.pk for w, _old, _new in moved],
            kind="estimate_moved",
            at__gt=now - timedelta(seconds=ESTIMATE_MOVED_S),
        ).values_list("workload_id", flat=True)
    )
    return [m for m in moved if m[0].pk not in recent]


def _notify_moved(moved: list[Moved]) -> None:
    """One ``estimate_moved`` event per workload whose move is told (:func:`_told`), queued for its
    owner's notifications, and the new start stored as the one told: only on the workloads still
    pending, read under their row locks in the transaction that writes the events (a run takes up
    to seconds: one the tick started or its owner cancelled meanwhile is told nothing). Four
    queries by 500 moves, whatever their number (the events' insert by the database's batch)."""
    from django.db import transaction
    from django.utils import timezone

    from fairway_cli.numbers import instant_text
    from scheduler import notify
    from scheduler.models import WorkloadEvent

    now = timezone.now()
    for i in range(0, len(moved), 500):
        chunk = _told(moved[i : i + 500], now)
        if not chunk:
            continue
        with transaction.atomic():
            pending = set(
                Workload.objects.select_for_update()
                .filter(pk__in=[w.pk for w, _old, _new in chunk], state=Workload.State.PENDING)
                .order_by("pk")  # docs/locking.md: several workloads in id order, one statement
                .values_list("pk", flat=True)
            )
            chunk = [m for m in chunk if m[0].pk in pending]
            if not chunk:
                continue
            Workload.objects.filter(pk__in=[w.pk for w, _old, _new in chunk]).update(
                estimate_told=Case(
                    *(When(pk=w.pk, then=Value(new, DateTimeField())) for w, _old, new in chunk),
                    default=F("estimate_told"),
                )
            )
            events = WorkloadEvent.objects.bulk_create(
                WorkloadEvent(
                    workload_id=w.pk,
                    at=now,
                    kind="estimate_moved",
                    # Stored and read later: the absolute form, whole seconds rounded up (as every surface).
                    message=f"estimated start moved from {instant_text(old, absolute=True)} "
                    f"to {instant_text(new, absolute=True)}",
                    data={"from": old.isoformat(), "to": new.isoformat()},
                )
                for w, old, new in chunk
            )
            notify.events_on_commit(events)


QUOTE_RUNTIMES_S = (0, 1800, 7200, 8 * 3600, 24 * 3600)
"""The minimum runtimes every quote shows (0: unallocated, 30 min, 2 h, 8 h, 24 h: a short run, an
afternoon, a working day, a day and night), beside the user's own, and alone when none is given
(left52: a quote needed ``min_runtime``, as a submission does). Those past the site's longest
(``FAIRWAY_MAX_MINIMUM_RUNTIME_S``) are left out: :func:`quote_runtimes`."""

NO_OWN_ARRAY_NOTE = "The whole array is quoted at its own minimum runtime: give one to see it."
"""The note of an array quoted without a minimum runtime (its lines still price one member)."""


def quote_runtimes(own: int | None, limit: int | None = None) -> list[int]:
    """The minimum runtimes a quote prices, ascending: :data:`QUOTE_RUNTIMES_S` up to the site's
    longest minimum runtime and the request's wall-time limit ``limit`` (None: none; brk55: a
    ``-t 1h`` quote priced M = 2h, 8h, 24h, which a submission with that limit refuses), and
    ``own``, the request's (None: not given)."""
    longest = int(settings.FAIRWAY["MAX_MINIMUM_RUNTIME_S"])
    if limit is not None:
        longest = min(longest, limit)
    ladder = {m for m in QUOTE_RUNTIMES_S if m <= longest}
    return sorted(ladder if own is None else {*ladder, own})


def quoted_submission(submission: Mapping[str, Any]) -> dict[str, Any]:
    """``submission`` (``do_submit_workload``'s keyword arguments) as a quote validates it: a
    minimum runtime not given (``min_runtime_s`` None) checked as 0, as any other request; the
    lines price their own (:func:`quote_runtimes`)."""
    given = submission.get("min_runtime_s")
    return {**submission, "min_runtime_s": 0 if given is None else given}


@dataclass(frozen=True)
class QuoteLine:
    """One minimum runtime of a quote: ``start`` None means no start within one window."""

    min_runtime_s: int
    estimated_start: datetime | None
    charge_gpu_hours: float
    ratio_after: float
    yours: bool
    searched_until: datetime
    ratio_after_text: str = ""  # as the web form and the CLI print it (reports.ratio_texts)
    starts_now: bool = False  # the first pass starts it: every surface says "now", not the current second
    start_text: str = ""  # its start as every surface prints it (fairway_cli.words.quote_start_text)
    unfunded: bool = False  # it starts at its budget's downgrade cap: unallocated, charge 0, ratio unchanged

    @property
    def charge_gpu_seconds(self) -> float:
        """The charge as GPU-seconds, which the pages write as every charge is written (the
        ``gpu_time`` filter: ``30 GPU-min``, ``2.00 GPU-h``; try63: "0.50 GPU-h" here)."""
        return self.charge_gpu_hours * 3600


@dataclass(frozen=True)
class QuoteTerms:
    """What a quote's lines assume, said once for every surface (docs/estimates.md, "Quotes"):
    ``waits_for``, the ``after`` dependencies not yet ended (then no line has a start: a
    workload waiting on a dependency has no estimate, as it would have submitted); the array's
    size and ``%N`` cap (the lines price one member; ``array``, the whole array's answer);
    ``notes`` (with the held budget named when the
    workload's budget or one above it is on hold: no line then has a start), the sentences the web form and
    ``fairway submit --quote`` print under the lines."""

    waits_for: list[int]
    array_members: int | None
    array_limit: int | None
    notes: list[str]
    array: Any = None
    """An array's answer (:class:`scheduler.array_quote.ArrayQuote`): its first and last members'
    starts and the whole array's charge, at the user's own minimum runtime."""


def work_running(cluster_id: int) -> bool:
    """Whether any attempt of the cluster is open: the estimate words' "running work ends before its
    wall-time limit" applies only then (fin43: said with the only host drained and nothing running)."""
    from scheduler.models import Attempt

    return Attempt.objects.filter(workload__cluster_id=cluster_id, ended_at__isnull=True).exists()


def idle_hosts_words(cluster_id: int) -> str:
    """Why nothing can start on a cluster where nothing runs, by its hosts' states: ", and no host
    takes new work (1 drained)", or "" while a host is active."""
    from scheduler.models import Host

    hosts = Host.objects.filter(cluster_id=cluster_id, removed_at__isnull=True)
    states = Counter(hosts.values_list("state", flat=True))
    if states.get(Host.State.ACTIVE):
        return ""
    if not states:
        return ", and it has no hosts"
    return ", and no host takes new work (" + ", ".join(f"{n} {state}" for state, n in sorted(states.items())) + ")"


def scheduled_drain_notes(cluster_id: int) -> list[str]:
    """A quote's note per host of the cluster with a drain scheduled, true of every line (the pending
    reason's ``reports.drain_sentence`` names a workload's own minimum runtime): the simulation
    foresees it, and never resumes the host (try61: every allocated line read "none before" a week
    on, with no word of the drain ``fairway show`` named)."""
    from fairway_cli.numbers import instant_text
    from scheduler.models import Host

    hosts = Host.objects.filter(cluster_id=cluster_id, removed_at__isnull=True, drain_at__isnull=False)
    return [
        f"Host {name} drains at {instant_text(at.timestamp())} (scheduled by an admin): it starts no work there whose "
        "minimum runtime would end after that, and once drained none until it is resumed, which the "
        "simulation does not foresee."
        for name, at in hosts.order_by("drain_at", "name").values_list("name", "drain_at")
    ]


HELD_QUOTE_NOTE = (
    "Submitted held, it starts only once released (fairway release, the page's Release): the lines "
    "say when it would start were it released now."
)
"""The quote's note for a submission on hold (docs/jobs.md "Hold and release"; brk47: the lines
said "now" with no word of the hold)."""


def quote_terms(workload: Workload, snap: Any = None, *, own: bool = True) -> QuoteTerms:
    """The terms of a quote for ``workload`` (a ``do_submit_workload(..., dry_run=True)`` result);
    ``snap``, the snapshot the quote simulates, for :func:`budget_notes`; ``own``: the request gave
    its minimum runtime (without one an array has no whole-array answer, which is priced at it)."""
    from scheduler.reports import start_note

    jobs = getattr(workload, "job_options", None)
    after = [wid for wid, _condition in (jobs.after if jobs is not None else [])]
    waits_for = sorted(
        Workload.objects.filter(pk__in=after).exclude(state__in=Workload.FINAL_STATES).values_list("pk", flat=True)
    )
    members = len(jobs.indices) if jobs is not None and jobs.array else None
    limit = jobs.limit if members else None
    first = (
        "Starts are upper bounds from a forward simulation in which no running work ends before its "
        "wall-time limit and no other work arrives."
        if work_running(workload.cluster_id)
        else "Starts are upper bounds from a forward simulation in which no other work arrives "
        "(nothing is running on the cluster now)."
    )
    notes = [
        first,
        start_note(),
        # "charges 8.00 GPU-h" read as a flat price: a job that ended at once was charged 0 (try37)
        "A line's charge is its GPUs × that minimum runtime: what the budget pays if the work runs at "
        "least that long; it is charged for every second it holds GPUs, less if it ends sooner, more if "
        "it runs on.",
    ]
    closed = idle_hosts_words(workload.cluster_id)
    if closed and work_running(workload.cluster_id):
        # "none before <a week on>" under the note on running work ending read as "once it ends";
        # it frees nothing while no host takes new work (try44: the only host draining).
        notes.append(f"Work is running on the cluster{closed}: nothing starts before a host takes new work again.")
    notes.extend(scheduled_drain_notes(workload.cluster_id))
    if waits_for:
        notes.append(dependency_words(waits_for))
    if workload.hold:
        notes.append(HELD_QUOTE_NOTE)
    notes.extend(budget_notes(workload, snap))
    answer = None
    if members and not own:
        notes.append(NO_OWN_ARRAY_NOTE)
    elif members and snap is not None:
        # as the lines: a workload waiting on a dependency has no estimate, and is priced funded
        answer = _array_answer(workload, snap, members, limit, bool(waits_for))
        notes.append(array_note(answer, bool(waits_for)))
    return QuoteTerms(waits_for, members, limit, notes, answer)


def _array_answer(workload: Workload, snap: Any, members: int, limit: int | None, waits: bool) -> ArrayQuote:
    """The array's starts and charge at the workload's own ``M``, from the snapshot the lines
    simulate (:func:`scheduler.array_quote.array_quote`): the quote's member, ``members`` of it
    (``waits``: its ``after`` work has not ended, so no member has a start)."""
    from scheduler.sim.estimate import QUOTE_ID
    from scheduler.snapshot import policy_workload

    member = policy_workload(
        QUOTE_ID,
        workload.budget.pk,
        workload.gpu_count,
        workload.gpu_model,
        workload.min_runtime_s,
        snap.now,
        0,
        workload.cpus,
        workload.memory_bytes,
    )
    return array_quote(
        snap,
        member,
        members,
        limit,
        grace=int(settings.FAIRWAY["GRACE_PERIOD_S"]),
        running=running_workloads(snap),
        limits=wall_time_limits(snap),
        requeued=requeued_attempts(snap),
        max_runtime_s=workload.max_runtime_s,
        waits=waits,
    )


def budget_notes(workload: Workload, snap: Any = None) -> list[str]:
    """What the workload's budget, or the nearest budget above it, does to the quote's allocated
    lines, in the words of the pending reasons ``held`` and ``budget_capped``: on hold, no line has
    a start (the simulation lifts no hold, so without these words the lines only said "none
    before" a week away, tryout24); at a cap that holds new work (``on_cap`` hold) an allocated
    line starts only once enough usage has left the cap's period; at a cap that downgrades new work
    (``on_cap`` downgrade) a line's work that starts before then runs unfunded: neither charged nor
    protected. A cap not reached now but above the budget is named too: the simulation follows
    every cap both ways (docs/estimates.md, "Caps in the simulation"), so a line may start after
    the budget's running work reaches it. ``snap``: the snapshot the quote simulates (its budgets
    carry ``hold`` and ``capped``, its ``caps`` the caps); None: none is said."""
    if snap is None:
        return []
    from scheduler.policy.types import OnCap

    notes: list[str] = []
    for path, node, cap in _budget_chain(workload, snap):
        if node.hold:
            return [
                f"Budget {path} is on hold: no new work of it starts until leadership releases it, so no "
                "start is estimated (the simulation lifts no hold)."
            ]
        if node.capped and node.on_cap == OnCap.HOLD:
            if cap is not None and cap.limit == 0:
                return [
                    f"Budget {path} has reached its cap and holds new allocated work: a cap of 0 GPU-hours "
                    "never lifts, so no allocated line has a start."
                ]
            return [
                f"Budget {path} has reached its cap and holds new allocated work until its usage falls "
                "below the cap: an allocated line starts only once enough of that usage has left the cap's "
                "period (the simulation follows it), and has no start when that is not within the window."
            ]
        if node.capped:
            return [
                f"Budget {path} has reached its cap: until its usage falls below the cap its new work runs "
                "unfunded, as unallocated work does: its minimum runtime protects nothing, it can be "
                "preempted at any time and nothing is charged (a line that starts then says unfunded, "
                "charges 0 and leaves the ratio as it is).",
                "A line that starts after the cap lifts, as usage leaves its period (the simulation "
                "follows it), runs allocated.",
            ]
        if cap is not None and not notes:
            then = (
                "starts only once enough usage has left the period"
                if node.on_cap == OnCap.HOLD
                else "starts unfunded, neither charged nor protected (it says so, with a charge of 0)"
            )
            notes.append(
                f"Budget {path} has a cap of {cap.limit / 3600:g} GPU-hours per {cap.period // 86400} days, "
                f"not reached now; the lines follow it: if its usage reaches the cap before a line's work "
                f"starts, that line {then}."
            )
    return notes


def _budget_chain(workload: Workload, snap: Any) -> Iterator[tuple[str, Any, Any]]:
    """The workload's budget and those above it, nearest first, as ``snap`` has them: each one's
    path, its snapshot budget (``hold``, ``capped``, ``on_cap``) and its cap (None: none)."""
    from budgets.services import budget_paths

    budgets = {b.key: b for b in snap.budgets}
    caps = {cap.budget: cap for cap in getattr(snap, "caps", ())}
    paths = budget_paths()
    key: str | None = str(workload.budget_id)
    seen: set[str] = set()
    while key is not None and key in budgets and key not in seen:
        seen.add(key)
        node = budgets[key]
        yield (paths.get(int(key), node.name) if key.isdigit() else node.name), node, caps.get(key)
        key = node.parent


def no_start_words(workload: Workload, snap: Any = None) -> tuple[str, str]:
    """Why a quote's lines have no start whatever the simulation finds, in a line's words
    (``fairway_cli.words.quote_start_text``'s ``why_none``), for every line and for its allocated
    lines: the nearest budget on hold starts nothing (``budget nlp is on hold``: every line); one
    at a cap of 0 GPU-hours that holds new allocated work never lifts it (``budget nlp/olmo is
    capped at 0 GPU-h``: the allocated lines). "" where the search decides (a cap that lifts as
    usage ages, a downgrading one): those lines read "none before" the search's end, and
    :func:`budget_notes` says the rest. As that walk, the nearest budget held or capped decides."""
    if snap is None:
        return "", ""
    from scheduler.policy.types import OnCap

    for path, node, cap in _budget_chain(workload, snap):
        if node.hold:
            return f"budget {path} is on hold", f"budget {path} is on hold"
        if node.capped:
            if node.on_cap == OnCap.HOLD and cap is not None and cap.limit == 0:
                return "", f"budget {path} is capped at 0 GPU-h"
            return "", ""
    return "", ""


def do_quote(
    owner: object, *, now: datetime | None = None, **submission: object
) -> tuple[Workload, list[QuoteLine], QuoteTerms]:
    """Quote a workload before submission (DESIGN.md §3.8): for the minimum runtimes of
    :func:`quote_runtimes` (the ladder and the one given; ``min_runtime_s`` None: the ladder
    alone, no line ``yours``), the estimated start (one forward simulation with the workload added
    per minimum runtime, :func:`scheduler.sim.estimate.quote`), the GPU-hours its protected part
    would charge (``gpus × M``) and its budget's ratio with that commitment added.

    ``submission``: the keyword arguments of ``do_submit_workload``, validated by it
    (``dry_run``): raises its SubmissionError on the same problems. Writes nothing. The terms
    (:func:`quote_terms`) say what the lines assume; with ``after`` work not ended no line has a
    start, as the workload submitted would have none (it waits on a dependency).
    """
    from django.utils import timezone

    from scheduler import services
    from scheduler.sim.estimate import QUOTE_ID, quote
    from scheduler.snapshot import load_snapshot, policy_workload

    own = submission.get("min_runtime_s")
    workload = services.do_submit_workload(owner, dry_run=True, **quoted_submission(submission))  # type: ignore[arg-type]
    now = now or timezone.now()
    snap, index = load_snapshot(workload.cluster.pk, now, simulated=True)
    # Built as the snapshot builds a submitted workload: its CPU and memory requests count (§3.3).
    hypothetical = policy_workload(
        QUOTE_ID,
        workload.budget.pk,
        workload.gpu_count,
        workload.gpu_model,
        0,
        now,
        0,
        workload.cpus,
        workload.memory_bytes,
    )
    runtimes = quote_runtimes(None if own is None else workload.min_runtime_s, workload.max_runtime_s)
    terms = quote_terms(workload, snap, own=own is not None)
    rows = quote(
        snap,
        hypothetical,
        runtimes,
        grace=int(settings.FAIRWAY["GRACE_PERIOD_S"]),
        running=running_workloads(snap, index),
        limits=wall_time_limits(snap, index),
        requeued=requeued_attempts(snap, index),
        waits=bool(terms.waits_for),  # no start: priced funded, never unfunded (docs/estimates.md "Quotes")
    )
    lines = [
        QuoteLine(
            q.min_runtime,
            datetime.fromtimestamp(q.start, tz=UTC) if q.start is not None else None,
            q.charge_gpu_seconds / 3600,
            q.ratio_after,
            own is not None and q.min_runtime == workload.min_runtime_s,
            datetime.fromtimestamp(q.searched_until, tz=UTC),
            starts_now=q.start is not None and q.start <= snap.now,
            unfunded=q.unfunded,
        )
        for q in rows
    ]
    # One text per ratio, with the digits that tell the rows apart, for every surface alike.
    from scheduler.reports import ratio_texts

    texts = ratio_texts([line.ratio_after for line in lines])
    lines = [replace(line, ratio_after_text=t) for line, t in zip(lines, texts, strict=True)]
    # One statement of each line's start for every surface (quote46: the form and the CLI each
    # worded it from the fields), with why none can come where the budget decides.
    from fairway_cli.words import quote_start_text

    every, allocated = no_start_words(workload, snap)
    why = [every or (allocated if line.min_runtime_s else "") for line in lines]
    lines = [
        replace(line, start_text=quote_start_text(line.__dict__, terms.waits_for, none))
        for line, none in zip(lines, why, strict=True)
    ]
    return workload, lines, terms
