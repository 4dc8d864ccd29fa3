"""The four-metric pyramid of DESIGN.md §8, rolled up per cluster and hour into ``ClusterHourlyMetrics``.

For one cluster and one hour ``[h, h + 1 h)``, in GPU-seconds:

- **registered**: every GPU of a host of the cluster, over the part of the hour between the host's
  ``created_at`` and its ``removed_at`` (GPUs have no registration time of their own).
- **occupied**: the overlap of every attempt's interval ``[placed_at, ended_at or now)`` with the
  hour, on each GPU it holds (``AttemptGPU``; a gang's part released earlier: to its
  ``released_at``, when the live count frees its GPUs), capped per GPU at that GPU's registered seconds;
  split into **allocated** (allocated and funded) and **unallocated** (unallocated or unfunded).
- **utilized**: occupied GPU-seconds × NVML utilization, where it was measured. Per minute from
  the GPU time series (``GpuMinuteSample``: the minute's busy GPU-seconds, 60 s × its mean
  utilization when occupied whole; when occupied in part, its busy readings' share of those taken
  in the seconds occupied: :func:`minute_busy`, busy46, util47);
  for a GPU without any minute sample in the hour, the GPU's latest sample (``last_sample``)
  stands for the whole hour — an approximation, and only when that sample was taken in the hour
  (its own instant, else its host's last heartbeat, falls in it) and was not stale at the hour's
  end (``gpu_report.current_sample``, left50).
- **measured**: the occupied GPU-seconds whose utilization was measured that way. Occupied time
  without a measurement (an imported past: ``manage.py import_history``; minutes without a
  sample; a host that stopped reporting) is **not measured**, never 0 %: the utilization is the
  mean over the measured occupied time (:meth:`Pyramid.fractions`), and unknown when less than
  half of it was measured (:data:`MEASURED_ENOUGH`; docs/standing.md, "The pyramid").
- **available**: GPU healthy (not ``unhealthy``) and host ``active``. Host states and GPU health
  are recorded only as audit events, not as a complete history (docs/standing.md, "Availability is
  sampled"), so the availability is **sampled**: the roll-up, run by the clock right after the
  hour ends (or later for a missed hour), takes the current host state and GPU health as the
  state of the whole hour. To keep the pyramid, a GPU counted unavailable still
  counts its occupied seconds as available (it was up enough to run them).

So ``registered ≥ available ≥ occupied ≥ measured ≥ utilized`` holds per GPU, hence per hour and per range.
Fractions are of the registered GPU-time. The roll-up of an hour is idempotent (upsert).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from scheduler.gpu_report import current_sample, sampled_at
from scheduler.models import GPU, AttemptGPU, Cluster, ClusterHourlyMetrics, Host, HostEvent

HOUR = timedelta(hours=1)
DEFAULT_RANGE = timedelta(days=7)
"""The range the pyramid covers unless asked otherwise: the metrics page's, ``GET
metrics/pyramid/``'s and ``fairway metrics``' (``--days 7``). The API's was the last 24 hours,
so it showed other figures than the page for the same cluster and moment (try42)."""


IMPORTED_SPAN = "history_imported"
"""The kind of a host's event that ``import_history philly`` writes at its instant (``at``), with
the span it simulated on the host, taken as active and healthy (``data["from"]``, ISO): the roll-up
of an hour that span reaches counts that part available, whatever the host's state at the roll-up
(import48b: the import's own hour, rolled up by the clock after it, read its imported part
unavailable while the agents were not up yet)."""


def imported_spans(hosts: Iterable[int], start: datetime, end: datetime) -> dict[int, list[tuple[datetime, datetime]]]:
    """Per host, the parts of ``[start, end)`` an imported past ran on it (:data:`IMPORTED_SPAN`)."""
    spans: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    rows = HostEvent.objects.filter(host_id__in=list(hosts), kind=IMPORTED_SPAN, at__gt=start)
    for host_id, at, data in rows.values_list("host_id", "at", "data"):
        try:
            since = datetime.fromisoformat(str((data or {}).get("from")))
        except ValueError:
            continue
        if since.tzinfo is None:  # the import writes it with its offset; none is no span
            continue
        a0, a1 = max(since, start), min(at, end)
        if a1 > a0:
            spans[host_id].append((a0, a1))
    return spans


def _union_s(intervals: Iterable[tuple[datetime, datetime]]) -> float:
    """The seconds the intervals cover together."""
    total, reach = 0.0, None
    for a0, a1 in sorted(intervals):
        if reach is None or a0 > reach:
            total += (a1 - a0).total_seconds()
            reach = a1
        elif a1 > reach:
            total += (a1 - reach).total_seconds()
            reach = a1
    return total


def hour_of(at: datetime) -> datetime:
    """The start of the UTC hour containing ``at``."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _overlap(a0: datetime, a1: datetime, b0: datetime, b1: datetime) -> float:
    return max(0.0, (min(a1, b1) - max(a0, b0)).total_seconds())


