"""Build the policy's input from the database (DESIGN.md §2: snapshot → policy → decisions → apply).

:func:`load_snapshot` reads one cluster with a fixed number of bulk queries
(``values_list``, no per-row queries), so its cost in queries does not grow with
the number of hosts, attempts or pending workloads. Alongside the pure
:class:`~scheduler.policy.types.Snapshot` it returns a :class:`SnapshotIndex`
that maps the policy's string ids and ``(host, index)`` GPU refs back to
database primary keys, so the tick can apply decisions without re-reading rows.
"""

from __future__ import annotations

import gc
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, BooleanField, Count, ExpressionWrapper, Q, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from budgets.models import Budget, UsageEntry
from scheduler.accounting import host_silent_since, silent_until_sql
from scheduler.hardware_memo import MEMO
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload, WorkloadDependency
from scheduler.policy import types as p
from scheduler.policy.caps import STILL_RUNNING, cap_members, cap_state, with_capped
from scheduler.prepared import Prepared

_HOLDING = (Workload.State.STARTING, Workload.State.RUNNING, Workload.State.PREEMPTING)
"""Workload states that hold GPUs: they count against an array's ``%N`` cap."""


def epoch(dt: datetime) -> int:
    """An aware datetime as whole UNIX seconds, floored (DESIGN.md §3.4: exact integer times)."""
    return math.floor(dt.timestamp())


def epoch_up(dt: datetime) -> int:
    """An aware datetime as whole UNIX seconds, rounded up.

    Used for an open attempt's start: the policy derives protection from it
    (``started_at + M``), and rounding down would end the protection up to a second
    before ``M`` has really passed. Rounding up keeps the contract; the live ratio
    then misses under a second of the attempt's usage (its charge is computed from
    the exact timestamps when it ends).
    """
    return math.ceil(dt.timestamp())


@dataclass(slots=True)
class OpenAttemptInfo:
    """Database facts about one open attempt, keyed by its pk in :class:`SnapshotIndex`."""

    workload_id: int
    host_ids: frozenset[int]
    gpu_ids: tuple[int, ...]
    stopping: bool


@dataclass(slots=True)
class SnapshotIndex:
    """Maps the policy's ids back to database rows (built by :func:`load_snapshot`)."""

    cluster_id: int
    host_id_by_name: dict[str, int] = field(default_factory=dict)
    host_state_by_name: dict[str, str] = field(default_factory=dict)
    gpu_id_by_ref: dict[p.GpuRef, int] = field(default_factory=dict)
    gpu_host_id: dict[int, int] = field(default_factory=dict)
    attempts: dict[int, OpenAttemptInfo] = field(default_factory=dict)
    # pending workload pk → (pending_reason, pending_detail) as stored, to write only changes
    pending_reason: dict[int, tuple[str, Any]] = field(default_factory=dict)
    # GPU pk → workload pk it is nominated for
    nominated: dict[int, int] = field(default_factory=dict)
    # pending workload pk → its ``spec_version`` as read: the apply starts nothing for a workload
    # updated, held or released since (``services.do_update_workload``, ``do_hold_workload``,
    # ``do_release_workload``; docs/jobs.md), and writes no reason judged on the old one
    pending_version: dict[int, int] = field(default_factory=dict)
    # the policy's workload id → workload pk, only when ids are not the pks as text (``workload_key``)
    workload_pk: dict[str, int] = field(default_factory=dict)
    # budget pk → allocated GPU-seconds of its subtree over its cap period, for each budget with a cap
    # (what ``capped`` compared with the cap, ``policy.caps.cap_state``; the budgets page's "412 used", try38)
    cap_used: dict[int, int] = field(default_factory=dict)
    # Only of a snapshot read for a simulation (``load_snapshot(..., simulated=True)``, live keys),
    # else None: the workloads of its open attempts as policy workloads (the forward simulation
    # requeues what it preempts) and the wall-time limits of those and of its pending workloads,
    # read with their rows (``scheduler.estimates.running_workloads``, ``wall_time_limits``)
    running: dict[str, p.Workload] | None = None
    limits: dict[str, int] | None = None
    # the snapshot's stopping attempts whose workloads run again on release (``stop_rules.runs_again``:
    # preempted, drained, ...), by attempt id: the forward simulation requeues them (est48)
    requeued: frozenset[str] | None = None

    def pk_of(self) -> Callable[[str], int]:
        """The function from the policy's workload id to the workload's pk (a plain ``int`` live)."""
        return self.workload_pk.__getitem__ if self.workload_pk else int


def policy_workload(
    key: str,
    budget_id: object,
    gpus: int,
    model: str,
    min_runtime: int,
    submitted_at: datetime | int,
    seq: int,
    cpus: int | None,
    memory: int | None,
    *,
    waiting: bool = False,
    group: str | None = None,
    hold: str = "",
) -> p.Workload:
    """The policy's workload for a database workload's fields: the one builder of the pending
    workloads a snapshot reads, of the workloads of its running attempts (requeued by the forward
    simulation) and of a quote's hypothetical workload, so all three carry the same requests
    (GPUs, model, ``M``, CPUs and memory, DESIGN.md §3.3). ``submitted_at`` is an aware datetime
    or already its :func:`epoch` (the snapshot selects it so, :func:`_epoch_col`)."""
    return p.Workload(
        id=key,
        budget=str(budget_id),
        gpus=gpus,
        model=model,
        min_runtime=min_runtime,
        submitted_at=epoch(submitted_at) if isinstance(submitted_at, datetime) else submitted_at,
        seq=seq,
        cpus=cpus,
        memory=memory,
        waiting=waiting,
        group=group,
        hold=hold,
    )


