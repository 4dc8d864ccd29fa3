"""left44: the caps' usage summed in the database (``snapshot.cap_totals``) equals the Python walk
over the same rows (``policy.caps.cap_usage`` of ``snapshot.cap_records``, the oracle) on random
attempts: closed (allocated or not, any number of GPUs, fractions of a second at either end, in,
across and before each period, near its edges), open on this cluster (the snapshot adds those),
open on another cluster (on an online or an offline host), and usage entries (intervals and
lumps), under caps of random periods on random budgets of a tree; and the tick's snapshot, which
sums them in the database, marks the same budgets capped with the same usage as a snapshot with
the records."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from budgets.models import Budget, UsageEntry
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload
from scheduler.policy.caps import cap_members, cap_usage
from scheduler.snapshot import cap_records, cap_totals, epoch, load_snapshot

DAY = 86400

_near_edges = st.sampled_from([DAY, 2 * DAY, 3 * DAY]).flatmap(lambda d: st.integers(d - 2, d + 2))
"""Seconds within 2 s of a period's length: records that begin or end at a period's edge."""

rows = st.lists(
    st.tuples(
        st.sampled_from(["closed", "closed", "closed", "open_elsewhere", "open_here", "entry", "lump"]),
        st.integers(0, 3),  # budget: org, alpha, beta, gamma (under alpha)
        st.integers(0, 3),  # GPUs
        st.integers(0, 4 * DAY) | _near_edges,  # started (or charged) this long before now
        st.integers(0, 2 * DAY) | _near_edges,  # ran this long
        st.booleans(),  # allocated
        st.integers(0, 999_999),  # microseconds at either end
    ),
    max_size=12,
)
caps = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 40)), max_size=4, unique_by=lambda c: c[0]
)


class _Undone(Exception):
    pass


@contextmanager
def _rolled_back():
    """What the block writes, undone (one hypothesis example's rows)."""
    try:
        with transaction.atomic():
            yield
            raise _Undone
    except _Undone:
        pass


def _world(tw, rows, caps, offline: bool) -> list[Budget]:
    gamma = Budget.objects.create(name="gamma", parent=tw.alpha, shares=1)
    budgets = [tw.org, tw.alpha, tw.beta, gamma]
    for b, days, hours in caps:
        Budget.objects.filter(pk=budgets[b].pk).update(cap_gpu_hours=Decimal(hours), cap_period_days=days)
    here = tw.host("h1", 16)
    elsewhere = Cluster.objects.create(name="c2")
    there = Host.objects.create(
        cluster=elsewhere,
        name="x1",
        token_hash="hash-x1",
        last_heartbeat=tw.now - timedelta(hours=5),
        state=Host.State.OFFLINE if offline else Host.State.ACTIVE,
    )
    GPU.objects.bulk_create([GPU(host=there, index=i, uuid=f"GPU-x1-{i}", model="H100") for i in range(16)])
    gpus_of = {here.pk: list(GPU.objects.filter(host=here)), there.pk: list(GPU.objects.filter(host=there))}
    free = {here.pk: list(gpus_of[here.pk]), there.pk: list(gpus_of[there.pk])}  # one open attempt per GPU
    for kind, b, gpus, ago, length, allocated, micro in rows:
        start = tw.now - timedelta(seconds=ago, microseconds=micro)
        end = start + timedelta(seconds=length, microseconds=micro // 2)
        if kind in ("entry", "lump"):
            UsageEntry.objects.create(
                budget=budgets[b],
                cluster=tw.cluster,
                start=start,
                end=end,
                gpus=gpus if kind == "entry" else None,
                gpu_seconds=length * (gpus + 1) if kind == "lump" else 0,
            )
            continue
        host = there if kind == "open_elsewhere" else here
        if kind.startswith("open"):
            held, free[host.pk] = free[host.pk][:gpus], free[host.pk][gpus:]
            if not held and kind == "open_here":
                continue  # an open attempt here holds a GPU
        else:
            held = gpus_of[host.pk][:gpus]
        workload = tw.workload(budget=budgets[b], gpus=max(gpus, 1))
        if host is there:
            Workload.objects.filter(pk=workload.pk).update(cluster=elsewhere)
        attempt = Attempt.objects.create(
            workload=workload,
            number=1,
            host=host,
            allocated=allocated,
            unfunded=not allocated,
            placed_at=start,
            started_at=start,
            ended_at=None if kind.startswith("open") else end,
        )
        open_link = kind.startswith("open")
        AttemptGPU.objects.bulk_create([AttemptGPU(attempt=attempt, gpu=g, open=open_link) for g in held])
    return budgets


def _caps_of(tw):
    from scheduler.snapshot import _caps

    rows = list(
        Budget.objects.values_list(
            "id", "name", "parent_id", "shares", "archived_at", "hold", "on_cap", "cap_gpu_hours", "cap_period_days"
        ).order_by("id")
    )
    snap, _ = load_snapshot(tw.cluster, tw.now)  # the policy's budgets, for the members
    return _caps(rows), snap.budgets


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows, caps=caps, offline=st.booleans())
def test_the_database_sums_what_the_python_walk_sums(tw, rows, caps, offline):
    with _rolled_back():
        _world(tw, rows, caps, offline)
        found, budgets = _caps_of(tw)
        members = cap_members(found, budgets)
        oracle = cap_usage(found, members, cap_records(found, members, tw.now, tw.cluster.pk), [], epoch(tw.now))
        assert cap_totals(found, members, tw.now, tw.cluster.pk) == oracle


@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows, caps=caps, offline=st.booleans())
def test_the_ticks_snapshot_marks_the_same_budgets_capped(tw, rows, caps, offline):
    with _rolled_back():
        _world(tw, rows, caps, offline)
        with_records, index = load_snapshot(tw.cluster, tw.now)
        summed, summed_index = load_snapshot(tw.cluster, tw.now, with_cap_records=False)
        assert summed.cap_records == ()
        assert summed_index.cap_used == index.cap_used
        assert [b.capped for b in summed.budgets] == [b.capped for b in with_records.budgets]


def test_no_caps_no_query(tw, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert cap_totals([], {}, tw.now, tw.cluster.pk) == []