def _utilization(sample: Any) -> float | None:
    """A sample's NVML utilization as 0..1; None when it holds none."""
    value = (sample or {}).get("utilization_pct") if isinstance(sample, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return min(100.0, max(0.0, float(value))) / 100.0


MINUTE = timedelta(minutes=1)


def minute_utilization(total: float, samples: int) -> float:
    """A minute sample's mean NVML utilization as 0..1 (its ``utilization_sum`` over
    ``utilization_samples``, the samples that read it, clamped to 0..100 %; a minute none read is
    not measured, never 0 %: readers skip it, :func:`measured_minutes`): how every GPU-time
    weighted utilization reads a minute (the pyramid's, ``scheduler.efficiency``'s;
    :func:`minute_utilization_sql` is the same in SQL)."""
    return min(100.0, max(0.0, total / samples)) / 100.0


def measured_minutes() -> Any:
    """The ``GpuMinuteSample`` rows whose utilization was read by a sample at least, as a filter:
    a GPU NVML cannot read (a MIG-mode GPU, an error: ``null`` in the heartbeat) is not measured,
    never 0 % (nvml56); every reader of a minute's utilization keeps to these."""
    from django.db.models import Q

    return Q(utilization_samples__gt=0)


def minute_utilization_sql() -> Any:
    """:func:`minute_utilization` of a ``GpuMinuteSample`` row as a database expression, in percent
    (0..100): for sums over many minutes in one query (``scheduler.efficiency``), of
    :func:`measured_minutes` only."""
    from django.db.models import F, FloatField, Value
    from django.db.models.functions import Cast, Greatest, Least

    mean = F("utilization_sum") / Cast("utilization_samples", FloatField())
    return Greatest(Least(mean, Value(100.0)), Value(0.0))


def sampled_seconds(minute: datetime, now: datetime | None = None) -> float:
    """The seconds of ``minute`` its samples cover: 60, or up to ``now`` in the minute in progress
    (its mean is of the samples so far)."""
    if now is None:
        return MINUTE.total_seconds()
    return min(MINUTE.total_seconds(), max(0.0, (now - minute).total_seconds()))


_EPS = 1e-9
"""The slack of :func:`minute_busy`'s whole numbers of readings (float sums of percentages)."""


def minute_busy(held: float, mean: float, samples: int, sampled: float = 60.0) -> float:
    """The one rule of a GPU-minute's busy time (busy46, util47): the minute's samples are the
    GPU's, and its busy seconds are its holders': ``held``, the seconds the GPU was held in the
    minute (every hold of it together), bounds them. ``mean`` is the minute's
    (:func:`minute_utilization`) over its ``samples`` readings (``utilization_samples``), taken
    evenly over its ``sampled`` seconds (60 s, or so far in the minute in progress:
    :func:`sampled_seconds`). A minute held whole is ``sampled`` × its mean. In a minute held in
    part, the free seconds read about 0 %, so the busy seconds are the held seconds' readings:
    ``mean × samples`` busy readings over the readings taken in the held seconds, a whole number,
    ⌊x⌋ or ⌈x⌉ of x = ``samples × held / sampled`` (where the grid fell): ⌈x⌉ when the busy
    readings are more than ⌊x⌋ could give, else ⌊x⌋, the fewest the readings allow. So a GPU busy
    all the seconds held reads 100 % whichever way the grid fell (util47: 60 s × the mean, x read
    as a fraction of a reading, made a 90 s job at 100 % sampled every 15 s read 94 %, and one
    sampled every 5 s with a reading missing 97 %; busy46 before: the free seconds' 0 % diluted
    it to 75 %). Held seconds in which no reading fell (a 3 s hold of a minute read every 5 s)
    read none busy: nothing was read of them. The pyramid's (:func:`weigh_minutes`) and an
    attempt's own partly held minutes (``scheduler.efficiency``); the idle judgement of a held
    minute reads it too (``scheduler.idle.quiet_held``)."""
    span = max(held, min(sampled, MINUTE.total_seconds()))
    if held <= 0 or samples <= 0:
        return 0.0
    if held >= span:
        return held * mean
    busy = mean * samples  # the minute's busy readings (each 0..1), all of them in the held seconds
    x = samples * held / span
    fewest = math.floor(x + _EPS)
    taken = fewest if busy <= fewest + _EPS else math.ceil(x - _EPS)
    return min(held, held * busy / taken) if taken > 0 else 0.0


def weigh_minutes(
    holds: Iterable[tuple[datetime, datetime]],
    series: dict[datetime, tuple[float, int]],
    now: datetime | None = None,
) -> tuple[float, float]:
    """A GPU-time weighted utilization of one GPU held over ``holds`` (``[a0, a1)`` each), with
    ``series`` (minute → :func:`minute_utilization` and its readings, ``utilization_samples``) its
    sampled minutes: returns ``(measured, utilized)`` GPU-seconds. Each sampled minute is measured
    for the seconds held of it (all holds together) and utilized for :func:`minute_busy` of them:
    two holds in one minute share its busy time, never count it twice. A minute without a sample is
    not measured (never 0 %). The pyramid's (:func:`compute_hour`); an attempt's
    (``scheduler.efficiency``) weighs its minutes the same way, but only those no other attempt
    held the GPU in, its own samples (util63, util46)."""
    held: dict[datetime, float] = defaultdict(float)
    for a0, a1 in holds:
        minute = a0.replace(second=0, microsecond=0)
        while minute < a1:
            nxt = minute + MINUTE
            if minute in series:
                held[minute] += _overlap(a0, a1, minute, nxt)
            minute = nxt
    measured = sum(held.values())
    utilized = sum(minute_busy(h, *series[m], sampled_seconds(m, now)) for m, h in held.items())
    return measured, utilized


def _minute_samples(gpu_ids: list[int], start: datetime, end: datetime) -> dict[int, dict[datetime, tuple[float, int]]]:
    """GPU id → minute → mean utilization (0..1) and its readings, from the per-minute roll-ups, if
    that table exists."""
    try:
        from scheduler.models import GpuMinuteSample
    except ImportError:  # pragma: no cover - the time series is optional
        return {}
    out: dict[int, dict[datetime, tuple[float, int]]] = defaultdict(dict)
    rows = GpuMinuteSample.objects.filter(measured_minutes(), gpu_id__in=gpu_ids, minute__gte=start, minute__lt=end)
    values = rows.values_list("gpu_id", "minute", "utilization_sum", "utilization_samples")
    for gpu_id, minute, total, n in values.iterator():
        out[gpu_id][minute] = (minute_utilization(total, n), n)
    return out


def compute_hour(
    cluster: Cluster, hour: datetime, now: datetime | None = None, *, hosts_available: bool = False
) -> dict[str, float]:
    """The pyramid's GPU-seconds of ``cluster`` over ``[hour, hour + 1 h)`` (clipped at ``now``).

    ``hosts_available``: every registered GPU counts as available whatever its host's state now
    (an imported past, simulated on the hosts taken as active and healthy: ``history.rollup_span``);
    without it, the part of the hour an imported past ran on a host (:func:`imported_spans`: the
    hour of the import) counts that host's GPUs available, as the earlier imported hours do."""
    now = now or timezone.now()
    start = hour_of(hour)
    end = min(start + HOUR, max(now, start))
    registered: dict[int, float] = {}
    available_now: dict[int, bool] = {}
    host_of: dict[int, int] = {}
    last_util: dict[int, float | None] = {}
    hosts = Host.objects.filter(cluster=cluster, created_at__lt=end).filter(
        Q(removed_at__isnull=True) | Q(removed_at__gt=start)
    )
    gpus = GPU.objects.filter(host__in=hosts).filter(Q(removed_at__isnull=True) | Q(removed_at__gt=start))
    for gid, host_id, created, host_removed, gpu_removed, state, health, sample, heartbeat in gpus.values_list(
        "id",
        "host_id",
        "host__created_at",
        "host__removed_at",
        "removed_at",
        "host__state",
        "health",
        "last_sample",
        "host__last_heartbeat",
    ):
        # a GPU leaves the registered time when its host is removed or an approved inventory drops it
        removed = min((r for r in (host_removed, gpu_removed) if r is not None), default=None)
        registered[gid] = _overlap(created, removed or end, start, end)
        host_of[gid] = host_id
        available_now[gid] = removed is None and (
            hosts_available or (state == Host.State.ACTIVE and health != GPU.Health.UNHEALTHY)
        )
        # The latest sample measures this hour only if it was taken in it (not a week later; its
        # own instant, else its host's last heartbeat) and was not stale at the hour's end (left50:
        # a GPU sampled last at H+1 min does not stand for the rest of H).
        taken = sampled_at(sample) or heartbeat
        taken_in_hour = taken is not None and start <= taken <= end
        last_util[gid] = _utilization(current_sample(sample, end)) if taken_in_hour else None

    links = (
        AttemptGPU.objects.filter(gpu_id__in=list(registered), attempt__placed_at__lt=end)
        .filter(Q(attempt__ended_at__isnull=True) | Q(attempt__ended_at__gt=start))
        .values_list(
            "gpu_id",
            "attempt__placed_at",
            "attempt__ended_at",
            "released_at",
            "attempt__allocated",
            "attempt__unfunded",
        )
    )
    intervals: dict[int, list[tuple[datetime, datetime, bool]]] = defaultdict(list)
    for gid, placed, ended, released, allocated, unfunded in links.iterator():
        # a gang's part released before its attempt ended holds its GPUs to its release, as the
        # live count (``reports.occupancy``) frees them then (words63)
        a0, a1 = max(placed, start), min(released or ended or end, end)
        if a1 > a0:
            intervals[gid].append((a0, a1, bool(allocated and not unfunded)))
    minutes = _minute_samples(list(intervals), start, end) if intervals else {}
    imported = {} if hosts_available else imported_spans(set(host_of.values()), start, end)

    totals = dict.fromkeys(("registered", "available", "allocated", "unallocated", "measured", "utilized"), 0.0)
    for gid, reg in registered.items():
        occupied = {True: 0.0, False: 0.0}
        utilized = measured = 0.0
        series = minutes.get(gid)
        stand_in = last_util[gid]
        holds = intervals.get(gid, [])
        for a0, a1, funded in holds:
            occupied[funded] += (a1 - a0).total_seconds()
        if series:  # per minute, all its holds together (busy46)
            measured, utilized = weigh_minutes([(a0, a1) for a0, a1, _funded in holds], series, now)
        elif stand_in is not None:
            measured = occupied[True] + occupied[False]
            utilized = measured * stand_in
        busy = occupied[True] + occupied[False]
        if busy > reg > 0:  # never more than the GPU's registered time (overlapping rows, clock skew)
            scale = reg / busy
            occupied = {k: v * scale for k, v in occupied.items()}
            utilized *= scale
            measured *= scale
            busy = reg
        elif reg <= 0:
            continue
        totals["registered"] += reg
        if available_now[gid]:
            totals["available"] += reg
        elif spans := imported.get(host_of[gid]):  # the imported part, and the occupied time besides
            totals["available"] += max(busy, min(reg, _union_s(spans + [(a0, a1) for a0, a1, _f in holds])))
        else:
            totals["available"] += busy
        totals["allocated"] += occupied[True]
        totals["unallocated"] += occupied[False]
        totals["measured"] += min(measured, busy)
        totals["utilized"] += min(utilized, measured, busy)
    return totals


def rollup_hour(
    cluster: Cluster, hour: datetime, now: datetime | None = None, *, hosts_available: bool = False
) -> ClusterHourlyMetrics:
    """Compute and store (upsert) the hour of ``cluster`` starting at ``hour_of(hour)``
    (``hosts_available``: as ``compute_hour``'s)."""
    now = now or timezone.now()
    t = compute_hour(cluster, hour, now, hosts_available=hosts_available)
    row, _ = ClusterHourlyMetrics.objects.update_or_create(
        cluster=cluster,
        hour=hour_of(hour),
        defaults={
            "registered_gpu_s": t["registered"],
            "available_gpu_s": t["available"],
            "allocated_gpu_s": t["allocated"],
            "unallocated_gpu_s": t["unallocated"],
            "measured_gpu_s": t["measured"],
            "utilized_gpu_s": t["utilized"],
            "computed_at": now,
        },
    )
    return row


def rollup_previous_hour(now: datetime | None = None) -> int:
    """Roll up the last complete hour of every cluster (the clock's hourly job); returns the rows written.

    A cluster with no host registered in that hour gets no row: the clock rolls up at its start,
    and a cluster made at 10:58 showed the hour 09:00 as a complete hour of 0 % availability."""
    now = now or timezone.now()
    hour = hour_of(now) - HOUR
    clusters = list(
        Cluster.objects.filter(hosts__created_at__lt=hour + HOUR)
        .filter(Q(hosts__removed_at__isnull=True) | Q(hosts__removed_at__gt=hour))
        .distinct()
    )
    for cluster in clusters:
        rollup_hour(cluster, hour, now)
    return len(clusters)


CATCH_UP_HOURS = 24
"""How far back (hours) :func:`rollup_missing_hours` makes up complete hours that have no row."""


def rollup_missing_hours(now: datetime | None = None, hours: int = CATCH_UP_HOURS) -> int:
    """Roll up every complete hour of the last ``hours`` that a cluster had a host in and has no
    row for (the clock's roll-up); returns the rows written. Idempotent: a stored hour is never
    computed again, so a second clock or a redelivered message writes nothing.

    Why catch up: a failed roll-up's retry is a delayed dramatiq message, which a worker drops with
    its Redis connection (docs/deploy.md, "Lost delayed messages"); the clock asks every few
    minutes, so an hour lost that way is written at the next request. A late hour's availability is
    sampled then, as every hour's is at its roll-up (module docstring). Three queries, plus those of
    each hour written (:func:`rollup_hour`)."""
    now = now or timezone.now()
    current = hour_of(now)
    first = current - hours * HOUR
    spans: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    hosts = Host.objects.filter(created_at__lt=current).filter(Q(removed_at__isnull=True) | Q(removed_at__gt=first))
    for cid, created, removed in hosts.values_list("cluster_id", "created_at", "removed_at"):
        spans[cid].append((created, removed or current))
    stored = set(
        ClusterHourlyMetrics.objects.filter(cluster_id__in=list(spans), hour__gte=first, hour__lt=current).values_list(
            "cluster_id", "hour"
        )
    )
    written = 0
    for cluster in Cluster.objects.filter(pk__in=list(spans)).order_by("pk"):
        for n in range(hours, 0, -1):
            hour = current - n * HOUR
            # as rollup_previous_hour: only an hour in which the cluster had a host (break28)
            if (cluster.pk, hour) in stored or not any(c < hour + HOUR and r > hour for c, r in spans[cluster.pk]):
                continue
            rollup_hour(cluster, hour, now)
            written += 1
    return written


def _part_words(part: float) -> str:
    """A part (0..1) of a whole, strictly between none and all, as a percentage that never reads as
    none or all: ``12%``, ``less than 1%`` (not ``0%``), ``more than 99%`` (not ``100%``)."""
    if part < 0.005:
        return "less than 1%"
    if part >= 0.995:
        return "more than 99%"
    return f"{100 * part:.0f}%"


MEASURED_ENOUGH = 0.5
"""The part of the occupied GPU-time that must have been measured for the pyramid to state a
utilization (import48): under it, the figure was the measured minority's mean projected onto the
rest (the demo's 7-day range, tryout22: a few live minutes' mean times an imported week's
occupancy, "72% (measured over …" less than 1 %), so it is not measured, as an hour with no sample is
(docs/standing.md, "Utilization only where it was measured")."""


@dataclass
class Pyramid:
    """Sums of GPU-seconds and the fractions of DESIGN.md §8."""

    registered: float = 0.0
    available: float = 0.0
    allocated: float = 0.0
    unallocated: float = 0.0
    measured: float = 0.0
    utilized: float = 0.0

    def add(self, row: ClusterHourlyMetrics) -> None:
        self.registered += row.registered_gpu_s
        self.available += row.available_gpu_s
        self.allocated += row.allocated_gpu_s
        self.unallocated += row.unallocated_gpu_s
        self.measured += row.measured_gpu_s
        self.utilized += row.utilized_gpu_s

    def utilization_of_occupied(self) -> float | None:
        """The GPU-time weighted mean NVML utilization (0..1) over the occupied GPU-time where it
        was measured (DESIGN.md §8); None when less than :data:`MEASURED_ENOUGH` of the occupied
        time was measured (imported history: unknown, not 0 %, and not a few minutes' mean
        projected onto it). 0.0 when nothing was occupied."""
        occupied = self.allocated + self.unallocated
        if occupied <= 0:
            return 0.0
        if self.measured > 0 and self.measured >= MEASURED_ENOUGH * occupied:
            return min(1.0, self.utilized / self.measured)
        return None

    def fractions(self) -> dict[str, float | None]:
        """The pyramid's fractions of registered GPU-time; ``utilization`` is the occupancy times
        the mean measured utilization (so it never extrapolates 0 % from time nobody measured, and
        ``utilization ≤ occupancy`` holds), None with ``utilization_of_occupied`` when not measured
        (less than :data:`MEASURED_ENOUGH` of the occupied time)."""
        reg = self.registered
        occupied = self.allocated + self.unallocated

        def frac(x: float, of: float) -> float:
            return round(x / of, 6) if of > 0 else 0.0

        mean = self.utilization_of_occupied()
        return {
            "availability": frac(self.available, reg),
            "occupancy": frac(occupied, reg),
            "occupancy_allocated": frac(self.allocated, reg),
            "occupancy_unallocated": frac(self.unallocated, reg),
            "utilization": round(mean * occupied / reg, 6) if mean is not None and reg > 0 else mean,
            "utilization_of_occupied": round(mean, 6) if mean is not None else None,
            "utilization_measured": frac(self.measured, occupied),
            "impact": frac(self.allocated, occupied),
        }

    def utilization_text(self) -> str:
        """The utilization in words, the one wording every surface shows (web, API, CLI): the
        fraction of registered GPU-time and the occupied time's mean, ``41% (occupied GPU-time at
        68% mean utilization)``, ``… , measured over 12% of the occupied GPU-time)``, ``0%`` when
        nothing was occupied, or ``not measured (…)``."""
        share = self.fractions()
        value = share["utilization"]
        measured = share["utilization_measured"] or 0.0
        if value is None and measured > 0:
            return (
                f"not measured (utilization samples for {_part_words(measured)} of the occupied GPU-time, "
                f"under the {100 * MEASURED_ENOUGH:.0f}% a figure needs; the rest unsampled, e.g. imported history)"
            )
        if value is None:
            return "not measured (no utilization samples for the occupied GPU-time, e.g. imported history)"
        occupied = self.allocated + self.unallocated
        if occupied <= 0:
            return f"{100 * value:.0f}%"
        # the fraction of registered time alone read as the occupied time's mean (try41: 38 % shown,
        # the occupied GPUs were 66 % busy): both, the mean with the part it was measured over
        mean = f"occupied GPU-time at {100 * (share['utilization_of_occupied'] or 0.0):.0f}% mean utilization"
        if measured >= 0.9995:
            return f"{100 * value:.0f}% ({mean})"
        return f"{100 * value:.0f}% ({mean}, measured over {_part_words(measured)} of the occupied GPU-time)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "registered_gpu_hours": round(self.registered / 3600, 4),
            "available_gpu_hours": round(self.available / 3600, 4),
            "allocated_gpu_hours": round(self.allocated / 3600, 4),
            "unallocated_gpu_hours": round(self.unallocated / 3600, 4),
            "measured_gpu_hours": round(self.measured / 3600, 4),
            "utilized_gpu_hours": round(self.utilized / 3600, 4),
            **self.fractions(),
            "utilization_text": self.utilization_text(),
        }


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def pyramid_report(
    clusters: list[Cluster], since: datetime, until: datetime, now: datetime | None = None, *, budgets: bool = True
) -> list[dict[str, Any]]:
    """Per cluster: the pyramid of each hour in ``[since, until)`` and of the whole range.

    Complete hours come from the stored roll-ups; the current hour, not rolled up yet, is computed
    now up to ``now`` and marked ``partial`` (the finding: 0 % with 32 busy GPUs because only
    completed hours counted). ``range`` says what the figures cover. ``budgets`` (per budget:
    delivered and owed GPU-hours and the entitlement attainment of §8 over the lookback window) is
    the budgets' standing (``scheduler.reports.budget_standings``), the numbers of the budgets page.
    """
    now = now or timezone.now()
    current = hour_of(now)
    rows = ClusterHourlyMetrics.objects.filter(cluster__in=clusters, hour__gte=hour_of(since), hour__lt=until)
    by_cluster: dict[int, list[ClusterHourlyMetrics]] = defaultdict(list)
    for row in rows.order_by("hour"):
        if row.hour < current:
            by_cluster[row.cluster_id].append(row)
    out = []
    tree = None
    for cluster in clusters:
        total = Pyramid()
        hours = []
        stored = by_cluster.get(cluster.pk, [])
        live: ClusterHourlyMetrics | None = None
        if since <= now and until > current:
            t = compute_hour(cluster, current, now)
            live = ClusterHourlyMetrics(
                cluster=cluster,
                hour=current,
                registered_gpu_s=t["registered"],
                available_gpu_s=t["available"],
                allocated_gpu_s=t["allocated"],
                unallocated_gpu_s=t["unallocated"],
                measured_gpu_s=t["measured"],
                utilized_gpu_s=t["utilized"],
                computed_at=now,
            )
        for row in [*stored, *([live] if live is not None else [])]:
            one = Pyramid()
            one.add(row)
            total.add(row)
            hours.append({"hour": _iso(row.hour), "partial": row is live, **one.as_dict()})
        covered_until = min(until, now) if live is not None else (stored[-1].hour + HOUR if stored else None)
        report: dict[str, Any] = {
            "cluster": cluster.name,
            "range": {
                "since": _iso(hours_start(stored, live, since)),
                "until": _iso(covered_until) if covered_until is not None else None,
                "complete_hours": len(stored),
                "partial_hour_until": _iso(now) if live is not None else None,
            },
            "total": total.as_dict(),
            "hours": hours,
        }
        if budgets:
            from budgets.services import load_tree
            from scheduler.reports import budget_standings

            tree = load_tree() if tree is None else tree
            standing = budget_standings(cluster, tree, now)
            report["budgets"] = [
                {
                    "path": b.path,
                    "delivered_gpu_hours": b.usage_gpu_hours,
                    "owed_gpu_hours": b.owed_gpu_hours,
                    "entitlement_gpu_hours": b.entitlement_gpu_hours,
                    "demand_gpu_hours": b.demand_gpu_hours,
                    "attainment": b.attainment,
                    "archived": b.archived,
                }
                # archived ones too, marked, as the budgets page lists them: their GPU-hours stay in
                # their parents' rows (try41: the children no longer added up to the parent)
                for b in standing.budgets
                if b.parent_id is not None
            ]
            report["budgets_window_s"] = standing.window_s
        out.append(report)
    return out


def hours_start(stored: list[ClusterHourlyMetrics], live: ClusterHourlyMetrics | None, since: datetime) -> datetime:
    """The start of the first hour shown, else the range's start."""
    if stored:
        return stored[0].hour
    return live.hour if live is not None else since


def latest_hour(cluster_ids: list[int]) -> dict[int, ClusterHourlyMetrics]:
    """The most recent stored hour of each cluster (for Prometheus)."""
    out: dict[int, ClusterHourlyMetrics] = {}
    for cid in cluster_ids:
        row = ClusterHourlyMetrics.objects.filter(cluster_id=cid).order_by("-hour").first()
        if row is not None:
            out[cid] = row
    return out