def load_snapshot(
    cluster: Cluster | int,
    now: datetime,
    *,
    workload_key: Callable[[int], str] = str,
    with_cap_records: bool = True,
    simulated: bool = False,
) -> tuple[p.Snapshot, SnapshotIndex]:
    """Read cluster ``cluster`` at ``now`` (aware datetime) into a policy snapshot.

    ``workload_key`` gives a workload pk its policy id, the "workload id" of DESIGN.md's
    tie-breaks (compared as plain strings); it must be one-to-one. Live: the pk as text. The
    scenario runner's db backend passes the scenario id (tests/scenarios/FORMAT.md), so ties go
    the same way as in memory whatever pks the rows get; ``SnapshotIndex.workload_pk`` maps back.

    Queries: hosts, GPUs, budgets, open attempts, their GPUs, pending workloads,
    closed allocated attempts inside the window, usage entries — eight in all,
    whatever the size of the cluster, plus one when some budget has a cap: the usage records
    its cap counts (:func:`cap_records`), which mark the budget capped by the rule of
    :func:`scheduler.policy.caps.capped_at` and travel in the snapshot (``caps``,
    ``cap_records``) so the forward simulation of estimates follows the caps. Times become
    integer epoch seconds. ``with_cap_records`` False (the tick, the budgets' standing: nothing
    simulated) leaves ``cap_records`` empty and sums the caps' usage in the database instead
    (:func:`cap_totals`, the same one query; left44). The hosts' and GPUs' two
    queries read only their volatile rows while the process keeps the stable ones
    (:func:`_hardware_kept`; :func:`_hardware_plain`, every row, is its oracle).
    ``simulated`` (estimates and quotes, live keys only) also reads, in the same two queries, what
    a forward simulation needs beyond the policy's snapshot: the open attempts' workloads' other
    requests and every wall-time limit (``SnapshotIndex.running``, ``limits``); the tick reads
    neither (db63: they were two more queries per run, one an ``IN`` list of 25,000 ids).
    """
    with collector_paused():
        return _load_snapshot(cluster, now, workload_key, with_cap_records=with_cap_records, simulated=simulated)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a snapshot is built: its rows and
    dataclasses (tens of thousands) set off ~200 collections of the young generations and one or
    two of the whole heap, 0.05–0.15 s of a 0.2–0.3 s load (1,250 hosts, 19,152 pending). The tick
    keeps it paused through its policy and apply too (:func:`scheduler.tick.run_tick`: they make no
    cyclic garbage at that size, and a full collection among them walked the snapshot for 0.1–0.25
    s). Reference counting still frees what they drop; the cycles wait for the next collection.
    Process-wide: a thread entering while another has paused it leaves the resumption to that one,
    so the collector is resumed by whoever paused it and never left paused."""
    paused_here = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused_here:
            gc.enable()


def _load_snapshot(
    cluster: Cluster | int,
    now: datetime,
    workload_key: Callable[[int], str],
    hardware: Callable[[int, SnapshotIndex], _HostsRead] | None = None,
    *,
    with_cap_records: bool = True,
    simulated: bool = False,
) -> tuple[p.Snapshot, SnapshotIndex]:
    """The snapshot; ``hardware``: how its hosts and GPUs are read (default :func:`_hardware_kept`;
    :func:`_hardware_plain` reads every row, the oracle)."""
    hardware = hardware or _hardware_kept
    cluster_id = cluster if isinstance(cluster, int) else cluster.pk
    now_s = epoch(now)
    conf = settings.FAIRWAY
    window = int(conf["LOOKBACK_WINDOW_S"])
    grace = int(conf["GRACE_PERIOD_S"])  # a stopping attempt's GPUs are expected back at stop + grace
    since = now - timedelta(seconds=window)
    index = SnapshotIndex(cluster_id=cluster_id)

    hosts, gpu_ref_by_id, silent_since = hardware(cluster_id, index)

    budget_rows = _BUDGETS()
    budgets = [
        p.Budget(
            key=str(bid),
            name=name,
            parent=str(parent_id) if parent_id is not None else None,
            shares=shares,
            archived=archived_at is not None,
            hold=hold,
            on_cap=p.OnCap(on_cap),
        )
        for bid, name, parent_id, shares, archived_at, hold, on_cap, _cap, _days in budget_rows
    ]
    caps = _caps(budget_rows)
    cap_members_of = cap_members(caps, budgets)

    # Open attempts and the GPUs they hold, read without a filter on the workloads' cluster (kept
    # in Python; open attempts are at most the installation's GPUs): with one, the planner of a
    # table without statistics took ``cluster_id = %s`` for a handful of workloads and rescanned
    # them per open attempt (0.3-1.3 s a read in the tick at 1,000 hosts; "lat32" in
    # docs/benchmarks/api_load.md). Open attempts come by the ``ended_at`` index, their workloads by
    # primary key, their GPUs by the ``attempt`` index, whatever the statistics.
    simulated = simulated and workload_key is str  # the facts are keyed by the live ids
    attempt_rows = [
        row for row in (_OPEN_ATTEMPTS_SIMULATED if simulated else _OPEN_ATTEMPTS)() if row[9] == cluster_id
    ]
    links: dict[int, list[tuple[int, int]]] = defaultdict(list)
    # an attempt's GPU rows close with its end, in the same transaction
    open_links = (
        AttemptGPU.objects.filter(_pk_in(AttemptGPU, "attempt_id", [r[0] for r in attempt_rows]), open=True)
        if attempt_rows
        else AttemptGPU.objects.none()  # no query, as ``__in=[]``
    )
    for aid, gid, rank in open_links.values_list("attempt_id", "gpu_id", "rank"):
        links[aid].append((rank, gid))

    def named(wid: int) -> str:
        k = workload_key(wid)
        index.workload_pk[k] = wid
        return k

    key = str if workload_key is str else named  # live: no map, ids are the pks as text

    attempts: list[p.Attempt] = []
    for aid, wid, bid, allocated, min_runtime, started_s, stop_s, cpus, memory, *_rest in attempt_rows:
        gpu_ids = tuple(gid for _rank, gid in sorted(links.get(aid, ()), key=lambda rg: (rg[0], gpu_ref_by_id[rg[1]])))
        if not gpu_ids:
            continue  # ended between the two reads (READ COMMITTED): it holds nothing any more
        index.attempts[aid] = OpenAttemptInfo(
            workload_id=wid,
            host_ids=frozenset(index.gpu_host_id[g] for g in gpu_ids),
            gpu_ids=gpu_ids,
            stopping=stop_s is not None,
        )
        attempts.append(
            p.Attempt(
                id=str(aid),
                workload=key(wid),
                budget=str(bid),
                gpus=tuple(gpu_ref_by_id[g] for g in gpu_ids),
                allocated=allocated,
                min_runtime=min_runtime,
                started_at=started_s,
                stopping=stop_s is not None,
                release_at=stop_s + grace if stop_s is not None else None,
                charged_until=min(
                    (silent_since[h] for h in index.attempts[aid].host_ids if h in silent_since), default=None
                ),
                cpus=cpus,
                memory=memory,
            )
        )

    # The usage of closed attempts is read only now, after the open ones and their GPUs, and
    # leaves out the attempts counted open (cap61): under READ COMMITTED each statement sees the
    # ends committed before it, so an attempt that ended meanwhile is counted once, open if it
    # was at both reads above, else closed. Read first (as before), an end committed between the
    # caps' sum and the open attempts' read was in neither: its budget started funded over its cap.
    counted_open = [int(a.id) for a in attempts if a.allocated and a.started_at is not None]
    # The caps' usage: from their records (kept in the snapshot for the forward simulation), or,
    # where nothing simulates, summed in the database without a record per closed attempt.
    records_for_caps = (
        cap_records(caps, cap_members_of, now, cluster_id, counted_open=counted_open) if with_cap_records else []
    )
    cap_sums = (
        None if with_cap_records else cap_totals(caps, cap_members_of, now, cluster_id, counted_open=counted_open)
    )

    limits: dict[str, int] | None = {} if simulated else None
    pending: list[p.Workload] = []
    kept = _kept_pending.get(cluster_id) or _KeptPending()
    made = _KeptPending()
    capped_groups: dict[int, int] = {}
    for (
        wid,
        bid,
        count,
        model,
        min_runtime,
        submitted_at,
        seq,
        reason,
        detail_text,
        cpus,
        memory,
        waiting,
        group,
        limit,
        version,
        hold,
    ) in _pending_rows(cluster_id, limits):
        detail = made.details.get(detail_text)
        if detail is None:
            detail = kept.details.get(detail_text)
            if detail is None:
                detail = json.loads(detail_text)
            made.details[detail_text] = detail
        index.pending_reason[wid] = (reason, detail)
        index.pending_version[wid] = version
        if limit is not None:
            capped_groups[group] = limit
        fields = (
            key(wid),
            bid,
            count,
            model,
            min_runtime,
            submitted_at,
            seq if seq is not None else wid,
            cpus,
            memory,
            bool(waiting),
            str(group) if limit is not None else None,
            hold,
        )
        workload = kept.workloads.get(fields)
        if workload is None:
            k, b, n, m, mr, sub, sq, c, mem, wait, grp, hd = fields
            workload = policy_workload(k, b, n, m, mr, sub, sq, c, mem, waiting=wait, group=grp, hold=hd)
        made.workloads[fields] = workload
        pending.append(workload)
    if workload_key is str:  # the scenario runner's keys are its own: it keeps nothing
        _kept_pending[cluster_id] = made
    group_limits: dict[str, tuple[int, int]] = {}
    if capped_groups:  # one more query, only when an array with a %N cap has pending members
        holding = dict(
            Workload.objects.filter(group_id__in=list(capped_groups), state__in=_HOLDING)
            .values("group_id")
            .annotate(n=Count("id"))
            .values_list("group_id", "n")
        )
        group_limits = {str(g): (lim, holding.get(g, 0)) for g, lim in sorted(capped_groups.items())}
    if limits is not None:
        index.running, index.limits, index.requeued = _running_facts(attempt_rows, index, group_limits, limits)

    if caps:  # DESIGN.md §3.7, the rule stated once (scheduler/policy/caps.py)
        if cap_sums is None:
            used, capped = cap_state(caps, cap_members_of, records_for_caps, attempts, now_s)
        else:  # the records' part summed by the database, the cluster's open attempts here
            used, capped = cap_state(caps, cap_members_of, (), attempts, now_s, counted=cap_sums)
        index.cap_used = {int(cap.budget): u for cap, u in zip(caps, used, strict=True)}
        budgets = list(with_capped(budgets, caps, capped))

    usage: list[p.UsageRecord] = [
        p.UsageRecord(budget=str(bid), start=start, end=end, gpus=gpus)
        for aid, bid, start, end, gpus in _CLOSED_USAGE(cluster_id, since)
        if gpus and aid not in index.attempts  # ended since the open attempts' read: counted open (cap61)
    ]
    usage.extend(
        p.UsageRecord(
            budget=str(bid),
            start=start,
            end=end,
            gpus=gpus,
            gpu_seconds=gpu_seconds,
        )
        for bid, start, end, gpus, gpu_seconds in _USAGE_ENTRIES(cluster_id, since)
    )

    nominations: dict[str, list[p.GpuRef]] = defaultdict(list)
    for gid, wid in index.nominated.items():
        nominations[key(wid)].append(gpu_ref_by_id[gid])

    snapshot = p.Snapshot(
        now=now_s,
        hosts=tuple(hosts),
        budgets=tuple(budgets),
        attempts=tuple(attempts),
        pending=tuple(pending),
        usage=tuple(usage),
        nominations={wid: tuple(sorted(refs)) for wid, refs in sorted(nominations.items())},
        window=window,
        max_reservations=int(conf["MAX_RESERVATIONS"]),
        group_limits=group_limits,
        caps=tuple(caps),
        cap_records=tuple(records_for_caps),
    )
    return snapshot, index


_HostsRead = tuple[list[p.Host], dict[int, p.GpuRef], dict[int, int]]
"""What a snapshot reads of its cluster's hosts and GPUs: the policy's hosts (by name), each GPU
pk's ref, each offline host's last heartbeat (epoch seconds); the index's host and GPU maps filled."""

