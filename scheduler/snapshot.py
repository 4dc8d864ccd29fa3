"""Build the policy's input from the database (DESIGN.md §2: snapshot → policy → decisions → apply).

:func:`load_snapshot` reads one cluster with a fixed number of bulk queries
(``values_list``, no per-row queries), so its cost in queries does not grow with
the number of hosts, attempts or pending workloads. Alongside the pure
:class:`~scheduler.policy.types.Snapshot` it returns a :class:`SnapshotIndex`
that maps the policy's string ids and ``(host, index)`` GPU refs back to
database primary keys, so the tick can apply decisions without re-reading rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count

from budgets.models import Budget, UsageEntry
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload
from scheduler.policy import types as p


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


def load_snapshot(cluster: Cluster | int, now: datetime) -> tuple[p.Snapshot, SnapshotIndex]:
    """Read cluster ``cluster`` at ``now`` (aware datetime) into a policy snapshot.

    Queries: hosts, GPUs, budgets, open attempts, their GPUs, pending workloads,
    closed allocated attempts inside the window, usage entries — eight in all,
    whatever the size of the cluster. Times become integer epoch seconds.
    """
    cluster_id = cluster if isinstance(cluster, int) else cluster.pk
    now_s = epoch(now)
    conf = settings.FAIRWAY
    window = int(conf["LOOKBACK_WINDOW_S"])
    since = now - timedelta(seconds=window)
    index = SnapshotIndex(cluster_id=cluster_id)

    # Hosts (not removed) and the GPUs of every host of the cluster. GPUs of removed
    # hosts are still read so that an attempt left on one can be named.
    host_rows = list(
        Host.objects.filter(cluster_id=cluster_id, removed_at__isnull=True).values_list(
            "id", "name", "state", "labels", "drain_now", "last_heartbeat"
        )
    )
    host_name_by_id = {hid: name for hid, name, *_ in host_rows}
    # An offline host's attempts are charged only up to its last heartbeat (DESIGN.md §4).
    silent_since = {
        hid: epoch(last) for hid, _n, state, _l, _d, last in host_rows if state == Host.State.OFFLINE and last
    }
    gpu_rows = list(
        GPU.objects.filter(host__cluster_id=cluster_id).values_list(
            "id", "host_id", "host__name", "index", "model", "health", "nominated_for_id"
        )
    )
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
    for hid, name, state, labels, drain_now, _last in host_rows:
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
            )
        )
    hosts.sort(key=lambda h: h.name)

    budgets = [
        p.Budget(
            key=str(bid),
            name=name,
            parent=str(parent_id) if parent_id is not None else None,
            shares=shares,
            archived=archived_at is not None,
            hold=hold,
            capped=False,
            on_cap=p.OnCap(on_cap),
        )
        for bid, name, parent_id, shares, archived_at, hold, on_cap in Budget.objects.values_list(
            "id", "name", "parent_id", "shares", "archived_at", "hold", "on_cap"
        ).order_by("id")
    ]

    # Open attempts and the GPUs they hold.
    attempt_rows = list(
        Attempt.objects.filter(workload__cluster_id=cluster_id, ended_at__isnull=True)
        .values_list(
            "id",
            "workload_id",
            "workload__budget_id",
            "allocated",
            "workload__min_runtime_s",
            "started_at",
            "stop_requested_at",
        )
        .order_by("id")
    )
    links: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for aid, gid, rank in AttemptGPU.objects.filter(
        open=True, attempt__ended_at__isnull=True, attempt__workload__cluster_id=cluster_id
    ).values_list("attempt_id", "gpu_id", "rank"):
        links[aid].append((rank, gid))
    attempts: list[p.Attempt] = []
    for aid, wid, bid, allocated, min_runtime, started_at, stop_at in attempt_rows:
        gpu_ids = tuple(gid for _rank, gid in sorted(links.get(aid, ()), key=lambda rg: (rg[0], gpu_ref_by_id[rg[1]])))
        if not gpu_ids:
            continue  # ended between the two reads (READ COMMITTED): it holds nothing any more
        index.attempts[aid] = OpenAttemptInfo(
            workload_id=wid,
            host_ids=frozenset(index.gpu_host_id[g] for g in gpu_ids),
            gpu_ids=gpu_ids,
            stopping=stop_at is not None,
        )
        attempts.append(
            p.Attempt(
                id=str(aid),
                workload=str(wid),
                budget=str(bid),
                gpus=tuple(gpu_ref_by_id[g] for g in gpu_ids),
                allocated=allocated,
                min_runtime=min_runtime,
                started_at=epoch_up(started_at) if started_at is not None else None,
                stopping=stop_at is not None,
                charged_until=min(
                    (silent_since[h] for h in index.attempts[aid].host_ids if h in silent_since), default=None
                ),
            )
        )

    pending: list[p.Workload] = []
    for wid, bid, count, model, min_runtime, submitted_at, seq, reason, detail in (
        Workload.objects.filter(cluster_id=cluster_id, state=Workload.State.PENDING)
        .values_list(
            "id",
            "budget_id",
            "gpu_count",
            "gpu_model",
            "min_runtime_s",
            "submitted_at",
            "seq",
            "pending_reason",
            "pending_detail",
        )
        .order_by("id")
    ):
        index.pending_reason[wid] = (reason, detail)
        pending.append(
            p.Workload(
                id=str(wid),
                budget=str(bid),
                gpus=count,
                model=model,
                min_runtime=min_runtime,
                submitted_at=epoch(submitted_at),
                seq=seq if seq is not None else wid,
            )
        )

    usage: list[p.UsageRecord] = [
        p.UsageRecord(budget=str(bid), start=epoch(started_at), end=epoch(ended_at), gpus=gpus)
        for bid, started_at, ended_at, gpus in Attempt.objects.filter(
            workload__cluster_id=cluster_id,
            allocated=True,
            started_at__isnull=False,
            ended_at__gt=since,
        )
        .annotate(n_gpus=Count("gpu_links"))
        .values_list("workload__budget_id", "started_at", "ended_at", "n_gpus")
        .order_by("id")
        if gpus
    ]
    usage.extend(
        p.UsageRecord(
            budget=str(bid),
            start=epoch(start),
            end=epoch(end),
            gpus=gpus,
            gpu_seconds=gpu_seconds,
        )
        for bid, start, end, gpus, gpu_seconds in UsageEntry.objects.filter(cluster_id=cluster_id, end__gt=since)
        .values_list("budget_id", "start", "end", "gpus", "gpu_seconds")
        .order_by("id")
    )

    nominations: dict[str, list[p.GpuRef]] = defaultdict(list)
    for gid, wid in index.nominated.items():
        nominations[str(wid)].append(gpu_ref_by_id[gid])

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
    )
    return snapshot, index