_HostRow = tuple[int, str, str, Any, bool, datetime | None, int | None, int | None, datetime | None]
_GpuRow = tuple[int, int, str, int, str, str, int | None]
_ACTIVE = Host.State.ACTIVE.value
_HEALTHY = GPU.Health.HEALTHY.value


def _host_rows(cluster_id: int) -> list[_HostRow]:
    """The cluster's hosts (not removed)."""
    return _HOSTS(cluster_id)


def _gpu_rows(cluster_id: int) -> list[_GpuRow]:
    """The GPUs of every host of the cluster: those of removed hosts too, so that an attempt left
    on one can be named; not those an approved inventory removed (they hold no open attempt:
    ``do_approve_host_inventory``). Not in the model's order (host name, index): each host's are sorted."""
    return _GPUS(cluster_id)


def _hardware_plain(cluster_id: int, index: SnapshotIndex) -> _HostsRead:
    """Every host and GPU row of the cluster read and built (two queries): the oracle of
    :func:`_hardware_kept`."""
    host_rows, gpu_rows = _host_rows(cluster_id), _gpu_rows(cluster_id)
    host_name_by_id = {hid: name for hid, name, *_ in host_rows}
    silent_since = _silent_since((hid, state, last) for hid, _n, state, _l, _d, last, *_r in host_rows)
    gpus_of_host: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    gpu_ref_by_id: dict[int, p.GpuRef] = {}
    for gid, hid, hname, idx, model, health, nominated_for in gpu_rows:
        ref = (hname, idx)
        gpu_ref_by_id[gid] = ref
        index.gpu_id_by_ref[ref] = gid
        index.gpu_host_id[gid] = hid
        if nominated_for is not None:
            index.nominated[gid] = nominated_for
        if hid in host_name_by_id:
            gpus_of_host[hid].append((idx, model, health))

    hosts: list[p.Host] = []
    for hid, name, state, labels, drain_now, _last, cpus, memory, drain_at in host_rows:
        index.host_id_by_name[name] = hid
        index.host_state_by_name[name] = state
        gpus = sorted(gpus_of_host.get(hid, ()))
        if not gpus:
            continue  # an agent that never said hello: no registered GPUs to schedule
        hosts.append(
            p.Host(
                name=name,
                model=gpus[0][1],
                gpu_health={idx: p.GpuHealth(health) for idx, _model, health in gpus},
                state=p.HostState(state),
                labels={str(k): str(v) for k, v in (labels or {}).items()},
                drain_now=bool(drain_now),
                cpus=cpus,
                memory=memory,
                drain_at=None if drain_at is None else epoch(drain_at),
            )
        )
    hosts.sort(key=lambda h: h.name)
    return hosts, gpu_ref_by_id, silent_since


def _silent_since(hosts: Iterable[tuple[int, str, datetime | None]]) -> dict[int, int]:
    """Each silent host's last heartbeat (epoch seconds) among ``hosts`` (pk, state, last heartbeat;
    rows of hosts not removed): an offline host's attempts are charged and have run only up to its
    last heartbeat (DESIGN.md §4), by accounting's one rule (:func:`~scheduler.accounting.host_silent_since`),
    so the budgets' usage and the workloads' charges agree."""
    out: dict[int, int] = {}
    for hid, state, last in hosts:
        beat = host_silent_since(state, None, last)  # the rows are of hosts not removed
        if beat is not None:
            out[hid] = epoch(beat)
    return out


@dataclass(slots=True)
class _Hardware:
    """The stable part of a cluster's hosts and GPUs (:func:`_hardware_kept`): what changes only
    with the fields whose every write forgets ``scheduler.hardware_memo.MEMO`` (a host's cluster,
    name, labels, CPUs, memory, removal; a GPU's host, index, model; rows created or deleted).
    Shared by the snapshots of a process: read it, never change it."""

    host_id_by_name: dict[str, int]
    """every host not removed (those with no GPU too)"""
    name_by_host_id: dict[int, str]
    gpu_id_by_ref: dict[p.GpuRef, int]
    gpu_host_id: dict[int, int]
    gpu_ref_by_id: dict[int, p.GpuRef]
    placed: tuple[tuple[int, p.Host, tuple[tuple[int, int], ...]], ...]
    """the hosts with GPUs, by name: (pk, the policy's host as if active, not draining, every GPU
    healthy, ((GPU index, GPU pk), ...) by index)"""


def _stable_hardware(host_rows: list[_HostRow], gpu_rows: list[_GpuRow]) -> _Hardware:
    """:class:`_Hardware` from the rows :func:`_hardware_plain` reads (their volatile columns unused)."""
    name_by_host_id = {hid: name for hid, name, *_ in host_rows}
    gpus_of_host: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    gpu_id_by_ref: dict[p.GpuRef, int] = {}
    gpu_host_id: dict[int, int] = {}
    gpu_ref_by_id: dict[int, p.GpuRef] = {}
    for gid, hid, hname, idx, model, _health, _nominated in gpu_rows:
        ref = (hname, idx)
        gpu_ref_by_id[gid] = ref
        gpu_id_by_ref[ref] = gid
        gpu_host_id[gid] = hid
        if hid in name_by_host_id:
            gpus_of_host[hid].append((idx, model, gid))  # one GPU per index on a host (a constraint)
    placed = []
    for hid, name, _state, labels, _drain, _last, cpus, memory, _at in host_rows:
        gpus = sorted(gpus_of_host.get(hid, ()))
        if not gpus:
            continue  # an agent that never said hello: no registered GPUs to schedule
        host = p.Host(
            name=name,
            model=gpus[0][1],
            gpu_health={idx: p.GpuHealth.HEALTHY for idx, _model, _gid in gpus},
            labels={str(k): str(v) for k, v in (labels or {}).items()},
            cpus=cpus,
            memory=memory,
        )
        placed.append((hid, host, tuple((idx, gid) for idx, _model, gid in gpus)))
    placed.sort(key=lambda entry: entry[1].name)
    return _Hardware(
        host_id_by_name={name: hid for hid, name, *_ in host_rows},
        name_by_host_id=name_by_host_id,
        gpu_id_by_ref=gpu_id_by_ref,
        gpu_host_id=gpu_host_id,
        gpu_ref_by_id=gpu_ref_by_id,
        placed=tuple(placed),
    )


def _hardware_kept(cluster_id: int, index: SnapshotIndex) -> _HostsRead:
    """:func:`_hardware_plain`'s answer with the stable part kept by the process between
    snapshots (:class:`_Hardware`, under ``scheduler.hardware_memo.MEMO``'s version: one cache
    read) and only the volatile part read: the hosts that are not active, are draining now or have
    a drain scheduled (their state, ``drain_now``, last heartbeat and ``drain_at``) and the GPUs
    that are not healthy or are nominated, two narrow queries (the installation's such GPUs, kept
    to the cluster's here, single-table). Every other host is active, not draining, with no drain
    scheduled, and every other GPU healthy and free. When the version
    changed (or nothing is kept) the full rows are read, the same two queries as the plain reading,
    and both parts come from them."""
    read: tuple[list[_HostRow], list[_GpuRow]] | None = None

    def load() -> _Hardware:
        nonlocal read
        read = (_host_rows(cluster_id), _gpu_rows(cluster_id))
        return _stable_hardware(*read)

    kept = MEMO.get(("snapshot", cluster_id), load)
    if read is not None:
        host_rows, gpu_rows = read
        volatile_hosts = [
            (hid, state, drain_now, last, drain_at)
            for hid, _n, state, _l, drain_now, last, _c, _m, drain_at in host_rows
            if state != _ACTIVE or drain_now or drain_at is not None
        ]
        volatile_gpus = [
            (gid, health, nominated)
            for gid, _h, _n, _i, _m, health, nominated in gpu_rows
            if health != _HEALTHY or nominated is not None
        ]
    else:
        volatile_hosts = _VOLATILE_HOSTS(cluster_id)
        volatile_gpus = _VOLATILE_GPUS()
    index.host_id_by_name = dict(kept.host_id_by_name)
    index.host_state_by_name = dict.fromkeys(kept.host_id_by_name, _ACTIVE)
    index.gpu_id_by_ref = dict(kept.gpu_id_by_ref)
    index.gpu_host_id = dict(kept.gpu_host_id)
    health: dict[int, str] = {}
    for gid, gpu_health, nominated in volatile_gpus:
        if gid not in kept.gpu_host_id:
            continue  # another cluster's, or registered after the kept rows' version was read
        if gpu_health != _HEALTHY:
            health[gid] = gpu_health
        if nominated is not None:
            index.nominated[gid] = nominated
    changed: dict[int, tuple[str, bool, int | None]] = {}
    for hid, state, drain_now, _last, drain_at in volatile_hosts:
        name = kept.name_by_host_id.get(hid)
        if name is None:
            continue  # registered after the kept rows' version was read
        index.host_state_by_name[name] = state
        changed[hid] = (state, bool(drain_now), None if drain_at is None else epoch(drain_at))
    silent_since = _silent_since((hid, state, last) for hid, state, _d, last, _a in volatile_hosts if hid in changed)
    for gid in health:
        changed.setdefault(kept.gpu_host_id[gid], (_ACTIVE, False, None))
    hosts: list[p.Host] = []
    for hid, host, gpus in kept.placed:
        if hid in changed:
            state, drain_now, drain_at = changed[hid]
            host = p.Host(
                name=host.name,
                model=host.model,
                gpu_health={idx: p.GpuHealth(health.get(gid, _HEALTHY)) for idx, gid in gpus},
                state=p.HostState(state),
                labels=host.labels,
                drain_now=drain_now,
                cpus=host.cpus,
                memory=host.memory,
                drain_at=drain_at,
            )
        hosts.append(host)
    return hosts, kept.gpu_ref_by_id, silent_since


@dataclass(slots=True)
class _KeptPending:
    """What the last snapshot of a cluster built from its pending rows, keyed by the rows' own
    content, so that the next snapshot reuses what did not change instead of building it again.

    ``workloads``: the arguments of :func:`policy_workload` → the policy's workload it built;
    ``details``: a stored ``pending_detail`` as the database's text → its decoded value. Both
    are pure functions of their keys, so an entry can never be stale: the rows themselves are
    read in full every time, only the Python work on them is kept (20,000 pending workloads:
    their JSON decoding and their frozen dataclasses were most of ``load_snapshot``'s CPU).
    Each snapshot keeps only what it met, so the memory stays that of one snapshot; several
    threads may replace it at once (the last one wins, each value is right whoever made it).
    """

    workloads: dict[tuple[Any, ...], p.Workload] = field(default_factory=dict)
    details: dict[Any, Any] = field(default_factory=dict)


_kept_pending: dict[int, _KeptPending] = {}
"""cluster pk → what its last live snapshot built from its pending rows (:class:`_KeptPending`)."""


def forget_kept() -> None:
    """Drop every cluster's kept pending workloads: the next snapshot builds all of them again
    (tests compare a snapshot with one built from scratch)."""
    _kept_pending.clear()


def _pending_rows(cluster_id: int, limits: dict[str, int] | None = None) -> list[tuple[Any, ...]]:
    """The pending workloads of ``cluster_id`` as rows: (pk, budget pk, GPUs, model, ``M``,
    submitted at (epoch seconds), seq, reason, detail (the stored JSON as text), CPUs, memory,
    waiting, group pk, group's ``%N`` limit, ``spec_version``, its own hold), in pk order.
    ``limits`` (a simulated snapshot's): each one's wall-time limit is read too and put there (pk
    as text → ``max_runtime_s``, those that have one), the rows returned as without it.

    The detail is selected as text: no converter runs per row (Django's JSON field decodes
    each one; :func:`load_snapshot` decodes only the texts it has not met). ``waiting`` is one
    hashed ``IN`` over the unmet dependencies, not a correlated ``EXISTS``: PostgreSQL costs the
    latter once per row, and above ``jit_above_cost`` (19,152 pending rows: cost 316,082) it
    compiled the query first, 140 of its 142 ms. Sorted here rather than by the database,
    whose sort of rows this wide spilled to disk (4.3 MB, +25 ms)."""
    rows = (_PENDING_WITH_LIMITS if limits is not None else _PENDING)(cluster_id)
    rows.sort(key=itemgetter(0))
    if limits is not None:
        limits.update((str(row[0]), int(row[-1])) for row in rows if row[-1] is not None)
        rows = [row[:-1] for row in rows]
    return rows


_RUNNING_FIELDS = (
    "workload__gpu_count",
    "workload__gpu_model",
    "workload__submitted_at",
    "workload__seq",
    "workload__group_id",
    "workload__max_runtime_s",
    "stop_reason",
    "workload__retries",
    "workload__retries_used",
    "workload__start_failures",
)
"""What a simulated snapshot reads more of each open attempt's workload (:func:`_running_facts`)."""


def _running_facts(
    attempt_rows: list[tuple[Any, ...]],
    index: SnapshotIndex,
    group_limits: Mapping[str, tuple[int, int]],
    limits: dict[str, int],
) -> tuple[dict[str, p.Workload], dict[str, int], frozenset[str]]:
    """A simulated snapshot's ``SnapshotIndex.running``, ``limits`` and ``requeued``: the workloads
    of its open attempts (those it kept, ``index.attempts``) as policy workloads, by
    :func:`policy_workload` as every workload, with their original submission time and sequence
    number, and with their array group where the snapshot caps it (``group_limits``); their
    wall-time limits added to ``limits`` (the pending ones' already there); the stopping attempts
    whose workloads run again on release (:func:`scheduler.stop_rules.runs_again`)."""
    from scheduler.stop_rules import MAX_START_FAILURES, runs_again

    running: dict[str, p.Workload] = {}
    requeued: set[str] = set()
    for (
        aid,
        wid,
        bid,
        _allocated,
        m,
        _started,
        _stop,
        cpus,
        memory,
        _cluster,
        n,
        model,
        sub,
        seq,
        g,
        limit,
        stop_reason,
        retries,
        retries_used,
        start_failures,
    ) in attempt_rows:
        if aid not in index.attempts:
            continue
        if index.attempts[aid].stopping and runs_again(
            stop_reason or "",
            retries_left=retries_used < retries,
            start_failures_left=start_failures < MAX_START_FAILURES,  # its end counts one more
        ):
            requeued.add(str(aid))
        key = str(wid)
        group = str(g) if g is not None and str(g) in group_limits else None
        running[key] = policy_workload(
            key, bid, n, model, m, sub, seq if seq is not None else wid, cpus, memory, group=group
        )
        if limit is not None:
            limits[key] = int(limit)
    return running, limits, frozenset(requeued)


def _pk_in(model: Any, column: str, ids: list[int]) -> Q | RawSQL:
    """``column IN ids`` for ``model``'s own table: on PostgreSQL ``= ANY(%s)`` with the ids as one
    array parameter. Django's ``__in`` compiles one placeholder per id, and psycopg adapts each:
    ~30 ms of CPU of a tick at 5,848 open attempts (its snapshot's read of their GPU rows, 52 ms of
    CPU in all, 14 ms with the array); the plan is the same (the column's index)."""
    if connection.vendor != "postgresql":
        return Q(**{f"{column}__in": ids})
    sql = f'"{model._meta.db_table}"."{column}" = ANY(%s)'
    return RawSQL(sql, (ids,), output_field=BooleanField())  # noqa: S611 - names from the model, ids a parameter


def _epoch_sql(column: str, *, up: bool = False) -> str:
    """SQL for a timestamp column as whole UNIX seconds, floored (or rounded up), as :func:`epoch`
    and :func:`epoch_up` do. SQLite keeps timestamps as ``YYYY-MM-DD HH:MM:SS[.ffffff]`` text (UTC)."""
    if connection.vendor == "sqlite":
        # Whole seconds parsed from the text's first 19 characters: SQLite's date functions keep
        # milliseconds, so .999999 of a second would round up to the next one.
        whole = f"CAST(strftime('%%s', substr({column}, 1, 19)) AS INTEGER)"
        return f"({whole} + (CAST(substr({column}, 21, 6) AS INTEGER) > 0))" if up else whole
    return f"CAST({'CEIL' if up else 'FLOOR'}(EXTRACT(EPOCH FROM {column})) AS BIGINT)"


def _epoch_col(model: Any, column: str, *, up: bool = False) -> RawSQL:
    """A timestamp column of ``model``'s own table as whole UNIX seconds (:func:`_epoch_sql`), to
    select in place of the column: the database computes it, so the driver parses no timestamp and
    Django runs no converter per row (tens of thousands of rows in a tick's snapshot). Only for the
    query's base table (its alias is the table's name)."""
    sql = _epoch_sql(f'"{model._meta.db_table}"."{column}"', up=up)
    return _IntegerSQL(sql, (), output_field=BigIntegerField())  # noqa: S611 - names from the model, no values


class _IntegerSQL(RawSQL):
    """SQL whose value the database already returns as a Python ``int`` (or None): Django's
    ``int()`` converter, which it adds to every integer expression and calls once per row and
    column, is left out (two columns of 20,000 rows in a snapshot)."""

    @property
    def convert_value(self) -> Callable[..., Any]:
        return self._convert_value_noop


def _caps(budget_rows: list[tuple[Any, ...]]) -> list[p.Cap]:
    """Each capped budget's cap (DESIGN.md §3.7): ``cap_gpu_hours × 3600`` GPU-seconds (whole
    seconds, rounded down) per ``cap_period_days`` days."""
    return [
        p.Cap(str(bid), int(Decimal(cap) * 3600), int(days) * 86400)
        for bid, *_rest, cap, days in budget_rows
        if cap is not None
    ]


def cap_records(
    caps: list[p.Cap],
    members: dict[str, tuple[int, ...]],
    now: datetime,
    cluster_id: int,
    *,
    counted_open: Sequence[int] = (),
) -> list[p.UsageRecord]:
    """The allocated usage the caps count besides the cluster's open attempts
    (``Snapshot.cap_records``): of the budgets under a cap (``members``), on every cluster, over
    the longest cap period before ``now``: closed allocated attempts, usage entries (intervals and
    lumps), and the open allocated attempts of other clusters, charged up to the last heartbeat of
    an offline host, else still running (``end`` :data:`~scheduler.policy.caps.STILL_RUNNING`).
    Unallocated and unfunded time never counts. ``counted_open``: the cluster's attempts the
    caller counts as open (read before this query), left out here if they have ended since (counted
    once: cap61, docs/locking.md). One query; none without caps."""
    if not caps:
        return []
    sql, params = _cap_rows_sql(caps, members, now, cluster_id, counted_open)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return [
        p.UsageRecord(str(bid), lo, hi, None, int(lump or 0)) if gpus is None else p.UsageRecord(str(bid), lo, hi, gpus)
        for bid, gpus, lo, hi, lump in rows
    ]


def cap_totals(
    caps: list[p.Cap],
    members: dict[str, tuple[int, ...]],
    now: datetime,
    cluster_id: int,
    *,
    counted_open: Sequence[int] = (),
) -> list[int]:
    """Each cap's usage at ``now`` (GPU-seconds, in ``caps``' order) of :func:`cap_records`' rows,
    summed in the database (left44): one aggregate over the same rows, each counted by the rule
    of :func:`~scheduler.policy.usage.windowed_usage` over its cap's own period (an interval
    ``gpus × overlap``, a lump when charged inside the period), so a tick builds no record per
    closed attempt and walks none per cap (0.176 s of CPU at 50,000 closed attempts and 10 caps,
    docs/benchmarks/api_load.md). The cluster's own open attempts are not in it (the snapshot
    adds them). Its oracle: :func:`scheduler.policy.caps.cap_usage` of :func:`cap_records`
    (tests/tick/test_cap_totals.py, on random attempts). ``counted_open``: as :func:`cap_records`'.
    One query; none without caps."""
    if not caps:
        return []
    rows, params = _cap_rows_sql(caps, members, now, cluster_id, counted_open)
    now_s = epoch(now)
    # (cap, budget, the period's start) for every budget under each cap
    under = [(i, int(b), now_s - caps[i].period) for b, idx in sorted(members.items()) for i in idx]
    if not under:
        return [0] * len(caps)
    big, small = ("GREATEST", "LEAST") if connection.vendor == "postgresql" else ("MAX", "MIN")
    lo, hi = f"{big}(r.lo, m.since)", f"{small}(r.hi, %s)"
    marks = ", ".join(["(CAST(%s AS BIGINT), CAST(%s AS BIGINT), CAST(%s AS BIGINT))"] * len(under))
    sql = f"""
        WITH r(budget_id, gpus, lo, hi, lump) AS ({rows}),
             m(cap, budget_id, since) AS (VALUES {marks})
        SELECT m.cap,
               SUM(CASE WHEN r.gpus IS NULL THEN CASE WHEN r.hi > m.since AND r.hi <= %s THEN r.lump ELSE 0 END
                        WHEN {hi} > {lo} THEN r.gpus * ({hi} - {lo})
                        ELSE 0 END)
          FROM r JOIN m ON m.budget_id = r.budget_id
         GROUP BY m.cap
    """  # noqa: S608 -- the rows' statement is cap_records' own; every value is a parameter
    values = [v for row in under for v in row]
    with connection.cursor() as cur:
        cur.execute(sql, [*params, *values, now_s, now_s, now_s])
        found = {int(cap): int(total or 0) for cap, total in cur.fetchall()}
    return [found.get(i, 0) for i in range(len(caps))]


def _cap_rows_sql(
    caps: list[p.Cap],
    members: dict[str, tuple[int, ...]],
    now: datetime,
    cluster_id: int,
    counted_open: Sequence[int] = (),
) -> tuple[str, list[Any]]:
    """:func:`cap_records`' statement and its parameters: rows ``(budget, gpus, lo, hi, lump)``,
    ``gpus`` NULL marking a lump of ``lump`` GPU-seconds at ``hi``; no closed attempt of
    ``counted_open`` (one array parameter on PostgreSQL, a JSON one on SQLite: any count)."""
    since = now - timedelta(seconds=max(cap.period for cap in caps))
    ids = sorted(int(k) for k in members) or [0]  # no member: no row (budget ids start at 1)
    a, w, link, entry = (m._meta.db_table for m in (Attempt, Workload, AttemptGPU, UsageEntry))
    # An open attempt runs up to its offline host's last heartbeat: the rule of its charge, compiled
    # from accounting's one statement of it (left40: it was spelled out here a second time).
    silent, silent_params = silent_until_sql("a.id")
    marks = ", ".join(["%s"] * len(ids))
    if connection.vendor == "postgresql":
        not_counted, counted = "NOT (a.id = ANY(%s))", [sorted(counted_open)]
    else:
        not_counted, counted = "a.id NOT IN (SELECT value FROM json_each(%s))", [json.dumps(sorted(counted_open))]
    sql = f"""
        SELECT w.budget_id,
               (SELECT COUNT(*) FROM {link} l WHERE l.attempt_id = a.id),
               {_epoch_sql("a.started_at")}, {_epoch_sql("a.ended_at")}, 0
          FROM {a} a JOIN {w} w ON w.id = a.workload_id
         WHERE a.allocated AND a.started_at IS NOT NULL AND a.ended_at IS NOT NULL AND a.ended_at > %s
           AND w.budget_id IN ({marks}) AND {not_counted}
        UNION ALL
        SELECT w.budget_id,
               (SELECT COUNT(*) FROM {link} l WHERE l.attempt_id = a.id AND l."open"),
               {_epoch_sql("a.started_at", up=True)},
               COALESCE({_epoch_sql(silent)}, %s),
               0
          FROM {a} a JOIN {w} w ON w.id = a.workload_id
         WHERE a.allocated AND a.started_at IS NOT NULL AND a.ended_at IS NULL AND w.cluster_id <> %s
           AND w.budget_id IN ({marks})
        UNION ALL
        SELECT e.budget_id, e.gpus, {_epoch_sql('e."start"')}, {_epoch_sql('e."end"')}, e.gpu_seconds
          FROM {entry} e
         WHERE e."end" > %s AND e.budget_id IN ({marks})
    """  # noqa: S608 -- table names come from the models' meta; every value is a parameter
    db_since = connection.ops.adapt_datetimefield_value(since)
    return sql, [db_since, *ids, *counted, *silent_params, STILL_RUNNING, cluster_id, *ids, db_since, *ids]


# The snapshot's fixed-shape reads, each compiled once per connection and run again with the
# cluster pk and times of each tick (:mod:`scheduler.prepared`, dbtick49: Django building their
# SQL was about half a small cluster's tick); ``Prepared.plain`` builds and runs each as usual
# (their oracle, tests/tick/test_prepared.py).

_BUDGETS = Prepared(
    "snapshot_budgets",
    (),
    lambda: Budget.objects.values_list(
        "id", "name", "parent_id", "shares", "archived_at", "hold", "on_cap", "cap_gpu_hours", "cap_period_days"
    ).order_by("id"),
)


def _open_attempts(simulated: bool) -> Callable[[], Any]:
    """Every open attempt (the cluster kept in Python, :func:`load_snapshot`), with a simulated
    snapshot's more fields (:data:`_RUNNING_FIELDS`) or not."""
    return lambda: (
        Attempt.objects.filter(ended_at__isnull=True)
        .annotate(
            started_s=_epoch_col(Attempt, "started_at", up=True),
            stop_s=_epoch_col(Attempt, "stop_requested_at", up=True),
        )
        .values_list(
            "id",
            "workload_id",
            "workload__budget_id",
            "allocated",
            "workload__min_runtime_s",
            "started_s",
            "stop_s",
            "workload__cpus",
            "workload__memory_bytes",
            "workload__cluster_id",
            *(_RUNNING_FIELDS if simulated else ()),
        )
        .order_by("id")
    )


_OPEN_ATTEMPTS = Prepared("snapshot_open_attempts", (), _open_attempts(False))
_OPEN_ATTEMPTS_SIMULATED = Prepared("snapshot_open_attempts_simulated", (), _open_attempts(True))

_CLOSED_USAGE = Prepared(
    "snapshot_closed_usage",
    (int, datetime),
    lambda cluster_id, since: (
        Attempt.objects.filter(
            workload__cluster_id=cluster_id,
            allocated=True,
            started_at__isnull=False,
            ended_at__gt=since,
        )
        .annotate(
            n_gpus=Count("gpu_links"), start_s=_epoch_col(Attempt, "started_at"), end_s=_epoch_col(Attempt, "ended_at")
        )
        .values_list("id", "workload__budget_id", "start_s", "end_s", "n_gpus")
        .order_by("id")
    ),
)

_USAGE_ENTRIES = Prepared(
    "snapshot_usage_entries",
    (int, datetime),
    lambda cluster_id, since: (
        UsageEntry.objects.filter(cluster_id=cluster_id, end__gt=since)
        .annotate(start_s=_epoch_col(UsageEntry, "start"), end_s=_epoch_col(UsageEntry, "end"))
        .values_list("budget_id", "start_s", "end_s", "gpus", "gpu_seconds")
        .order_by("id")
    ),
)


def _pending_query(with_limits: bool) -> Callable[[int], Any]:
    """:func:`_pending_rows`' queryset, with each one's wall-time limit last or not."""

    def build(cluster_id: int) -> Any:
        # A dependency ended failed or canceled under ``:ok`` is never met: its dependent waits until a
        # tick cancels it (``lifecycle.settle_dependencies``). Counted met, a chain's next link started
        # in the very tick that canceled the link before it.
        doomed = Q(
            condition=WorkloadDependency.Condition.OK, after__state__in=[Workload.State.FAILED, Workload.State.CANCELED]
        )
        unmet = (
            WorkloadDependency.objects.filter(~Q(after__state__in=Workload.FINAL_STATES) | doomed)
            .order_by()
            .values("workload_id")
        )
        return (
            Workload.objects.filter(cluster_id=cluster_id, state=Workload.State.PENDING)
            .annotate(
                waiting=ExpressionWrapper(Q(pk__in=unmet), output_field=BooleanField()),
                submitted_s=_epoch_col(Workload, "submitted_at"),
                detail_text=Cast("pending_detail", TextField()),
            )
            .values_list(
                "id",
                "budget_id",
                "gpu_count",
                "gpu_model",
                "min_runtime_s",
                "submitted_s",
                "seq",
                "pending_reason",
                "detail_text",
                "cpus",
                "memory_bytes",
                "waiting",
                "group_id",
                "group__limit",
                "spec_version",
                "hold",
                *(("max_runtime_s",) if with_limits else ()),
            )
            .order_by()
        )

    return build


_PENDING = Prepared("snapshot_pending", (int,), _pending_query(False))
_PENDING_WITH_LIMITS = Prepared("snapshot_pending_limits", (int,), _pending_query(True))

_HOSTS = Prepared(
    "snapshot_hosts",
    (int,),
    lambda cluster_id: Host.objects.filter(cluster_id=cluster_id, removed_at__isnull=True).values_list(
        "id", "name", "state", "labels", "drain_now", "last_heartbeat", "cpus", "memory_bytes", "drain_at"
    ),
)

_GPUS = Prepared(
    "snapshot_gpus",
    (int,),
    lambda cluster_id: (
        GPU.objects.registered()
        .filter(host__cluster_id=cluster_id)
        .values_list("id", "host_id", "host__name", "index", "model", "health", "nominated_for_id")
        .order_by()
    ),
)

_VOLATILE_HOSTS = Prepared(
    "snapshot_volatile_hosts",
    (int,),
    lambda cluster_id: (
        Host.objects.filter(cluster_id=cluster_id, removed_at__isnull=True)
        .filter(~Q(state=_ACTIVE) | Q(drain_now=True) | Q(drain_at__isnull=False))
        .values_list("id", "state", "drain_now", "last_heartbeat", "drain_at")
        .order_by()
    ),
)

_VOLATILE_GPUS = Prepared(
    "snapshot_volatile_gpus",
    (),
    lambda: (
        GPU.objects.filter(~Q(health=_HEALTHY) | Q(nominated_for__isnull=False))
        .values_list("id", "health", "nominated_for_id")
        .order_by()
    ),
)

PREPARED = (
    _BUDGETS,
    _OPEN_ATTEMPTS,
    _OPEN_ATTEMPTS_SIMULATED,
    _CLOSED_USAGE,
    _USAGE_ENTRIES,
    _PENDING,
    _PENDING_WITH_LIMITS,
    _HOSTS,
    _GPUS,
    _VOLATILE_HOSTS,
    _VOLATILE_GPUS,
)
"""Every prepared read of the snapshot (their oracle test runs each plain and prepared)."""
